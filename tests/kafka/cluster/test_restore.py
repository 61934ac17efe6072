"""Restore decisions on a real broker: incremental when fresh, full when stale or recreated."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from examples.balances import cluster as balances
from examples.balances.transactions import generate
from kafka_harness.broker import KafkaBroker
from statestore.kafka import changelog_topic_name
from statestore.serdes import IntSerde
from tests.kafka.cluster.helpers import wait_caught_up


def _restored(worker: Any) -> list[dict[str, Any]]:
    return [e for e in worker.all_events() if e["event"] == "restored"]


def _run_until_restored(workers: Callable[..., Any], app: str, partitions: int, *extra: str) -> Any:
    worker = workers("w1", app, *extra)
    worker.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == partitions)
    return worker


def test_stale_state_restores_fully(cluster: KafkaBroker, workers: Callable[..., Any]) -> None:
    app = "stale"
    bootstrap = cluster.bootstrap_servers
    retention = ("--delete-retention-ms", "10000", "--staleness-margin-ms", "0")
    txns = list(generate(600, 20, seed=4))
    balances.create_topics(bootstrap, 2, app)
    first = _run_until_restored(workers, app, 2, *retention)
    balances.feed(bootstrap, txns[:300], app)
    wait_caught_up(bootstrap, app)
    first.stop()

    fresh = _run_until_restored(workers, app, 2, *retention)
    assert [e["rebuilt"] for e in _restored(fresh)] == [False, False], _restored(fresh)
    fresh.stop()
    time.sleep(10.5)  # older than delete.retention.ms now: tombstones may be gone

    stale = _run_until_restored(workers, app, 2, *retention)
    events = _restored(stale)
    assert [e["rebuilt"] for e in events] == [True, True], events
    assert all("stale" in e["reason"] for e in events)
    assert sum(e["records"] for e in events) > 0
    balances.feed(bootstrap, txns[300:], app)
    wait_caught_up(bootstrap, app)
    ok, detail = balances.verify(bootstrap, txns, app)
    assert ok, detail


def test_recreated_topic_is_detected(cluster: KafkaBroker, workers: Callable[..., Any]) -> None:
    app = "recreate"
    bootstrap = cluster.bootstrap_servers
    balances.create_topics(bootstrap, 1, app)
    first = _run_until_restored(workers, app, 1)
    balances.feed(bootstrap, list(generate(100, 10, seed=5)), app)
    wait_caught_up(bootstrap, app)
    first.stop()

    # Delete and recreate the changelog with *more* records than before, so the stored
    # offset lies inside the new topic's range: only the topic id can tell.
    topic = changelog_topic_name(app, balances.STORE_NAME)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=1, config={"cleanup.policy": "compact"})]
        )
        try:
            futures[topic].result(timeout=30)
            break
        except KafkaException:  # deletion still in progress
            assert time.monotonic() < deadline
            time.sleep(0.5)
    producer = Producer({"bootstrap.servers": bootstrap})
    seeded = {f"new-{i:03d}": i for i in range(500)}
    for key, value in seeded.items():
        producer.produce(topic, key=key.encode(), value=IntSerde().serialize(value), partition=0)
    assert producer.flush(30) == 0

    second = _run_until_restored(workers, app, 1)
    (event,) = _restored(second)
    assert event["rebuilt"] and "recreated" in event["reason"], event
    assert event["records"] == len(seeded)
    assert balances.committed_balances(bootstrap, app) == seeded
