"""An application for the runtime's fault tests and its oracle, independent of the runtime.

Every input record carries a sequence number and a delta for its key; ``process``
adds the delta to the key's sum in the store ``sums``, then sends ``(seq, sum)``
to the output topic, then (for the records chosen to fail) raises.  The oracle
computes from the inputs the sums and the set of sequence numbers that must
appear, and checks

* the output topic (``read_committed``): each applied sequence number exactly
  once, none of the skipped ones, the last sum per key right;
* the changelog topic: the last value per key is the expected sum;
* the local stores after a clean restart: the same sums.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from statestore.kafka import (
    KafkaStoreSpec,
    ProcessingError,
    ProcessingExceptionHandler,
    Processor,
    ProcessorConfig,
    ProcessorContext,
    changelog_topic_name,
    log_and_continue,
    log_and_fail,
)
from statestore.serdes import IntSerde, StringSerde

__all__ = [
    "PARTITIONS",
    "App",
    "PoisonError",
    "poll_until_raises",
    "restart_and_check",
    "run_until",
]

PARTITIONS = 4
KEYS = 12


class PoisonError(Exception):
    """What ``process`` raises for a chosen record."""


class App:
    """The topics of one test's application and its oracle."""

    def __init__(self, bootstrap: str, name: str, *, dlq: bool = False, keys: int = KEYS) -> None:
        self.keys = keys
        self.bootstrap = bootstrap
        self.name = name
        self.input = f"{name}-in"
        self.output = f"{name}-out"
        self.dlq = f"{name}-dlq" if dlq else None
        self.fed: list[tuple[int, str, int]] = []
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [self.input, self.output, *([self.dlq] if self.dlq else [])]
        futures = admin.create_topics([NewTopic(t, num_partitions=PARTITIONS) for t in topics])
        for future in futures.values():
            future.result(timeout=60)

    def feed(self, count: int) -> None:
        """Produce ``count`` more records (seq, key, delta)."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random"})
        for _ in range(count):
            seq = len(self.fed)
            key = f"k{seq % self.keys}"
            delta = seq % 7 + 1
            self.fed.append((seq, key, delta))
            producer.produce(
                self.input, key=key.encode(), value=msgpack.packb({"seq": seq, "delta": delta})
            )
        assert producer.flush(30) == 0

    def config(self, **overrides: Any) -> ProcessorConfig:
        settings: dict[str, Any] = {
            "application_id": self.name,
            "bootstrap_servers": self.bootstrap,
            "input_topics": (self.input,),
            "output_topics": (self.output,),
            "instance_id": "i1",
            "commit_interval_ms": 100,
            "dead_letter_queue_topic": self.dlq,
        }
        settings.update(overrides)
        return ProcessorConfig(**settings)

    def processor(
        self,
        state_dir: Path,
        fail_on: Callable[[int], bool] = lambda _seq: False,
        handler: ProcessingExceptionHandler = log_and_fail,
        on_commit: Callable[[Any], None] | None = None,
        on_rebalance: Callable[[Any], None] | None = None,
        **overrides: Any,
    ) -> Processor:
        output = self.output

        def process(context: ProcessorContext, message: Any) -> None:
            record = msgpack.unpackb(message.value())
            key = message.key().decode()
            sums = context.store("sums")
            total = sums.get(key, 0) + record["delta"]
            sums.put(key, total)
            context.send(output, message.key(), msgpack.packb([record["seq"], total]))
            if fail_on(record["seq"]):
                raise PoisonError(f"seq {record['seq']}")

        return Processor(
            self.config(**overrides),
            state_dir,
            [KafkaStoreSpec(name="sums", key_serde=StringSerde(), value_serde=IntSerde())],
            process,
            processing_exception_handler=handler,
            on_commit=on_commit,
            on_rebalance=on_rebalance,
        )

    def expected(self, skipped: Sequence[int] = ()) -> dict[str, int]:
        sums: dict[str, int] = {}
        for seq, key, delta in self.fed:
            if seq not in skipped:
                sums[key] = sums.get(key, 0) + delta
        return sums

    def read(self, topic: str) -> list[Any]:
        """Every committed record of ``topic``, partition by partition."""
        return read_committed(self.bootstrap, topic, PARTITIONS)

    def check(self, skipped: Sequence[int] = ()) -> None:
        """The oracle over the output topic and the changelog topic."""
        seqs = [msgpack.unpackb(m.value())[0] for m in self.read(self.output)]
        duplicated = sorted(seq for seq, count in collections.Counter(seqs).items() if count > 1)
        assert not duplicated, f"applied twice: {duplicated[:10]}"
        wanted = {seq for seq, _key, _delta in self.fed} - set(skipped)
        assert set(seqs) == wanted, (
            f"missing {sorted(wanted - set(seqs))[:10]}, extra {sorted(set(seqs) - wanted)[:10]}"
        )
        last_output: dict[str, int] = {}
        for message in self.read(self.output):
            last_output[message.key().decode()] = msgpack.unpackb(message.value())[1]
        expected = self.expected(skipped)
        assert last_output == expected
        changelog = changelog_topic_name(self.name, "sums")
        stored = {
            m.key().decode(): IntSerde().deserialize(m.value())
            for m in self.read(changelog)
            if m.value() is not None
        }
        assert stored == expected

    def committed_end(self) -> bool:
        """The group's committed offsets reach the end of every input partition."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.name})
        try:
            tps = [TopicPartition(self.input, p) for p in range(PARTITIONS)]
            committed = consumer.committed(tps, timeout=30)
            for tp in committed:
                end = consumer.get_watermark_offsets(tp, timeout=30)[1]
                if end and tp.offset < end:
                    return False
            return True
        finally:
            consumer.close()


