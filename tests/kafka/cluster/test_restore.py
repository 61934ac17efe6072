"""Restore decisions on a real broker: incremental when fresh, full when stale or recreated."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from examples.balances import cluster as balances
from examples.balances.transactions import generate
from kafka_harness.broker import KafkaBroker
from statestore.config import RocksDBConfig
from statestore.kafka import changelog_topic_name
from statestore.kafka.restore import stored_applied_time_ms
from statestore.serdes import IntSerde
from statestore.stores.engine import RocksDBEngine
from tests.kafka.cluster.helpers import wait_caught_up


def _restored(worker: Any) -> list[dict[str, Any]]:
    return [e for e in worker.all_events() if e["event"] == "restored"]


def _run_until_restored(workers: Callable[..., Any], app: str, partitions: int, *extra: str) -> Any:
    worker = workers("w1", app, *extra)
    worker.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == partitions)
    return worker


def _applied_times_ms(state_dir: Path, partitions: int) -> list[int | None]:
    """The applied time each partition's RocksDB holds: what the next restore judges by.

    Read with the worker stopped (RocksDB allows one process at a time)."""
    stamps = []
    for p in range(partitions):
        (path,) = state_dir.rglob(f"{balances.STORE_NAME}-{p}")
        engine = RocksDBEngine.open(path, config=RocksDBConfig(), cache=None)
        try:
            stamps.append(stored_applied_time_ms(engine))
        finally:
            engine.close()
    return stamps


def _wait_older_than(stamps_ms: list[int], horizon_ms: int, timeout_s: float = 60) -> None:
    """Until every stamp is more than ``horizon_ms`` old by the wall clock (the clock the
    restore decision reads), with a deadline."""
    deadline = time.monotonic() + horizon_ms / 1000 + timeout_s
    while time.time() * 1000 - max(stamps_ms) <= horizon_ms:
        assert time.monotonic() < deadline, (stamps_ms, horizon_ms, time.time())
        time.sleep(0.05)


def test_stale_state_restores_fully(
    cluster: KafkaBroker, workers: Callable[..., Any], tmp_path: Path
) -> None:
    app = "stale"
    bootstrap = cluster.bootstrap_servers
    # delete.retention.ms 10 s with no margin: a restart right after a clean close is fresh.
    # The stale restart keeps the topic's delete.retention.ms and takes a margin of 8 s, so
    # state older than 2 s is stale to it (the rule is age > delete.retention.ms - margin).
    retention = ("--delete-retention-ms", "10000", "--staleness-margin-ms", "0")
    stale_retention = ("--delete-retention-ms", "10000", "--staleness-margin-ms", "8000")
    stale_horizon_ms = 10_000 - 8_000
    txns = list(generate(600, 20, seed=4))
    balances.create_topics(bootstrap, 2, app)
    first = _run_until_restored(workers, app, 2, *retention)
    balances.feed(bootstrap, txns[:300], app)
    wait_caught_up(bootstrap, app)
    first.stop()

    fresh = _run_until_restored(workers, app, 2, *retention)
    assert [e["rebuilt"] for e in _restored(fresh)] == [False, False], _restored(fresh)
    fresh.stop()
    stamps = _applied_times_ms(tmp_path / "state-w1", 2)
    assert all(stamp is not None for stamp in stamps), stamps  # a clean close stamps the state
    _wait_older_than([stamp for stamp in stamps if stamp is not None], stale_horizon_ms)

    stale = _run_until_restored(workers, app, 2, *stale_retention)
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
