"""A key-value store with a TTL in distributed mode, against a real broker.

The broker's cleaner knows no TTL, so what must hold is the rest of the rule
(docs/time.md, "TTL"): reads never return an expired value; a restore from the
topic into an empty state directory applies an expired value as a delete
(RocksDB never holds it); so does a standby replica, and its promotion returns
no expired value; the sweep's tombstones are produced in the
processor's transaction.  Expectations come from the rule applied to the
records' timestamps and the injected clocks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_harness.broker import KafkaBroker
from statestore import IntSerde, TtlSettings
from statestore.kafka import (
    KafkaStoreSpec,
    Processor,
    ProcessorConfig,
    ProcessorContext,
    TaskRestored,
    changelog_topic_name,
)
from tests.kafka.cluster.helpers import poll_each, standbys_caught_up
from tests.kafka.cluster.oracle import run_until

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 2
TTL_MS = 60_000
NOW = int(time.time() * 1000)  # the broker refuses timestamps far from its clock
APP = "ttl-app"
INPUT = "ttl-app-in"


def process(context: ProcessorContext, message: Any) -> None:
    record = msgpack.unpackb(message.value())
    context.store("seen").put(message.key().decode(), record["seq"], timestamp_ms=record["ts"])


def ttl_processor(
    config: ProcessorConfig,
    state_dir: Path,
    clock: list[int],
    *,
    sweep_interval_ms: int,
    on_restored: Any = None,
) -> Processor:
    """A processor of one TTL store "seen" (record timestamps) whose wall clock is ``clock``."""
    ttl = TtlSettings(ttl_ms=TTL_MS, timestamp="record", sweep_interval_ms=sweep_interval_ms)
    return Processor(
        config,
        state_dir,
        [KafkaStoreSpec.ttl("seen", ttl=ttl, value_serde=IntSerde())],
        process,
        wall_clock_ms=lambda: clock[0],
        on_restored=on_restored,
    )


def processor(
    bootstrap: str, state_dir: Path, clock: list[int], sweep_interval_ms: int
) -> Processor:
    config = ProcessorConfig(
        application_id=APP,
        bootstrap_servers=bootstrap,
        input_topics=(INPUT,),
        instance_id="ttl-1",
        commit_interval_ms=100,
    )
    return ttl_processor(config, state_dir, clock, sweep_interval_ms=sweep_interval_ms)


def committed_end(bootstrap: str, app: str = APP, topic: str = INPUT) -> bool:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": app})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        for tp in consumer.committed(tps, timeout=30):
            end = consumer.get_watermark_offsets(tp, timeout=30)[1]
            if end and tp.offset < end:
                return False
        return True
    finally:
        consumer.close()


def changelog_latest(bootstrap: str) -> dict[bytes, bytes | None]:
    """The last value per key of the changelog topic, read_committed."""
    topic = changelog_topic_name(APP, "seen")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    latest: dict[bytes, bytes | None] = {}
    try:
        ends = {}
        for p in range(PARTITIONS):
            ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        done: set[int] = set()
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None
                latest[message.key()] = message.value()
            for p in range(PARTITIONS):
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position >= ends[p]:
                    done.add(p)
        return latest
    finally:
        consumer.close()


def live(proc: Processor) -> dict[str, int]:
    return {k: v for store in proc.stores("seen").values() for k, v in store.items()}


def raw_entries(proc: Processor) -> int:
    """Entries RocksDB holds, expired or not (the byte store under the TTL layer)."""
    return sum(len(store.inner) for store in proc.stores("seen").values())  # type: ignore[attr-defined]


def produce_old_and_new(bootstrap: str, topic: str, count: int) -> tuple[set[str], set[str]]:
    """Creates ``topic`` and produces one record for each of ``count`` old users (stamped
    NOW - 50 s), then one for each of ``count`` new users (stamped NOW): ``(old, new)``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    old = {f"old{i}" for i in range(count)}
    new = {f"new{i}" for i in range(count)}
    for seq, user in enumerate(sorted(old) + sorted(new)):
        ts = NOW - 50_000 if user in old else NOW
        producer.produce(topic, key=user.encode(), value=msgpack.packb({"seq": seq, "ts": ts}))
    assert producer.flush(30) == 0
    return old, new


