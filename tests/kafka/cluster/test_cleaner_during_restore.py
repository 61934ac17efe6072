"""Restores while the broker's log cleaner compacts the changelog topic: the state is always exact.

The topic rolls tiny segments and is dirty at once (``min.cleanable.dirty.ratio=0.01``,
``delete.retention.ms=100``, broker ``log.cleaner.backoff.ms=100``), so the cleaner
replaces segments, drops overwritten values and tombstones while the restore consumer
reads.  Oracle: a plain dict of the last value produced per key.
"""

from __future__ import annotations

import random
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from kafka_harness.broker import KafkaBroker
from statestore.config import RocksDBConfig
from statestore.kafka import ChangelogTopicConfig, ensure_changelog_topic
from statestore.kafka.restore import restore_partition
from statestore.kafka.topics import watermarks
from statestore.stores.engine import RocksDBEngine


def _cleaned_offset(cluster: KafkaBroker, topic: str) -> int:
    checkpoint = cluster.log_dir / "cleaner-offset-checkpoint"
    if not checkpoint.exists():
        return 0
    for line in checkpoint.read_text().splitlines()[2:]:
        name, _partition, offset = line.split()
        if name == topic:
            return int(offset)
    return 0


def test_restores_during_cleaning_are_exact(cluster: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = "cleaning-during-restore-changelog"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = ChangelogTopicConfig(
        delete_retention_ms=100, segment_bytes=1024 * 1024, min_cleanable_dirty_ratio=0.01
    )
    info = ensure_changelog_topic(admin, topic, partitions=1, config=config)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5"})
    rng = random.Random(9)
    model: dict[bytes, bytes] = {}
    rounds = []
    for round_no in range(4):
        for i in range(30_000):
            key = b"k%04d" % rng.randrange(800)
            if rng.random() < 0.1:
                producer.produce(topic, key=key, value=None, partition=0)
                model.pop(key, None)
            else:
                value = b"%d-%d-" % (round_no, i) + b"x" * 60
                producer.produce(topic, key=key, value=value, partition=0)
                model[key] = value
            if i % 5000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "cleaning-restore",
                "auto.offset.reset": "error",
                "isolation.level": "read_committed",
                "fetch.queue.backoff.ms": "10",
            }
        )
        engine = RocksDBEngine.open(tmp_path / f"db-{round_no}", config=RocksDBConfig(), cache=None)
        try:
            low, high = watermarks(admin, topic, [0])[0]
            restored = restore_partition(
                consumer,
                engine,
                store="s",
                topic=topic,
                partition=0,
                topic_id=info.topic_id,
                start_offset=low,
                end_offset=high,
                batch_bytes=16 * 1024,
                stall_timeout_s=60,
            )
            assert dict(engine.items()) == model, f"round {round_no}"
            assert engine.applied_offset() == high
            rounds.append((low, high, restored, _cleaned_offset(cluster, topic)))
        finally:
            engine.close()
            consumer.close()
    print(f"(log start, high watermark, records replayed, cleaner checkpoint) per round: {rounds}")
    # the cleaner did work on this topic during the test: fewer records replayed than produced
    assert rounds[-1][3] > 0 or rounds[-1][2] < rounds[-1][1], rounds
