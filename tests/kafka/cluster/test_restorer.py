"""The restorer thread on a real broker: running tasks keep processing while another restores.

The slow task's restore is held by an open transaction on its changelog
partition: the partition's last stable offset stays below the end offset the
restore waits for until the test commits it.  Nothing blocks the restorer
thread meanwhile (a restore listener that blocked would hold every task's
restore, whatever order their stores opened in), so the other tasks restore and
run however the restorer's steps interleave.
"""

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
COMMITTED = 100  # records committed to SLOW's changelog partition before the open transaction


class _Replayed:
    """A StateRestoreListener that says when SLOW's restore has replayed every committed record."""

    def __init__(self) -> None:
        self.replayed = threading.Event()

    def on_restore_start(self, store: str, partition: int, start: int, end: int) -> None:
        pass

    def on_batch_restored(self, store: str, partition: int, last: int, count: int) -> None:
        if partition == SLOW and last >= COMMITTED - 1:
            self.replayed.set()

    def on_restore_end(self, store: str, partition: int, total: int) -> None:
        pass


@pytest.fixture
def app(cluster: KafkaBroker) -> App:
    return App(cluster.bootstrap_servers, "restorer-run")


def test_running_tasks_process_while_another_restores(app: App, tmp_path: Path) -> None:
    # SLOW's changelog partition: committed records, then a transaction left open
    topic = changelog_topic_name(app.name, "sums")
    admin = AdminClient({"bootstrap.servers": app.bootstrap})
    ensure_changelog_topic(admin, topic, partitions=PARTITIONS, config=ChangelogTopicConfig())
    producer = Producer({"bootstrap.servers": app.bootstrap})
    for i in range(COMMITTED):
        producer.produce(
            topic, key=f"old-{i}".encode(), value=IntSerde().serialize(i), partition=SLOW
        )
    assert producer.flush(30) == 0
    holder = Producer(
        {
            "bootstrap.servers": app.bootstrap,
            "transactional.id": f"{app.name}-holder",
            "transaction.timeout.ms": "300000",  # longer than the test: only the test ends it
        }
    )
    holder.init_transactions(30)
    holder.begin_transaction()
    holder.produce(topic, key=b"held", value=IntSerde().serialize(7), partition=SLOW)
    assert holder.flush(30) == 0  # in the log, below the high watermark the restore waits for

    listener = _Replayed()
    commits: list[tuple[CommitResult, dict[int, TaskState]]] = []
    processor: Processor

    def process(context: ProcessorContext, message: Any) -> None:
        key = message.key().decode()
        sums = context.store("sums")
        sums.put(key, sums.get(key, 0) + msgpack.unpackb(message.value())["delta"])
        context.send(app.output, message.key(), b"x")

    processor = Processor(
        app.config(restore_batch_bytes=1),  # a WriteBatch per record: none waits for the end
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
        while not listener.replayed.is_set() or len(processor.assignment) < PARTITIONS - 1:
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
        holder.commit_transaction(30)
        while processor.tasks[SLOW] is not TaskState.RUNNING:
            assert time.monotonic() < deadline, "the slow task never ran"
            processor.poll_once(0.1)
        restored = processor.stores("sums")[SLOW]
        assert restored.get(f"old-{COMMITTED - 1}") == COMMITTED - 1
        assert restored.get("held") == 7
    assert sorted(m.key().decode() for m in app.read(app.output)) == sorted(keys), "each once"
