"""A store in time's commit in distributed mode, against a fake producer: the changelog records
are Kafka Streams' (windowed key, plain value, the timestamp as the record's CreateTime), and
RocksDB gets the timestamped form after the commit."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import TopicPartition

from statestore.config import RocksDBConfig
from statestore.kafka import KafkaStoreSpec, TaskStore
from statestore.kafka.commit import OpenTransaction, StoreTopic, commit_tasks
from statestore.serdes import IntSerde, LongSerde
from statestore.stores.time.layout import windowed_key
from tests.statestore.kafka.fakes import FakeProducer

TOPIC = "app-w-changelog"
WALL_MS = 9_999


def _task_store(spec: KafkaStoreSpec, path: Path) -> TaskStore[str, int]:
    engine = spec.open_engine(path, config=RocksDBConfig(), label="[w-0]")
    return TaskStore(
        name=spec.name,
        partition=0,
        engine=engine,
        key_serde=spec.key_serde,
        value_serde=spec.value_serde,
        time_settings=spec.time,
        now_ms=lambda: WALL_MS,
    )


def _commit(producer: FakeProducer, store: TaskStore[str, int]) -> None:
    commit_tasks(
        OpenTransaction(producer, guarantee="exactly_once_v2", known_topics=[]),
        stores=[StoreTopic(store=store, topic=TOPIC, topic_id="id")],
        outputs=[],
        offsets=[TopicPartition("in", 0, 1)],
        group_metadata=lambda: "meta",
        commit_offsets=lambda _tps: None,
        timeout_s=5,
        wall_clock_ms=lambda: WALL_MS,
    )


def test_window_records_carry_the_timestamp_as_create_time(tmp_path: Path) -> None:
    spec = KafkaStoreSpec.window(
        "w", window_size_ms=60_000, retention_ms=3_600_000, value_serde=LongSerde()
    )
    store = _task_store(spec, tmp_path / "w-0")
    try:
        windows = store.store
        windows.put("a", 3, 60_000, timestamp_ms=61_234)
        windows.put("b", 5, 120_000, timestamp_ms=125_000)
        windows.put("b", None, 60_000)  # a tombstone: stamped with the wall clock
        producer = FakeProducer()
        _commit(producer, store)
        assert [(k, v) for _o, k, v in producer.log[(TOPIC, 0)]] == [
            (windowed_key(b"a", 60_000), LongSerde().serialize(3)),
            (windowed_key(b"b", 120_000), LongSerde().serialize(5)),
            (windowed_key(b"b", 60_000), None),
        ]
        assert producer.timestamps[(TOPIC, 0)] == [61_234, 125_000, WALL_MS]
        stamped = windows.fetch_window_with_timestamp("a", 60_000)
        assert (stamped.value, stamped.timestamp_ms) == (3, 61_234)
        assert windows.stream_time_ms == 120_000
    finally:
        store.close()


def test_versioned_records_carry_the_version_time_and_the_plain_key(tmp_path: Path) -> None:
    spec = KafkaStoreSpec.versioned("v", history_retention_ms=60_000, value_serde=IntSerde())
    store = _task_store(spec, tmp_path / "v-0")
    try:
        store.store.put("a", 1, 1_000)
        store.store.put("a", 2, 2_000)
        store.store.delete("a", 3_000)
        producer = FakeProducer()
        _commit(producer, store)
        assert [(k, v) for _o, k, v in producer.log[(TOPIC, 0)]] == [
            (b"a", IntSerde().serialize(1)),
            (b"a", IntSerde().serialize(2)),
            (b"a", None),
        ]
        assert producer.timestamps[(TOPIC, 0)] == [1_000, 2_000, 3_000]
        assert store.store.get("a") is None
        assert store.store.get("a", 2_500).value == 2
    finally:
        store.close()
