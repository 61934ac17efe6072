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

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples.balances import cluster as balances
from examples.balances.transactions import generate
from kafka_harness.broker import KafkaBroker
from tests.kafka.cluster.conftest import BROKER_OVERRIDES
from tests.kafka.cluster.helpers import feed_until, has_event, wait_caught_up


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_broker_restart_during_a_commit(
    cluster: KafkaBroker, workers: Callable[..., Any], tmp_path: Path, how: str
) -> None:
    app = f"brokerrestart-{how}"
    bootstrap = cluster.bootstrap_servers
    txns = list(generate(1200, 30, seed=7))
    balances.create_topics(bootstrap, 2, app)
    release = tmp_path / "release"
    # After a kill -9 the restarted single-node broker is not registered with its controller
    # until the dead incarnation's session expires (broker.session.timeout.ms); meanwhile its
    # partitions have no leader, and the transaction coordinator, which is already serving,
    # skips the markers of a transaction it ends then ("Couldn't find leader endpoint ...
    # likely deleted already and hence can be skipped"): a hanging transaction no client can
    # end (docs/scale-out.md).  So the held transaction outlives that window (it may not
    # time out in it), and the worker goes on only once the broker is registered again.
    timeout_ms = "60000" if how == "kill" else "10000"
    worker = workers(
        "r1",
        app,
        "--hang-in-txn-after",
        "1",
        "--release-file",
        str(release),
        "--transaction-timeout-ms",
        timeout_ms,
    )
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
    if how == "kill":
        _wait_registered(cluster)
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


_REGISTERED = "Successfully registered broker"
"""The broker's console line once its controller accepted this incarnation."""


def _wait_registered(cluster: KafkaBroker, timeout_s: float = 90) -> None:
    """Wait until the broker started last is registered (its partitions have a leader again)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = cluster.console_log.read_text(errors="replace")
        if _REGISTERED in text[text.rfind("===== start ") :]:
            return
        assert time.monotonic() < deadline, f"the broker did not register in {timeout_s}s"
        time.sleep(0.2)
