"""Scale 1 -> 3 -> 1 workers on a real broker; balances stay exact (the oracle: a plain sum)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from examples.balances import cluster as balances
from examples.balances.transactions import generate
from kafka_harness.broker import KafkaBroker
from tests.kafka.cluster.helpers import wait_caught_up


def test_scale_out_and_in_keeps_balances_exact(
    cluster: KafkaBroker, workers: Callable[..., Any]
) -> None:
    app = "scale"
    bootstrap = cluster.bootstrap_servers
    txns = list(generate(3000, 40, seed=1))
    balances.create_topics(bootstrap, 6, app)
    first = workers("w1", app)
    first.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 6)
    balances.feed(bootstrap, txns[:1000], app)
    wait_caught_up(bootstrap, app)

    more = [workers("w2", app), workers("w3", app)]
    for worker in (first, *more):
        worker.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    balances.feed(bootstrap, txns[1000:2000], app)
    wait_caught_up(bootstrap, app)
    for worker in more:
        assert any(e["event"] == "commit" and e["records"] > 0 for e in worker.all_events())
        worker.stop()
    first.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 6)
    balances.feed(bootstrap, txns[2000:], app)
    wait_caught_up(bootstrap, app)

    ok, detail = balances.verify(bootstrap, txns, app)
    assert ok, detail
    restored = [e for e in first.all_events() if e["event"] == "restored"]
    # the partitions that came back to w1 restored incrementally (its RocksDB was kept)
    assert any(not e["rebuilt"] and e["records"] > 0 for e in restored), restored
