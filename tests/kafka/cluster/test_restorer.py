"""The restorer thread on a real broker: running tasks keep processing while another restores."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kafka_harness.broker import KafkaBroker
from statestore.kafka import (
    ChangelogTopicConfig,
    CommitResult,
    KafkaStoreSpec,
    Processor,
    ProcessorContext,
    TaskState,
    changelog_topic_name,
    ensure_changelog_topic,
)
from statestore.partitioner import partition_for
from statestore.serdes import IntSerde, StringSerde
from tests.kafka.cluster.oracle import PARTITIONS, App

SLOW = 3  # the partition whose restore is held


class _HoldPartition:
    """A StateRestoreListener that blocks the restorer in the first WriteBatch of ``SLOW``."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self.release = threading.Event()

    def on_restore_start(self, store: str, partition: int, start: int, end: int) -> None:
        pass

    def on_batch_restored(self, store: str, partition: int, last: int, count: int) -> None:
        if partition == SLOW and not self.release.is_set():
            self.holding.set()
            assert self.release.wait(120), "the test never released the restore"

    def on_restore_end(self, store: str, partition: int, total: int) -> None:
        pass


@pytest.fixture
def app(cluster: KafkaBroker) -> App:
    return App(cluster.bootstrap_servers, "restorer-run")


def test_running_tasks_process_while_another_restores(app: App, tmp_path: Path) -> None:
    # the changelog partition SLOW holds records: its restore will be held in its first batch
    topic = changelog_topic_name(app.name, "sums")
    admin = AdminClient({"bootstrap.servers": app.bootstrap})
    ensure_changelog_topic(admin, topic, partitions=PARTITIONS, config=ChangelogTopicConfig())
    producer = Producer({"bootstrap.servers": app.bootstrap})
    for i in range(100):
        producer.produce(
            topic, key=f"old-{i}".encode(), value=IntSerde().serialize(i), partition=SLOW
        )
    assert producer.flush(30) == 0

    listener = _HoldPartition()
    commits: list[tuple[CommitResult, dict[int, TaskState]]] = []
    processor: Processor

    def process(context: ProcessorContext, message: Any) -> None:
        key = message.key().decode()
        sums = context.store("sums")
        sums.put(key, sums.get(key, 0) + msgpack.unpackb(message.value())["delta"])
        context.send(app.output, message.key(), b"x")

    processor = Processor(
        app.config(restore_batch_bytes=64),
        tmp_path,
        [KafkaStoreSpec(name="sums", key_serde=StringSerde(), value_serde=IntSerde())],
        process,
        restore_listener=listener,
        on_commit=lambda result: commits.append((result, processor.tasks)),
    )
    keys = [
        k for k in (f"k{i}" for i in range(200)) if partition_for(k.encode(), PARTITIONS) != SLOW
    ]
    fast = Producer({"bootstrap.servers": app.bootstrap, "partitioner": "murmur2_random"})
    with processor:
        deadline = time.monotonic() + 90
        while not listener.holding.is_set() or len(processor.assignment) < PARTITIONS - 1:
            assert time.monotonic() < deadline, processor.tasks
            processor.poll_once(0.1)
        for key in keys:
            fast.produce(app.input, key=key.encode(), value=msgpack.packb({"seq": 0, "delta": 1}))
        assert fast.flush(30) == 0
        while sum(result.outputs for result, _states in commits) < len(keys):
            assert time.monotonic() < deadline, "the running tasks did not process"
            processor.poll_once(0.1)
        # every output was committed while the slow task was still restoring
        assert all(states[SLOW] is TaskState.RESTORING for _result, states in commits)
        assert processor.tasks[SLOW] is TaskState.RESTORING
        listener.release.set()
        while processor.tasks[SLOW] is not TaskState.RUNNING:
            assert time.monotonic() < deadline, "the slow task never ran"
            processor.poll_once(0.1)
        restored = processor.stores("sums")[SLOW]
        assert restored.get("old-99") == 99
    assert sorted(m.key().decode() for m in app.read(app.output)) == sorted(keys), "each once"