def run_until(
    poll: Callable[[], object],
    done: Callable[[], bool],
    timeout_s: float = 90,
    every_s: float = 1.0,
) -> None:
    """Call ``poll()`` until ``done()`` (checked every ``every_s``) holds."""
    deadline = time.monotonic() + timeout_s
    checked = time.monotonic()
    while True:
        poll()
        if time.monotonic() - checked >= every_s:
            checked = time.monotonic()
            if done():
                return
        assert time.monotonic() < deadline, "condition not reached"


def poll_until_raises(processor: Processor, timeout_s: float = 90) -> ProcessingError:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            processor.poll_once(0.1)
        except ProcessingError as exc:
            return exc
    raise AssertionError("process() never failed")


def restart_and_check(app: App, state_dir: Path, skipped: Sequence[int] = ()) -> None:
    """A processor skipping ``skipped`` finishes the inputs; the oracle and its stores agree."""
    with app.processor(
        state_dir, fail_on=lambda seq: seq in skipped, handler=log_and_continue
    ) as processor:
        run_until(
            lambda: processor.poll_once(0.1),
            lambda: len(processor.assignment) == PARTITIONS and app.committed_end(),
        )
        processor.commit()
        local = {
            key: value
            for stores in processor.stores("sums").values()
            for key, value in stores.items()
        }
    app.check(skipped)
    assert local == app.expected(skipped)


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every committed record of ``topic`` (``read_committed``), partition by partition, in
    offset order: each partition read up to the high watermark it had when reached.

    The high watermark, not the last stable offset (a ``read_committed`` consumer's own
    watermark): a transaction a killed producer left open holds the last stable offset at
    its first record, and records other producers committed after it are reachable only
    once the coordinator aborts it (``transaction.timeout.ms``).  Reading to the high
    watermark waits for that; stopping at the last stable offset would miss them.
    """
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": f"oracle-{time.monotonic_ns()}",
        "enable.auto.commit": "false",
    }
    consumer = Consumer({**settings, "isolation.level": "read_committed"})
    ends = Consumer({**settings, "isolation.level": "read_uncommitted"})
    try:
        out: list[Any] = []
        for p in range(partitions):
            end = ends.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            if end == 0:
                continue
            consumer.assign([TopicPartition(topic, p, 0)])
            deadline = time.monotonic() + 60
            while consumer.position([TopicPartition(topic, p)])[0].offset < end:
                assert time.monotonic() < deadline, f"could not read {topic}-{p}"
                out.extend(m for m in consumer.consume(1000, timeout=0.5) if m.error() is None)
        return out
    finally:
        consumer.close()
        ends.close()
