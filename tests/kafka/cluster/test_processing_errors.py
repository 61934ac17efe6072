"""Exceptions in ``process()`` on a real broker: exactly once holds, whatever the handler says.

Every input record carries a sequence number and a delta for its key; ``process``
adds the delta to the key's sum in the store ``sums``, then sends ``(seq, sum)``
to the output topic, then (for the records chosen to fail) raises.  The oracle
is independent of the runtime: from the inputs it computes the sums and the set
of sequence numbers that must appear, and it checks

* the output topic (``read_committed``): each applied sequence number exactly
  once, none of the skipped ones, the last sum per key right;
* the changelog topic: the last value per key is the expected sum;
* the local stores after a clean restart: the same sums.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from scripts.kafka.broker import KafkaBroker
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

PARTITIONS = 4
KEYS = 12


class PoisonError(Exception):
    """What ``process`` raises for a chosen record."""


class App:
    """The topics of one test's application and its oracle."""

    def __init__(self, bootstrap: str, name: str, *, dlq: bool = False) -> None:
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
            key = f"k{seq % KEYS}"
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
        )

    def expected(self, skipped: Sequence[int] = ()) -> dict[str, int]:
        sums: dict[str, int] = {}
        for seq, key, delta in self.fed:
            if seq not in skipped:
                sums[key] = sums.get(key, 0) + delta
        return sums

    def read(self, topic: str) -> list[Any]:
        """Every committed record of ``topic``, partition by partition."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"oracle-{time.monotonic_ns()}",
                "isolation.level": "read_committed",
                "enable.auto.commit": "false",
            }
        )
        try:
            out: list[Any] = []
            for p in range(PARTITIONS):
                end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
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

    def check(self, skipped: Sequence[int] = ()) -> None:
        """The oracle over the output topic and the changelog topic."""
        seqs = [msgpack.unpackb(m.value())[0] for m in self.read(self.output)]
        duplicated = sorted({s for s in seqs if seqs.count(s) > 1})
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


def _run_until(
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


def _poll_until_raises(processor: Processor, timeout_s: float = 90) -> ProcessingError:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            processor.poll_once(0.1)
        except ProcessingError as exc:
            return exc
    raise AssertionError("process() never failed")


def _restart_and_check(app: App, state_dir: Path, skipped: Sequence[int] = ()) -> None:
    """A processor skipping ``skipped`` finishes the inputs; the oracle and its stores agree."""
    with app.processor(
        state_dir, fail_on=lambda seq: seq in skipped, handler=log_and_continue
    ) as processor:
        _run_until(lambda: processor.poll_once(0.1), app.committed_end)
        processor.commit()
        local = {
            key: value
            for stores in processor.stores("sums").values()
            for key, value in stores.items()
        }
    app.check(skipped)
    assert local == app.expected(skipped)


@pytest.fixture
def app_factory(cluster: KafkaBroker) -> Callable[..., App]:
    return lambda name, **kw: App(cluster.bootstrap_servers, name, **kw)


def test_exception_after_writes_and_sends_commits_nothing_of_its_transaction(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-fail")
    app.feed(300)
    # one transaction over everything: every task has pending writes when seq 250 fails
    processor = app.processor(
        tmp_path,
        fail_on=lambda seq: seq == 250,
        commit_interval_ms=60_000,
        transaction_timeout_ms=120_000,
    )
    with pytest.raises(ProcessingError) as caught, processor:
        raise _poll_until_raises(processor)
    assert isinstance(caught.value.__cause__, PoisonError)
    assert caught.value.topic == app.input and caught.value.offset >= 0
    assert app.read(app.output) == [], "nothing of the failing transaction is visible"
    assert not app.committed_end()
    _restart_and_check(app, tmp_path)


def test_commits_before_the_failure_stay_and_the_restart_applies_the_rest_once(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-partial")
    app.feed(400)
    processor = app.processor(
        tmp_path, fail_on=lambda seq: seq == 380, poll_records=20, commit_every_records=50
    )
    with pytest.raises(ProcessingError), processor:
        raise _poll_until_raises(processor)
    assert processor.commits > 0
    applied = {msgpack.unpackb(m.value())[0] for m in app.read(app.output)}
    assert 380 not in applied
    _restart_and_check(app, tmp_path)


def test_a_loop_that_catches_and_continues_loses_nothing(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-loop")
    app.feed(300)
    failures = {50: 1, 120: 2, 299: 1}  # seq -> how many times it fails before it works

    def flaky(seq: int) -> bool:
        if failures.get(seq, 0) > 0:
            failures[seq] -= 1
            return True
        return False

    caught = 0

    def poll() -> None:
        nonlocal caught
        try:
            processor.poll_once(0.1)
        except ProcessingError:
            caught += 1

    with app.processor(tmp_path, fail_on=flaky, poll_records=64) as processor:
        _run_until(poll, lambda: caught == 4 and app.committed_end())
        assert processor.processing_errors == 4
    app.check()
    _restart_and_check(app, tmp_path)


def test_skip_writes_the_poison_records_to_the_dead_letter_topic_once(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-dlq", dlq=True)
    app.feed(300)
    poison = [37, 111, 112, 290]
    with app.processor(
        tmp_path, fail_on=lambda seq: seq in poison, handler=log_and_continue
    ) as processor:
        _run_until(lambda: processor.poll_once(0.1), app.committed_end)
        assert processor.dropped_records == len(poison)
    app.check(skipped=poison)
    dead = app.read(app.dlq or "")
    assert sorted(msgpack.unpackb(m.value())["seq"] for m in dead) == poison
    for message in dead:
        headers = dict(message.headers())
        assert headers["__streams.errors.exception"].endswith(b".PoisonError")
        assert headers["__streams.errors.topic"] == app.input.encode()
        assert int(headers["__streams.errors.offset"]) >= 0
    app.feed(100)  # restart: the poison records are not replayed, the new ones applied once
    _restart_and_check(app, tmp_path, skipped=poison)
    assert len(app.read(app.dlq or "")) == len(poison)


def test_a_poison_record_fails_every_restart_without_partial_effects(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-poison")
    app.feed(200)
    for _restart in range(3):
        processor = app.processor(tmp_path, fail_on=lambda seq: seq == 150)
        with contextlib.suppress(ProcessingError), processor:
            raise _poll_until_raises(processor)
        seqs = [msgpack.unpackb(m.value())[0] for m in app.read(app.output)]
        assert 150 not in seqs and len(seqs) == len(set(seqs))
    # the operator decides to skip it
    _restart_and_check(app, tmp_path, skipped=[150])


def test_run_ends_on_the_error_and_commits_nothing_of_it(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-run")
    app.feed(200)
    processor = app.processor(
        tmp_path,
        fail_on=lambda seq: seq == 199,
        commit_interval_ms=60_000,
        transaction_timeout_ms=120_000,
    )
    processor.start()
    with pytest.raises(ProcessingError):
        processor.run(lambda: False)
    assert app.read(app.output) == []
    _restart_and_check(app, tmp_path)
