"""The whole Processor against an in-memory cluster (no broker): tasks, exceptions, commits.

The application adds each record's delta to its key's sum (store ``sums``) and
sends ``seq`` to ``out``; the checks read what the fake cluster committed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from confluent_kafka import KafkaError

from statestore.kafka import (
    FatalCommitError,
    KafkaClientError,
    KafkaStoreSpec,
    ProcessingError,
    Processor,
    ProcessorConfig,
    ProcessorContext,
    ProcessorFailedError,
    RebalanceListenerError,
    TaskState,
    UserCallbackError,
    log_and_continue,
)
from statestore.kafka.restorer import Restorer
from statestore.serdes import IntSerde, StringSerde
from tests.statestore.kafka.fake_cluster import FakeCluster, FakeGroupConsumer, TopicPartition
from tests.statestore.kafka.fakes import kafka_exception

PARTITIONS = 2


class BadRecordError(Exception):
    """Raised by the test's process() for chosen records."""


def _cluster(records: int) -> FakeCluster:
    cluster = FakeCluster()
    cluster.create("in", PARTITIONS)
    cluster.create("out", PARTITIONS)
    cluster.create("dlq", 1)
    _feed(cluster, records)
    return cluster


def _feed(cluster: FakeCluster, records: int, start: int = 0) -> None:
    """Append ``records`` input records (seq ``start``, ``start + 1``, ...: each task restores
    and runs on its own, so a test that needs every task running before the first record feeds
    after)."""
    for seq in range(start, start + records):
        value = msgpack.packb({"seq": seq, "delta": 1})
        cluster.append("in", seq % PARTITIONS, f"k{seq % 4}".encode(), value)


def _processor(
    cluster: FakeCluster,
    state_dir: Path,
    fail_on: Callable[[int], bool] = lambda _seq: False,
    *,
    commit_interval_ms: int = 60_000,
    transaction_timeout_ms: int = 120_000,
    stuck_call_grace_ms: int = 10_000,
    **kwargs: Any,
) -> Processor:
    def process(context: ProcessorContext, message: Any) -> None:
        record = msgpack.unpackb(message.value())
        sums = context.store("sums")
        key = message.key().decode()
        sums.put(key, sums.get(key, 0) + record["delta"])
        context.send("out", message.key(), msgpack.packb(record["seq"]))
        if fail_on(record["seq"]):
            raise BadRecordError(record["seq"])

    config = ProcessorConfig(
        application_id="app",
        bootstrap_servers="fake:9092",
        input_topics=("in",),
        output_topics=("out",),
        instance_id="i1",
        commit_interval_ms=commit_interval_ms,
        transaction_timeout_ms=transaction_timeout_ms,
        dead_letter_queue_topic="dlq",
        commit_retry_backoff_ms=0,
        stuck_call_grace_ms=stuck_call_grace_ms,
    )
    return Processor(
        config,
        state_dir,
        [KafkaStoreSpec(name="sums", key_serde=StringSerde(), value_serde=IntSerde())],
        process,
        clients=cluster.clients(),  # type: ignore[arg-type]
        **kwargs,
    )


def _outputs(cluster: FakeCluster) -> list[int]:
    return sorted(msgpack.unpackb(value) for _o, _k, value, _h in cluster.records("out"))


