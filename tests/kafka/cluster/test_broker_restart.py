"""The broker goes away and comes back while a worker's transaction is in flight.

The worker produces its transaction's records (changelog and outputs, acknowledged by
the broker), then waits inside the transaction, before it sends the input offsets and
commits.  Meanwhile the suite's broker is stopped (cleanly, or killed) and started
again on the same address.  Then the worker goes on with that transaction against the
restarted broker.  Whatever the coordinator decided meanwhile (the transaction went on,
or it was aborted because it outlived ``transaction.timeout.ms`` while the broker was
away), the worker must either make progress or stop with a typed error, and the
oracle (balances recomputed from the inputs, read back from the changelog topic and
the output topic) must hold exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples.balances import cluster as balances
from examples.balances.transactions import generate
from kafka_harness.broker import KafkaBroker
from tests.kafka.cluster.conftest import BROKER_OVERRIDES
from tests.kafka.cluster.helpers import feed_until, has_event, wait_caught_up


@pytest.mark.xfail(
    strict=False,
    reason="open defect: in 3 of 6 runs under load the worker did not catch up within 150 s"
    " (kill: one changelog partition kept a transactional batch without a marker, a"
    " hanging transaction holding its last stable offset, so its restore made no progress;"
    " stop: the worker processed nothing after its first failed commit and rewind, no"
    " commit, no error); runs and reports, does"
    " not gate CI until fixed",
)
@pytest.mark.parametrize("how", ["stop", "kill"])
def test_broker_restart_during_a_commit(
    cluster: KafkaBroker, workers: Callable[..., Any], tmp_path: Path, how: str
) -> None:
    app = f"brokerrestart-{how}"
    bootstrap = cluster.bootstrap_servers
    txns = list(generate(1200, 30, seed=7))
    balances.create_topics(bootstrap, 2, app)
    release = tmp_path / "release"
    worker = workers("r1", app, "--hang-in-txn-after", "1", "--release-file", str(release))
    worker.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    fed = feed_until(bootstrap, app, txns, has_event(worker, "in-transaction"))
    held = worker.wait_for(lambda e: e["event"] == "in-transaction")
    assert held["commits"] == 1

    if how == "stop":
        cluster.stop()
    else:
        cluster.kill()
    cluster.start(BROKER_OVERRIDES, keep_ports=True)
    assert cluster.bootstrap_servers == bootstrap
    release.touch()  # the held transaction goes on against the restarted broker
    worker.wait_for(lambda e: e["event"] == "released", timeout_s=30)

    balances.feed(bootstrap, txns[fed:], app)
    wait_caught_up(bootstrap, app, timeout_s=150)
    ok, detail = balances.verify(bootstrap, txns, app)
    assert ok, detail
    events = worker.all_events()
    after = events[events.index(next(e for e in events if e["event"] == "released")) :]
    commits = [e for e in after if e["event"] == "commit"]
    aborts = [e for e in after if e["event"] == "aborted"]
    # progress, not a silent loop: the worker committed again, and a failed attempt (if
    # any) was counted with the reason the client gave
    assert commits, events[-10:]
    assert all(e["code"] for e in aborts), aborts
    assert worker.proc.poll() is None, "the worker stopped"
    print(f"{how}: {len(aborts)} failed commit(s) after the restart {[e['code'] for e in aborts]}")
