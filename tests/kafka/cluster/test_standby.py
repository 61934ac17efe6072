"""Standby replicas: a failover restores only the tail from the changelog; balances stay exact."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient

from examples.balances import cluster as balances
from examples.balances.transactions import generate
from kafka_harness.broker import KafkaBroker
from statestore.kafka import changelog_topic_name
from statestore.kafka.standby import standby_partitions
from statestore.kafka.topics import watermarks
from tests.kafka.cluster.helpers import wait_caught_up


def wait_standby_caught_up(worker: Any, partition: str, timeout_s: float = 60) -> None:
    """Wait until the worker's latest ``standby-lag`` event says 0 for every store of
    ``partition`` (the worker prints one whenever its standbys' lag changes)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lags = [e["lag"] for e in worker.all_events() if e["event"] == "standby-lag"]
        stores = lags[-1].get(partition) if lags else None
        if stores and all(lag == 0 for lag in stores.values()):
            return
        assert time.monotonic() < deadline, f"standby of {partition} not caught up: {lags[-3:]}"
        time.sleep(0.05)


def test_placement_is_a_ring_over_sorted_member_ids() -> None:
    owners = {"b": [2, 3], "a": [0, 1], "c": [4, 5]}
    assert standby_partitions(owners, "a", 1) == {4, 5}
    assert standby_partitions(owners, "b", 1) == {0, 1}
    assert standby_partitions(owners, "c", 2) == {0, 1, 2, 3}
    assert standby_partitions(owners, "c", 5) == {0, 1, 2, 3}  # never its own
    assert standby_partitions({"a": [0, 1]}, "a", 1) == set()
    assert standby_partitions(owners, "unknown", 1) == set()


def test_failover_to_a_standby_restores_only_the_tail(
    cluster: KafkaBroker, workers: Callable[..., Any]
) -> None:
    app = "standby"
    bootstrap = cluster.bootstrap_servers
    txns = list(generate(2000, 200, seed=8))
    balances.create_topics(bootstrap, 2, app)
    first = workers("w1", app, "--standby-replicas", "1")
    first.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    second = workers("w2", app, "--standby-replicas", "1")
    for worker in (first, second):
        worker.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 1)
        worker.wait_for(lambda e: e["event"] == "standbys" and len(e["partitions"]) == 1)
    for start in range(0, 1500, 150):  # ten commits or more: hundreds of changelog records
        balances.feed(bootstrap, txns[start : start + 150], app)
        wait_caught_up(bootstrap, app)  # this chunk committed before the next is fed
    (moved,) = next(
        e["partitions"] for e in reversed(first.all_events()) if e["event"] == "assignment"
    )
    wait_standby_caught_up(second, str(moved))  # the standby has tailed the last commits
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = changelog_topic_name(app, balances.STORE_NAME)
    _low, high = watermarks(admin, topic, [moved])[moved]
    first.kill()
    second.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2, 60)
    restored = [
        e for e in second.all_events() if e["event"] == "restored" and e["partition"] == moved
    ]
    assert restored and not restored[-1]["rebuilt"], restored
    assert high > 200 and restored[-1]["records"] < high / 10, (restored, high)
    balances.feed(bootstrap, txns[1500:], app)
    wait_caught_up(bootstrap, app)
    ok, detail = balances.verify(bootstrap, txns, app)
    assert ok, detail


def test_a_member_that_warms_up_before_joining_restores_only_a_tail(
    cluster: KafkaBroker, workers: Callable[..., Any]
) -> None:
    # KIP-441's warm-up as far as librdkafka allows: the new member keeps standbys of every
    # partition until each is caught up, and only then joins; the partitions the group then
    # moves to it restore only what was committed since (here: nothing, the inputs wait).
    app = "warmup"
    bootstrap = cluster.bootstrap_servers
    txns = list(generate(1500, 2000, seed=11))
    balances.create_topics(bootstrap, 2, app)
    first = workers("w1", app)
    first.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    balances.feed(bootstrap, txns[:1000], app)
    wait_caught_up(bootstrap, app)
    changelog = changelog_topic_name(app, balances.STORE_NAME)
    ends = watermarks(AdminClient({"bootstrap.servers": bootstrap}), changelog, [0, 1])
    assert min(high for _low, high in ends.values()) > 100, ends
    second = workers("w2", app, "--warmup-before-join", "--acceptable-recovery-lag", "0")
    second.wait_for_log("warm-up done", lambda line: "within 0 of" in line, timeout_s=90)
    moved = second.wait_for(lambda e: e["event"] == "restored", timeout_s=90)
    # the partition came with its state: a tail at most, not the changelog's ~hundreds
    assert not moved["rebuilt"] and moved["records"] <= 5, moved
    second.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 1)
    balances.feed(bootstrap, txns[1000:], app)
    wait_caught_up(bootstrap, app)
    ok, detail = balances.verify(bootstrap, txns, app)
    assert ok, detail