def _until_running(processor: Processor, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while processor.assignment != list(range(PARTITIONS)):
        assert time.monotonic() < deadline, processor.tasks
        processor.poll_once(0.01)


def _run_then_poll(processor: Processor) -> None:
    _until_running(processor)
    processor.poll_once(0.01)


def test_tasks_move_created_restoring_running_and_close(tmp_path: Path) -> None:
    cluster = _cluster(0)
    processor = _processor(cluster, tmp_path)
    processor.start()
    assert processor.tasks == {}
    _until_running(processor)
    assert processor.tasks == dict.fromkeys(range(PARTITIONS), TaskState.RUNNING)
    processor.close()
    assert processor.tasks == {}


def test_an_exception_abandons_every_task_and_the_retry_applies_once(tmp_path: Path) -> None:
    cluster = _cluster(0)
    fails = {13: 1}

    def flaky(seq: int) -> bool:
        if fails.get(seq):
            fails[seq] -= 1
            return True
        return False

    with _processor(cluster, tmp_path, flaky) as processor:
        _until_running(processor)
        _feed(cluster, 20)
        with pytest.raises(ProcessingError) as caught:
            processor.poll_once(0.01)
        assert caught.value.offset == 13 // PARTITIONS and caught.value.partition == 1
        assert isinstance(caught.value.__cause__, BadRecordError)
        calls = cluster.producers[0].calls
        assert calls[-1] == "abort" and "commit" not in calls, "what was sent is aborted"
        assert cluster.records("out") == []
        for store in processor.stores("sums").values():
            assert dict(store.items()) == {}, "the buffers were dropped"
        processor.poll_once(0.01)  # the loop catches and goes on: everything replayed
        processor.commit()
    assert _outputs(cluster) == list(range(20))
    assert cluster.group_offsets == {("in", 0): 10, ("in", 1): 10}


def test_with_block_leaving_on_an_exception_commits_nothing(tmp_path: Path) -> None:
    cluster = _cluster(20)
    processor = _processor(cluster, tmp_path, lambda seq: seq == 19)
    with pytest.raises(ProcessingError), processor:
        _run_then_poll(processor)
    assert "commit" not in cluster.producers[0].calls
    assert "abort" in cluster.producers[0].calls, "the outputs sent were aborted"
    assert cluster.records("out") == [] and cluster.group_offsets == {}


def test_continue_skips_the_record_and_dead_letters_it_in_the_same_transaction(
    tmp_path: Path,
) -> None:
    cluster = _cluster(20)
    with _processor(
        cluster,
        tmp_path,
        lambda seq: seq in {4, 9},
        processing_exception_handler=log_and_continue,
    ) as processor:
        _until_running(processor)
        for _ in range(3):
            processor.poll_once(0.01)
        processor.commit()
        assert processor.dropped_records == 2 and processor.processing_errors == 2
        sums = {k: v for s in processor.stores("sums").values() for k, v in s.items()}
    assert _outputs(cluster) == [s for s in range(20) if s not in {4, 9}]
    dead = cluster.records("dlq")
    assert sorted(msgpack.unpackb(v)["seq"] for _o, _k, v, _h in dead) == [4, 9]
    assert all(dict(h)["__streams.errors.exception"].endswith(b"BadRecordError") for *_r, h in dead)
    assert cluster.producers[0].calls.count("commit") == 1, "one transaction for all of it"
    assert sum(sums.values()) == 18


def _poll_until_stopped(processor: Processor) -> FatalCommitError:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            processor.poll_once(0.01)
        except FatalCommitError as exc:
            return exc
    raise AssertionError("the processor never stopped")


def test_a_commit_that_keeps_failing_stops_the_processor_after_its_attempts(
    tmp_path: Path,
) -> None:
    cluster = _cluster(10)
    with _processor(cluster, tmp_path, commit_interval_ms=1) as processor:
        # failing from the start: a task runs (and commits) as soon as it is restored,
        # before the others are
        producer = cluster.producers[0]
        producer.fail_always["commit"] = kafka_exception(KafkaError._TIMED_OUT, abortable=True)
        stopped = _poll_until_stopped(processor)
        assert stopped.attempts == 5 and processor.aborted == 5
        assert producer.calls.count("abort") == 5
        with pytest.raises(ProcessorFailedError):
            processor.poll_once(0.01)
    assert cluster.records("out") == [] and cluster.group_offsets == {}


def test_a_failure_that_cannot_heal_stops_at_once(tmp_path: Path) -> None:
    cluster = _cluster(10)
    with _processor(cluster, tmp_path, commit_interval_ms=1) as processor:
        _until_running(processor)
        cluster.producers[0].fail_always["begin"] = kafka_exception(
            KafkaError.TOPIC_AUTHORIZATION_FAILED
        )
        stopped = _poll_until_stopped(processor)
        assert stopped.code == "TOPIC_AUTHORIZATION_FAILED" and stopped.attempts == 1


def test_a_transient_failure_heals_and_nothing_is_lost_or_doubled(tmp_path: Path) -> None:
    cluster = _cluster(10)
    with _processor(cluster, tmp_path, commit_interval_ms=1) as processor:
        _until_running(processor)
        producer = cluster.producers[0]
        producer.fail["commit"] = kafka_exception(KafkaError._TIMED_OUT, abortable=True)
        deadline = time.monotonic() + 10
        while cluster.group_offsets != {("in", 0): 5, ("in", 1): 5}:
            assert time.monotonic() < deadline
            processor.poll_once(0.01)
        assert processor.aborted == 1 and processor.commits >= 1
    assert _outputs(cluster) == list(range(10))


def test_a_send_offsets_call_that_never_returns_replaces_the_producer_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # librdkafka's send_offsets_to_transaction can ignore its timeout for good while the
    # group coordinator is away; the commit gives up on it, and on its producer.
    cluster = _cluster(10)
    release = threading.Event()
    entered = threading.Event()

    entered_at: list[float] = []

    def never_returns(*_args: Any, **_kwargs: Any) -> None:
        entered_at.append(time.monotonic())
        entered.set()
        release.wait(20)  # (returns, late: without the bound the commit just waits)

    try:
        with _processor(
            cluster,
            tmp_path,
            commit_interval_ms=1,
            transaction_timeout_ms=1000,
            stuck_call_grace_ms=200,
        ) as processor:
            _until_running(processor)
            cluster.producers[0].send_offsets_to_transaction = never_returns  # type: ignore[method-assign]
            deadline = time.monotonic() + 15
            while processor.last_commit_error is None:
                assert time.monotonic() < deadline
                processor.poll_once(0.01)
            # given up stuck_call_grace_ms (0.2 s) after the call's own timeout, not 10 s
            assert time.monotonic() - entered_at[0] < 5
            while cluster.group_offsets != {("in", 0): 5, ("in", 1): 5}:
                assert time.monotonic() < deadline
                processor.poll_once(0.01)
            assert entered.is_set()
            assert processor.last_commit_error is not None
            assert processor.last_commit_error.code == "_TIMED_OUT"
            assert len(cluster.producers) == 2, "the stuck producer was replaced"
            assert processor.aborted == 1 and processor.commits >= 1
    finally:
        release.set()
    assert _outputs(cluster) == list(range(10))


def test_a_new_instance_restores_the_stores_from_the_changelog(tmp_path: Path) -> None:
    cluster = _cluster(20)
    with _processor(cluster, tmp_path / "first") as processor:
        _until_running(processor)
        processor.poll_once(0.01)
        processor.commit()
        before = {k: v for s in processor.stores("sums").values() for k, v in s.items()}
    restored: list[Any] = []
    with _processor(cluster, tmp_path / "second", on_restored=restored.append) as processor:
        _until_running(processor)
        after = {k: v for s in processor.stores("sums").values() for k, v in s.items()}
    assert after == before == {"k0": 5, "k1": 5, "k2": 5, "k3": 5}
    assert sorted(r.partition for r in restored) == list(range(PARTITIONS))
    assert sum(r.records_restored for r in restored) == 4


def test_client_overrides_reach_every_client_and_stay_out_of_the_repr(tmp_path: Path) -> None:
    cluster = _cluster(0)
    seen: list[dict[str, Any]] = []
    clients = cluster.clients()
    for kind in ("admin", "consumer", "producer"):
        make = getattr(clients, kind)

        def record(settings: Any, make: Any = make) -> Any:
            seen.append(dict(settings))
            return make(settings)

        setattr(clients, kind, record)
    config = ProcessorConfig(
        application_id="app",
        bootstrap_servers="fake:9092",
        input_topics=("in",),
        instance_id="i1",
        client_overrides={"security.protocol": "SASL_SSL", "sasl.password": "s3cret"},
        consumer_overrides={"sasl.password": "s3cret"},
        producer_overrides={"ssl.key.password": "s3cret"},
    )
    assert "s3cret" not in repr(config)
    processor = Processor(
        config, tmp_path, [KafkaStoreSpec(name="sums")], lambda _c, _m: None, clients=clients
    )  # type: ignore[arg-type]
    processor.start()
    processor.close()
    assert (
        len(seen) == 5
    )  # the start's probe admin, admin, restore consumer, producer, main consumer
    assert all(s["sasl.password"] == "s3cret" for s in seen)


def test_metrics_give_rates_commit_latency_and_restore_progress(tmp_path: Path) -> None:
    cluster = _cluster(20)
    with _processor(cluster, tmp_path / "first") as processor:
        _until_running(processor)
        processor.poll_once(0.01)
        processor.commit()
        metrics = processor.metrics()
    assert metrics["process-total"] == 20 and metrics["commit-total"] == 1
    assert metrics["process-rate"] > 0 and metrics["commit-rate"] > 0
    assert 0 < metrics["commit-latency-avg"] <= metrics["commit-latency-max"]
    assert metrics["restore-total"] == 0 == metrics["restore-remaining-records-total"]
    with _processor(cluster, tmp_path / "second") as processor:
        _until_running(processor)
        metrics = processor.metrics()
    # four keys over two partitions, one changelog record each
    assert metrics["restore-total"] == 4 and metrics["restore-remaining-records-total"] == 0
    assert metrics["task-states"] == {0: "running", 1: "running"}
    assert metrics["commit-latency-max"] == 0.0, "no commit in this process"


def test_a_rewind_inside_consume_drops_the_batch_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rebalance callback runs inside consume(), after the call may have gathered records
    # of the partitions it keeps.  A lost partition aborts the transaction and rewinds every
    # kept task to its committed offsets; the records that consume() then returns were
    # fetched before that rewind.  Processing them would move the kept task's position past
    # the records the rewind is to replay, and the replayed ones would be skipped as
    # "fetched before a rewind": inputs committed, their outputs never sent.
    cluster = _cluster(0)
    armed = _rebalance_after_the_next_fetch(monkeypatch, "on_lost")
    with _processor(cluster, tmp_path) as processor:
        _until_running(processor)
        _feed(cluster, 10)
        processor.poll_once(0.01)  # seq 0-9 processed, not committed
        _feed(cluster, 10, start=10)
        armed.set()
        processor.poll_once(0.01)  # gathers offsets 5-9 of both, then partition 1 is lost
        for _ in range(3):
            processor.poll_once(0.01)
        processor.commit()
    _assert_partition_0_sent_once(cluster)


def _rebalance_after_the_next_fetch(
    monkeypatch: pytest.MonkeyPatch, callback: str
) -> threading.Event:
    """Once the returned event is set, the main consumer's next ``consume`` that fetches
    something calls the processor's ``callback`` (``on_lost``, ``on_revoke``) for partition 1
    of ``in`` after the fetch, as librdkafka runs a rebalance callback inside its poll (an
    exception from the callback leaves the call without its records)."""
    armed = threading.Event()
    consume = FakeGroupConsumer.consume

    def consume_then_rebalance(self: FakeGroupConsumer, num: int = 1, timeout: float = -1) -> Any:
        out = consume(self, num, timeout)
        if armed.is_set() and out:
            armed.clear()
            self.callbacks[callback](self, [TopicPartition("in", 1)])
        return out

    monkeypatch.setattr(FakeGroupConsumer, "consume", consume_then_rebalance)
    return armed


def _assert_partition_0_sent_once(cluster: FakeCluster) -> None:
    kept = [seq for seq in _outputs(cluster) if seq % PARTITIONS == 0]
    assert kept == list(range(0, 20, PARTITIONS)), "every input of the kept partition sent once"
    assert cluster.group_offsets[("in", 0)] == 10


class _FailingRestoreListener:
    """A StateRestoreListener whose ``on_restore_start`` of partition 1, on the restorer thread,
    says it entered, waits for ``fail`` and raises (the restorer thread dies of it)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.fail = threading.Event()

    def on_restore_start(self, store: str, partition: int, start: int, end: int) -> None:
        if partition == 1:
            self.entered.set()
            assert self.fail.wait(60), "the test never let the listener fail"
            raise RuntimeError("the restore listener failed")

    def on_batch_restored(self, store: str, partition: int, last: int, count: int) -> None:
        pass

    def on_restore_end(self, store: str, partition: int, total: int) -> None:
        pass


def test_the_error_that_ends_a_with_block_is_raised_whatever_the_restorer_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The with block fails while a restore listener callback holds the restorer thread; the
    # close takes the restoring task back (Restorer.remove), and just then the callback kills
    # the restorer thread.  The close must stop waiting when the thread dies (not after its
    # 60 s), close everything, and leave the with block's error, not the restorer's, to the
    # caller.
    cluster = _cluster(0)
    listener = _FailingRestoreListener()
    remove = Restorer.remove

    def remove_as_the_listener_fails(self: Restorer, partition: int, timeout_s: float = 60) -> None:
        listener.fail.set()
        remove(self, partition, timeout_s)

    monkeypatch.setattr(Restorer, "remove", remove_as_the_listener_fails)
    processor = _processor(cluster, tmp_path, restore_listener=listener)
    started: list[float] = []

    def fail_while_restoring() -> None:
        with processor:
            deadline = time.monotonic() + 30
            while not listener.entered.is_set():
                assert time.monotonic() < deadline, processor.tasks
                processor.poll_once(0.01)
            assert processor.tasks[1] is TaskState.RESTORING
            started.append(time.monotonic())
            raise BadRecordError("the with block failed")

    with pytest.raises(BadRecordError, match=r"^the with block failed$"):
        fail_while_restoring()
    assert time.monotonic() - started[0] < 30, "the close waited for a dead restorer thread"
    assert processor.tasks == {}
    # every engine was closed: a new processor opens the same state directory
    with _processor(cluster, tmp_path) as again:
        _until_running(again)


class _BlockingRestoreListener(_FailingRestoreListener):
    """``on_restore_start`` of partition 1 says it entered and waits for ``fail`` (then returns)."""

    def on_restore_start(self, store: str, partition: int, start: int, end: int) -> None:
        if partition == 1:
            self.entered.set()
            assert self.fail.wait(60), "the test never released the listener"


def test_a_close_does_not_wait_for_ever_on_a_restore_listener_that_holds_the_restorer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A listener callback that does not return holds the restorer thread.  The close waits for
    # it (here 0.2 s instead of 60), closes every engine all the same (a new processor opens
    # the same state directory), says so, and raises the timeout once all is closed.  The
    # thread, released afterwards, fails quietly on the closed consumer or engines.
    cluster = _cluster(0)
    listener = _BlockingRestoreListener()
    remove, close = Restorer.remove, Restorer.close
    monkeypatch.setattr(Restorer, "remove", lambda self, p, timeout_s=60: remove(self, p, 0.2))
    monkeypatch.setattr(Restorer, "close", lambda self, timeout_s=60: close(self, 0.2))
    processor = _processor(cluster, tmp_path, restore_listener=listener)

    def close_while_the_listener_holds_the_restorer() -> None:
        with processor:
            deadline = time.monotonic() + 30
            while not listener.entered.is_set():
                assert time.monotonic() < deadline, processor.tasks
                processor.poll_once(0.01)
            caplog.clear()

    try:
        with pytest.raises(KafkaClientError, match=r"did not answer in 0\.2s"):
            close_while_the_listener_holds_the_restorer()
        assert "the restorer thread did not stop in 0.2s" in caplog.text
        assert processor.tasks == {}
    finally:
        listener.fail.set()
    monkeypatch.undo()
    with _processor(cluster, tmp_path) as again:
        _until_running(again)


def test_an_on_rebalance_callback_that_raises_loses_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The user's on_rebalance runs inside consume(), which may have fetched records of the
    # partitions this process keeps; an exception from it leaves consume() without them (as
    # confluent-kafka drops a batch whose callback raised), while the consumer's positions are
    # past them.  poll_once raises it typed (the user's error its cause) after rewinding to
    # the committed offsets: a loop that catches it and goes on loses nothing.
    cluster = _cluster(0)
    armed = _rebalance_after_the_next_fetch(monkeypatch, "on_revoke")
    fail = threading.Event()
    fail.set()

    def on_rebalance(event: Any) -> None:
        if event.kind == "revoked" and fail.is_set():
            fail.clear()
            raise BadRecordError("the user's rebalance callback failed")

    with _processor(cluster, tmp_path, on_rebalance=on_rebalance) as processor:
        _until_running(processor)
        _feed(cluster, 10)
        processor.poll_once(0.01)  # seq 0-9 processed, not committed
        _feed(cluster, 10, start=10)
        armed.set()
        with pytest.raises(RebalanceListenerError, match="revoked") as caught:
            processor.poll_once(0.01)  # gathers offsets 5-9 of both, then the revoke raises
        assert isinstance(caught.value.__cause__, BadRecordError)
        for _ in range(3):
            processor.poll_once(0.01)
        processor.commit()
    _assert_partition_0_sent_once(cluster)


class _FailsOnce:
    """A callback that raises ``BadRecordError`` on its first call, then answers ``then(...)``."""

    def __init__(self, then: Callable[..., Any]) -> None:
        self.calls = 0
        self._then = then

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise BadRecordError("the application's callback failed")
        return self._then(*args)


@pytest.mark.parametrize("callback", ["on_commit", "on_restored", "processing_exception_handler"])
def test_a_callback_that_raises_is_a_typed_error_and_a_loop_that_goes_on_loses_nothing(
    tmp_path: Path, callback: str
) -> None:
    # Whatever the runtime had done before calling back stays done (a commit stays committed,
    # a task runs); the error is typed, with the application's own as its cause; polling on
    # commits every input once (the handler's poison record skipped, once it says so).
    cluster = _cluster(0)
    handler = callback == "processing_exception_handler"
    then: Callable[..., Any] = log_and_continue if handler else (lambda *_args: None)
    hook = _FailsOnce(then)
    expected = [seq for seq in range(10) if not (handler and seq == 3)]
    errors: list[UserCallbackError] = []
    with _processor(cluster, tmp_path, lambda seq: handler and seq == 3, **{callback: hook}) as p:
        _feed(cluster, 10)
        deadline = time.monotonic() + 30
        while _outputs(cluster) != expected:
            assert time.monotonic() < deadline, (_outputs(cluster), errors)
            try:
                p.poll_once(0.01)
                p.commit()
            except UserCallbackError as exc:
                errors.append(exc)
    assert [e.callback for e in errors] == [callback]
    assert isinstance(errors[0].__cause__, BadRecordError)
    if callback == "on_restored":  # one report a partition, all delivered though one raised
        assert hook.calls == PARTITIONS
    assert cluster.group_offsets[("in", 0)] == 5
    assert cluster.group_offsets[("in", 1)] == 5


def test_a_processing_handler_that_returns_junk_is_a_typed_error(tmp_path: Path) -> None:
    cluster = _cluster(0)
    with _processor(
        cluster, tmp_path, lambda seq: seq == 3, processing_exception_handler=lambda _e: "skip"
    ) as processor:
        _until_running(processor)
        _feed(cluster, 10)

        def poll() -> None:
            for _ in range(5):
                processor.poll_once(0.01)

        with pytest.raises(UserCallbackError, match=r"returned 'skip' on in-1@1, not a Proc"):
            poll()
    assert _outputs(cluster) == []
