"""The commit state machine (statestore.kafka.commit) against a fake producer: every step fails once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from statestore.config import RocksDBConfig
from statestore.kafka import OutputRecord, ProducerFencedError, TaskStore, TransactionAbortedError
from statestore.kafka.commit import (
    IDLE_STAMP_INTERVAL_MS,
    BoundedCaller,
    OpenTransaction,
    StoreTopic,
    commit_tasks,
)
from statestore.kafka.restore import stored_applied_time_ms, stored_topic_id
from statestore.serdes import IntSerde, StringSerde
from statestore.stores.engine import RocksDBEngine
from tests.statestore.kafka.fakes import FakeProducer, kafka_exception

TOPIC = "app-s-changelog"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TaskStore[str, int]]:
    engine = RocksDBEngine.open(tmp_path / "s-3", config=RocksDBConfig(), cache=None)
    task_store: TaskStore[str, int] = TaskStore(
        name="s", partition=3, engine=engine, key_serde=StringSerde(), value_serde=IntSerde()
    )
    yield task_store
    task_store.close()


def _commit(
    producer: FakeProducer,
    store: TaskStore[str, int],
    guarantee: Any = "exactly_once_v2",
    committed: list[Any] | None = None,
) -> Any:
    return commit_tasks(
        OpenTransaction(producer, guarantee=guarantee, known_topics=["out"]),
        stores=[StoreTopic(store=store, topic=TOPIC, topic_id="topic-id-1")],
        outputs=[OutputRecord(topic="out", key=b"k", value=b"v")],
        offsets=[TopicPartition("in", 3, 42)],
        group_metadata=lambda: "group-metadata",
        commit_offsets=(committed.append if committed is not None else lambda tps: None),
        timeout_s=5,
        wall_clock_ms=lambda: 1234,
    )


def test_success_produces_commits_then_applies(store: TaskStore[str, int]) -> None:
    producer = FakeProducer()
    store.store.put("a", 1)
    store.store.put("b", 2)
    store.store.delete("b")
    result = _commit(producer, store)
    # no flush before the commit: commit_transaction waits for every acknowledgement; the
    # flush after it serves the delivery report of each partition's last changelog record
    assert producer.calls == [
        "begin",
        "produce",
        "produce",
        "produce",
        "send_offsets",
        "commit",
        "flush",
    ]
    assert result.changelog_records == 2 and result.outputs == 1
    assert [(k, v) for _o, k, v in producer.log[(TOPIC, 3)]] == [
        (b"a", IntSerde().serialize(1)),
        (b"b", None),
    ]
    ((positions, metadata),) = producer.offsets_sent
    assert metadata == "group-metadata" and positions[0].offset == 42
    # applied after the commit: offset = last changelog offset + 1, with topic id and time
    assert store.engine.applied_offset() == 2
    assert store.store.get("a") == 1 and store.store.get("b") is None and not store.pending
    assert stored_topic_id(store.engine) == "topic-id-1"
    assert stored_applied_time_ms(store.engine) == 1234


def test_a_second_commit_continues_after_the_marker(store: TaskStore[str, int]) -> None:
    producer = FakeProducer()
    store.store.put("a", 1)
    _commit(producer, store)
    store.store.put("a", 5)
    _commit(producer, store)
    # offset 0: a=1, 1: commit marker, 2: a=5
    assert store.engine.applied_offset() == 3
    store.store.put("x", 1)
    store.drop_pending()
    _commit(producer, store)  # nothing for this store: the applied offset stays
    assert store.engine.applied_offset() == 3


@pytest.mark.parametrize("step", ["begin", "produce", "send_offsets", "commit"])
def test_an_abortable_error_at_any_step_aborts_and_leaves_rocksdb_alone(
    store: TaskStore[str, int], step: str
) -> None:
    producer = FakeProducer()
    store.store.put("a", 1)
    _commit(producer, store)
    store.store.put("a", 2)
    producer.fail[step] = kafka_exception(KafkaError.ILLEGAL_GENERATION, abortable=True)
    with pytest.raises(TransactionAbortedError) as caught:
        _commit(producer, store)
    assert caught.value.code == "ILLEGAL_GENERATION"
    assert not store.pending, "the buffer is dropped"
    assert store.store.get("a") == 1 and store.engine.applied_offset() == 1
    assert ("abort" in producer.calls[-1:]) == (step != "begin")
    assert [v for *_rest, v in producer.committed] == [b"v", IntSerde().serialize(1)]


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH])
def test_fencing_is_its_own_error_and_not_aborted(store: TaskStore[str, int], code: int) -> None:
    producer = FakeProducer()
    store.store.put("a", 1)
    producer.fail["commit"] = kafka_exception(code, fatal=code == KafkaError._FENCED)
    with pytest.raises(ProducerFencedError):
        _commit(producer, store)
    assert "abort" not in producer.calls  # a fenced producer cannot abort; it is replaced
    assert (
        not store.pending and store.store.get("a") is None and store.engine.applied_offset() is None
    )


def test_a_retriable_commit_error_is_retried(store: TaskStore[str, int]) -> None:
    producer = FakeProducer()
    store.store.put("a", 1)
    producer.fail["commit"] = kafka_exception(KafkaError._TIMED_OUT, retriable=True)
    _commit(producer, store)
    assert producer.calls[-3:] == ["commit", "commit", "flush"]
    assert store.store.get("a") == 1


class _SlowCommitProducer(FakeProducer):
    """``commit_transaction`` times out (retriable ``_TIMED_OUT``, after its whole timeout) for
    ``slow_calls`` calls, then commits; librdkafka refuses any other transactional call while a
    timed-out commit is in progress (``_CONFLICT``)."""

    def __init__(self, slow_calls: int, code: int = KafkaError._TIMED_OUT) -> None:
        super().__init__()
        self.slow_calls = slow_calls
        self.code = code
        self.in_progress = False

    def _step(self, name: str) -> None:
        if self.in_progress and name in {"abort", "begin", "send_offsets"}:
            self.calls.append(name)
            raise kafka_exception(KafkaError._CONFLICT)
        super()._step(name)

    def commit_transaction(self, timeout: float = -1) -> None:
        if self.slow_calls > 0:
            self.slow_calls -= 1
            self.calls.append("commit")
            self.in_progress = True
            time.sleep(min(timeout, 0.05))  # the call's own timeout, shortened
            raise kafka_exception(self.code, retriable=True)
        self.in_progress = False
        super().commit_transaction(timeout)


def _commit_within(
    producer: FakeProducer, store: TaskStore[str, int], outcome_wait_s: float
) -> Any:
    return commit_tasks(
        OpenTransaction(producer, guarantee="exactly_once_v2", known_topics=["out"]),
        stores=[StoreTopic(store=store, topic=TOPIC, topic_id="topic-id-1")],
        offsets=[TopicPartition("in", 3, 42)],
        group_metadata=lambda: "group-metadata",
        commit_offsets=lambda tps: None,
        timeout_s=0.1,
        outcome_wait_s=outcome_wait_s,
    )


@pytest.mark.parametrize("code", [KafkaError._TIMED_OUT, KafkaError._TRANSPORT])
def test_a_commit_that_timed_out_is_called_again_for_its_outcome(
    store: TaskStore[str, int], code: int
) -> None:
    # Past its deadline the commit is still in progress inside librdkafka (after any retriable
    # error): only another commit_transaction ends it; an abort would be refused (_CONFLICT).
    producer = _SlowCommitProducer(slow_calls=6, code=code)  # 0.3 s: past the 0.1 s deadline
    store.store.put("a", 1)
    result = _commit_within(producer, store, outcome_wait_s=30)
    assert result.changelog_records == 1
    assert "abort" not in producer.calls and producer.calls.count("commit") == 7
    assert store.store.get("a") == 1 and store.engine.applied_offset() == 1


def test_a_commit_without_an_outcome_replaces_the_producer(store: TaskStore[str, int]) -> None:
    producer = _SlowCommitProducer(slow_calls=1000)
    store.store.put("a", 1)
    with pytest.raises(ProducerFencedError) as failed:
        _commit_within(producer, store, outcome_wait_s=0.3)
    assert failed.value.code == "_TIMED_OUT" and "replaced" in failed.value.reason
    assert "abort" not in producer.calls  # refused while the commit is in progress
    assert not store.pending and store.store.get("a") is None


def test_at_least_once_commits_offsets_after_the_flush(store: TaskStore[str, int]) -> None:
    producer = FakeProducer()
    committed: list[Any] = []
    store.store.put("a", 1)
    _commit(producer, store, "at_least_once", committed)
    assert producer.calls == ["produce", "produce", "flush"]
    assert committed and committed[0][0].offset == 42
    assert store.store.get("a") == 1 and store.engine.applied_offset() == 1


def test_a_commit_larger_than_the_producer_queue_waits_for_room(
    store: TaskStore[str, int],
) -> None:
    # librdkafka raises BufferError when its local queue is full; the commit polls
    # (delivery reports free room) and produces again instead of failing.
    producer = FakeProducer(queue_records=1000)
    records = 150_000
    for i in range(records):
        store.store.put(f"k{i:06d}", i)
    result = _commit(producer, store)
    assert producer.buffer_errors >= records // 1000 - 1, "the queue filled up"
    assert result.changelog_records == records and result.outputs == 1
    assert len(producer.log[(TOPIC, 3)]) == records
    assert store.engine.applied_offset() == records
    assert store.store.get("k149999") == 149_999


def test_output_headers_are_produced(store: TaskStore[str, int]) -> None:
    producer = FakeProducer()
    commit_tasks(
        OpenTransaction(producer, guarantee="exactly_once_v2", known_topics=["dlq"]),
        stores=[],
        outputs=[OutputRecord(topic="dlq", key=b"k", value=b"v", headers=[("h", b"1")])],
        offsets=[],
        group_metadata=lambda: "group-metadata",
        commit_offsets=lambda tps: None,
        timeout_s=5,
    )
    assert producer.headers == [[("h", b"1")]]


def test_a_failed_send_never_raises_and_the_commit_aborts_with_it(
    store: TaskStore[str, int],
) -> None:
    producer = FakeProducer()
    transaction = OpenTransaction(producer, guarantee="exactly_once_v2", known_topics=["out"])
    producer.fail["produce"] = kafka_exception(KafkaError.ILLEGAL_GENERATION, abortable=True)
    transaction.send("out", b"k1", b"v1")  # user code never sees the client's error
    transaction.send("out", b"k2", b"v2")  # nor a second time: nothing more is produced
    assert transaction.failure is not None and transaction.failure.code == "ILLEGAL_GENERATION"
    store.store.put("a", 1)
    with pytest.raises(TransactionAbortedError) as caught:
        commit_tasks(
            transaction,
            stores=[StoreTopic(store=store, topic=TOPIC, topic_id="topic-id-1")],
            offsets=[TopicPartition("in", 3, 42)],
            group_metadata=lambda: "group-metadata",
            commit_offsets=lambda tps: None,
            timeout_s=5,
        )
    assert caught.value.code == "ILLEGAL_GENERATION"
    assert producer.calls == ["begin", "produce", "abort"]
    assert producer.committed == [] and not store.pending and store.engine.applied_offset() is None
    assert transaction.failure is None and not transaction.open, (
        "the next transaction starts afresh"
    )


def test_abandon_aborts_the_outputs_already_produced() -> None:
    producer = FakeProducer()
    transaction = OpenTransaction(producer, guarantee="exactly_once_v2", known_topics=["out"])
    transaction.send("out", b"k", b"v")
    assert transaction.open and transaction.sent == 1
    transaction.abandon(1)
    assert producer.calls == ["begin", "produce", "abort"] and producer.committed == []
    assert not transaction.open and transaction.sent == 0
    transaction.abandon(1)  # nothing open: nothing to abort
    assert producer.calls.count("abort") == 1


def test_a_fatal_send_is_reported_by_its_cause() -> None:
    # librdkafka's produce says only _FATAL once the producer failed; the transaction API
    # names the cause (here: fenced by a newer instance, which the processor replaces).
    producer = FakeProducer()
    transaction = OpenTransaction(producer, guarantee="exactly_once_v2", known_topics=["out"])
    transaction.send("out", b"k1", b"v1")
    producer.fail["produce"] = kafka_exception(KafkaError._FATAL, fatal=True)
    producer.fail["abort"] = kafka_exception(KafkaError._FENCED, fatal=True)
    transaction.send("out", b"k2", b"v2")
    assert isinstance(transaction.failure, ProducerFencedError)
    assert transaction.failure.code == "_FENCED" and not transaction.open


def test_an_abort_that_timed_out_is_resumed_before_the_next_transaction(
    store: TaskStore[str, int],
) -> None:
    # A broker that went away during a commit: the abort times out ("retry call to
    # resume"), and librdkafka refuses begin_transaction until that abort is called again.
    producer = FakeProducer()
    transaction = OpenTransaction(producer, guarantee="exactly_once_v2", known_topics=["out"])

    def commit() -> Any:
        return commit_tasks(
            transaction,
            stores=[StoreTopic(store=store, topic=TOPIC, topic_id="topic-id-1")],
            offsets=[TopicPartition("in", 3, 42)],
            group_metadata=lambda: "group-metadata",
            commit_offsets=lambda tps: None,
            timeout_s=5,
        )

    store.store.put("a", 1)
    producer.fail["send_offsets"] = kafka_exception(KafkaError._TRANSPORT, abortable=True)
    producer.fail["abort"] = kafka_exception(KafkaError._TIMED_OUT, retriable=True)
    with pytest.raises(TransactionAbortedError):
        commit()
    assert transaction.abort_unfinished and store.store.get("a") is None
    calls = len(producer.calls)
    store.store.put("a", 2)
    commit()
    assert producer.calls[calls : calls + 2] == ["abort", "begin"]
    assert not transaction.abort_unfinished and store.store.get("a") == 2


def test_an_unchanged_partition_is_stamped_again_only_once_its_stamp_is_old(tmp_path: Path) -> None:
    stores: list[TaskStore[str, int]] = [
        TaskStore(
            name="s",
            partition=p,
            engine=RocksDBEngine.open(tmp_path / f"s-{p}", config=RocksDBConfig(), cache=None),
            key_serde=StringSerde(),
            value_serde=IntSerde(),
        )
        for p in (0, 1)
    ]
    now_ms = [50_000]
    producer = FakeProducer()

    def commit() -> None:
        commit_tasks(
            OpenTransaction(producer, guarantee="exactly_once_v2"),
            stores=[StoreTopic(store=s, topic=TOPIC, topic_id="topic-id-1") for s in stores],
            offsets=[],
            group_metadata=lambda: "group-metadata",
            commit_offsets=lambda tps: None,
            timeout_s=5,
            wall_clock_ms=lambda: now_ms[0],
        )

    def stamps() -> list[int | None]:
        return [stored_applied_time_ms(s.engine) for s in stores]

    try:
        stores[0].store.put("a", 1)
        commit()  # the first commit of a stack stamps every partition
        assert stamps() == [50_000, 50_000]
        offsets = [s.applied_offset for s in stores]
        now_ms[0] += IDLE_STAMP_INTERVAL_MS - 1
        stores[0].store.put("a", 2)
        commit()
        assert stamps() == [50_000 + IDLE_STAMP_INTERVAL_MS - 1, 50_000]  # partition 1: no write
        now_ms[0] += 1
        stores[0].store.put("a", 3)
        commit()
        assert stamps() == [50_000 + IDLE_STAMP_INTERVAL_MS] * 2  # its stamp was old: rewritten
        assert stores[0].applied_offset > offsets[0] and stores[1].applied_offset == offsets[1]
        assert stores[0].store.get("a") == 3 and stores[1].store.get("a") is None
    finally:
        for s in stores:
            s.close()


def test_the_bounded_caller_keeps_its_thread_and_leaves_a_stuck_call_behind() -> None:
    caller = BoundedCaller("test-caller")
    threads: list[threading.Thread] = []
    release = threading.Event()
    entered = threading.Event()

    def where() -> None:
        threads.append(threading.current_thread())

    def stuck() -> None:
        entered.set()
        release.wait(10)

    def fails() -> None:
        raise ValueError("boom")

    try:
        for _ in range(3):
            assert caller.call(where, 5)
        assert len(set(threads)) == 1 and threads[0] is not threading.current_thread()
        assert not caller.call(stuck, 0.05)
        assert entered.is_set()
        assert caller.call(where, 5)
        assert threads[-1] is not threads[0]  # a new thread: the first is still in its call
        with pytest.raises(ValueError, match="boom"):
            caller.call(fails, 5)
        assert caller.call(where, 5) and threads[-1] is threads[-2]
    finally:
        release.set()
        caller.close()
    threads[0].join(5)
    threads[-1].join(5)
    assert not threads[0].is_alive() and not threads[-1].is_alive()


def test_the_bounded_callers_thread_ends_when_idle() -> None:
    caller = BoundedCaller("test-idle", idle_exit_s=0.05)
    threads: list[threading.Thread] = []

    def where() -> None:
        threads.append(threading.current_thread())

    assert caller.call(where, 5)
    threads[0].join(5)
    assert not threads[0].is_alive()
    assert caller.call(where, 5)  # a call after the idle exit starts a new thread
    assert threads[1] is not threads[0]
    caller.close()
    threads[1].join(5)
    assert not threads[1].is_alive()