def test_ttl_store_on_the_broker(cluster: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap_servers
    old, new = produce_old_and_new(bootstrap, INPUT, 6)
    clock = [NOW]

    # 1. Everything is live at NOW; then the clock moves 20 s: the old ones expire (no sweep).
    with processor(bootstrap, tmp_path / "a", clock, sweep_interval_ms=10**12) as proc:
        run_until(
            lambda: proc.poll_once(0.1),
            lambda: len(proc.stores("seen")) == PARTITIONS and committed_end(bootstrap),
        )
        proc.commit()
        assert set(live(proc)) == old | new
        clock[0] += 20_000
        assert set(live(proc)) == new
        assert raw_entries(proc) == len(old | new)
    latest = changelog_latest(bootstrap)
    assert {k.decode() for k, v in latest.items() if v is not None} == old | new

    # 2. A restore from the topic alone, into an empty state directory: the expired values
    # are applied as deletes, so RocksDB holds the live ones only.
    with processor(bootstrap, tmp_path / "b", clock, sweep_interval_ms=10**12) as proc:
        run_until(lambda: proc.poll_once(0.1), lambda: len(proc.stores("seen")) == PARTITIONS)
        assert set(live(proc)) == new
        assert raw_entries(proc) == len(new)

    # 3. The sweep, on the first state directory (its RocksDB still holds the expired values):
    # its tombstones are produced in the processor's transaction.
    with processor(bootstrap, tmp_path / "a", clock, sweep_interval_ms=0) as proc:
        run_until(lambda: proc.poll_once(0.1), lambda: len(proc.stores("seen")) == PARTITIONS)
        assert set(live(proc)) == new
        proc.commit()
        assert raw_entries(proc) == len(new)
    latest = changelog_latest(bootstrap)
    assert {k.decode() for k, v in latest.items() if v is None} == old
    assert {k.decode() for k, v in latest.items() if v is not None} == new


STANDBY_APP = "ttl-standby-app"
STANDBY_INPUT = "ttl-standby-in"


def standby_processor(
    bootstrap: str,
    state_dir: Path,
    instance: str,
    clock: list[int],
    on_restored: Any = None,
) -> Processor:
    """A member of a two-process group whose members keep standbys of each other."""
    config = ProcessorConfig(
        application_id=STANDBY_APP,
        bootstrap_servers=bootstrap,
        input_topics=(STANDBY_INPUT,),
        instance_id=instance,
        commit_interval_ms=100,
        num_standby_replicas=1,
        standby_refresh_ms=200,
    )
    return ttl_processor(
        config, state_dir, clock, sweep_interval_ms=10**12, on_restored=on_restored
    )


def test_a_standby_applies_the_ttl_rule_and_its_promotion_returns_no_expired_value(
    cluster: KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap_servers
    old, new = produce_old_and_new(bootstrap, STANDBY_INPUT, 12)
    # The owner's clock says NOW: every value is live there.  The standby's says NOW + 20 s:
    # the old values (stamped NOW - 50 s, TTL 60 s) have expired there when it applies them.
    owner_clock = [NOW]
    standby_clock = [NOW + 20_000]
    restored: list[TaskRestored] = []
    first = standby_processor(bootstrap, tmp_path / "s1", "s1", owner_clock)
    second = standby_processor(
        bootstrap, tmp_path / "s2", "s2", standby_clock, on_restored=restored.append
    )
    with first, second:
        run_until(
            poll_each(first, second),
            lambda: (
                len(first.assignment) == 1
                and len(second.assignment) == 1
                and committed_end(bootstrap, STANDBY_APP, STANDBY_INPUT)
                and standbys_caught_up(second, first)
            ),
        )
        (moved,) = first.assignment
        on_first = dict(first.stores("seen")[moved].items())
        assert set(on_first) & old, "the moved partition holds no old key: the test is void"
        assert set(on_first) & new, "the moved partition holds no new key: the test is void"
        # the second process's own partition: the old values were put already expired there
        assert set(live(second)) <= new
        restored.clear()
        first.close()  # leaves the group: the second process takes the moved partition over
        run_until(lambda: second.poll_once(0.05), lambda: len(second.assignment) == PARTITIONS)
        # promoted from the standby's state (a tail at most), not rebuilt from the topic
        (report,) = [r for r in restored if r.partition == moved]
        assert not report.rebuilt, report
        assert report.records_restored <= 2, report
        promoted = second.stores("seen")[moved]
        # the standby applied each expired value as a delete: RocksDB holds the new ones only
        assert len(promoted.inner) == len(set(on_first) & new)  # type: ignore[attr-defined]
        assert dict(promoted.items()) == {k: v for k, v in on_first.items() if k in new}
        assert all(promoted.get(key) is None for key in old)
        assert set(live(second)) == new
