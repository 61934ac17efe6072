"""kill -9 mid-transaction and a zombie worker, on a real broker; balances stay exact."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from examples.balances import cluster as balances
from examples.balances.transactions import generate
from kafka_harness.broker import KafkaBroker
from tests.kafka.cluster.helpers import feed_until, has_event, wait_caught_up


def test_kill_9_mid_transaction(cluster: KafkaBroker, workers: Callable[..., Any]) -> None:
    app = "kill9"
    bootstrap = cluster.bootstrap_servers
    txns = list(generate(2000, 40, seed=2))
    balances.create_topics(bootstrap, 6, app)
    victim = workers("w1", app, "--hang-in-txn-after", "1")
    others = [workers("w2", app), workers("w3", app)]
    for worker in (victim, *others):
        worker.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    fed = feed_until(bootstrap, app, txns, has_event(victim, "in-transaction"))
    hung = victim.wait_for(lambda e: e["event"] == "in-transaction")
    assert hung["commits"] == 1
    victim.kill()  # records of the open transaction are on the broker, uncommitted
    balances.feed(bootstrap, txns[fed:], app)
    wait_caught_up(bootstrap, app, timeout_s=150)
    ok, detail = balances.verify(bootstrap, txns, app)
    assert ok, detail
    taken_over = [
        e
        for w in others
        for e in w.all_events()
        if e["event"] == "assignment" and len(e["partitions"]) == 3
    ]
    assert taken_over, "the survivors never took over the victim's partitions"


def test_stalled_worker_does_not_commit_after_leaving(
    cluster: KafkaBroker, workers: Callable[..., Any]
) -> None:
    # In-process stall (a long GC pause, a blocking call) inside a transaction, longer than
    # max.poll.interval.ms: librdkafka leaves the group, and the commit must not go through.
    app = "stall"
    bootstrap = cluster.bootstrap_servers
    txns = list(generate(600, 20, seed=6))
    balances.create_topics(bootstrap, 2, app)
    stalled = workers(
        "s1", app, "--stall-in-txn-after", "1", "--stall-s", "6", "--max-poll-interval-ms", "3000"
    )
    stalled.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    fed = feed_until(bootstrap, app, txns, has_event(stalled, "stalled"))
    aborted = stalled.wait_for(lambda e: e["event"] == "aborted", timeout_s=30)
    assert aborted["code"] == "MEMBER_LEFT_GROUP"
    balances.feed(bootstrap, txns[fed:], app)
    wait_caught_up(bootstrap, app)
    ok, detail = balances.verify(bootstrap, txns, app)
    assert ok, detail


def test_zombie_is_fenced(cluster: KafkaBroker, workers: Callable[..., Any]) -> None:
    # The zombie is paused (SIGSTOP) inside a transaction: its records are produced, not
    # committed.  The broker expires its membership (session timeout, 6 s here) and gives
    # its partitions to the other worker, whose restore waits on the open transaction
    # (transaction.timeout.ms is 60 s for the zombie, so only fencing can end it soon).
    # Resumed, the zombie sends its offsets with its old member epoch: refused (KIP-447),
    # it aborts, and nothing it did counts.  The fenced zombie then joins again as a new
    # member and the range assignor hands it back half of the partitions, often before
    # w2 has finished restoring them: that is the group working, not a failed takeover.
    # So the test does not wait for w2 to run all four partitions; it waits until every
    # partition runs somewhere and the group has processed every input, then checks.
    app = "zombie"
    bootstrap = cluster.bootstrap_servers
    txns = list(generate(1500, 30, seed=3))
    balances.create_topics(bootstrap, 4, app)
    zombie = workers(
        "z1",
        app,
        "--stall-in-txn-after",
        "1",
        "--stall-s",
        "2",
        "--transaction-timeout-ms",
        "60000",
    )
    zombie.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 4)
    other = workers("w2", app)
    other.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    zombie.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    fed = feed_until(bootstrap, app, txns, has_event(zombie, "stalled"))
    zombie.pause()
    try:
        # w2 is assigned the zombie's partitions; their restore blocks on its transaction
        other.wait_for_log(
            "assigned [", lambda line: not line.startswith("assigned []"), count=2, timeout_s=60
        )
    finally:
        zombie.resume()
    aborted = zombie.wait_for(lambda e: e["event"] == "aborted", timeout_s=60)
    assert aborted["code"] in FENCED_MEMBER_CODES, aborted
    balances.feed(bootstrap, txns[fed:], app)
    # If the zombie's abort did not reach the coordinator, its transaction ends by its
    # 60 s timeout plus the broker's abort scan: 150 s covers that path too.
    wait_caught_up(bootstrap, app, timeout_s=150)
    wait_running_everywhere([zombie, other], partitions=4, timeout_s=30)
    ok, detail = balances.verify(bootstrap, txns, app)
    assert ok, detail


FENCED_MEMBER_CODES = {"UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH", "STALE_MEMBER_EPOCH"}
"""What the broker answers a zombie's ``send_offsets_to_transaction`` (KIP-447 / KIP-848)."""


def wait_running_everywhere(workers: Sequence[Any], *, partitions: int, timeout_s: float) -> None:
    """Wait until the workers' latest assignments together run every partition exactly once."""
    deadline = time.monotonic() + timeout_s
    while True:
        latest = [
            next(
                (e["partitions"] for e in reversed(w.all_events()) if e["event"] == "assignment"),
                [],
            )
            for w in workers
        ]
        running = sorted(p for ps in latest for p in ps)
        if running == list(range(partitions)):
            return
        assert time.monotonic() < deadline, f"partitions running after {timeout_s}s: {latest}"
        time.sleep(0.1)
