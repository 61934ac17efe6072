"""The commit of one process: every task's changelog records, the outputs and the input offsets.

Exactly-once (``exactly_once_v2``, KIP-447: one transactional producer per
process), numbered as the tests crash them:

1. ``begin_transaction``;
2. produce one changelog record per buffered key of every store partition
   (a tombstone for a delete) to partition ``p`` of the store's topic (a
   store in time's with its timestamp as the record's CreateTime), and
   the buffered outputs.  A commit of any size: when librdkafka's local
   queue is full (``BufferError``) the producer is polled (delivery reports
   free room) and the record produced again, until the commit's deadline;
3. ``flush``: every record is acknowledged by the broker (inside the open
   transaction), and its offset known from the delivery report;
4. ``send_offsets_to_transaction`` with the consumer's *current* group
   metadata (generation / member epoch, member id): a zombie whose
   membership has moved on is refused here (fencing);
5. ``commit_transaction``;
6. only now apply each store partition's buffer to RocksDB, in one
   WriteBatch with the applied offset (its last changelog offset + 1), the
   topic id and the wall-clock time.

Recovery, matching the steps: a crash (or an error) before 5 completes
leaves an open or aborted transaction: ``read_committed`` readers never see
it, the input offsets stay where they were, RocksDB was not touched, and the
new owner restores the committed changelog and reprocesses the inputs.  A
crash after 5 and before 6 leaves RocksDB behind the committed changelog: the
next restore replays the tail (incremental).  An error with
``txn_requires_abort`` aborts (:class:`TransactionAbortedError`); a fenced
producer or a fatal error is :class:`ProducerFencedError`.  Either way the
buffers are dropped and the caller rewinds the inputs.

At-least-once: 2 and 3 without a transaction, then a synchronous
``Consumer.commit`` of the offsets, then 6.  A crash between 3 and the
offset commit leaves changelog records whose inputs are processed again:
duplicates, as Kafka Streams' at-least-once allows.

Thread-safety: runs on the processor's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from statestore.kafka.config import ProcessingGuarantee
from statestore.kafka.errors import KafkaClientError, ProducerFencedError, TransactionAbortedError
from statestore.kafka.restore import applied_meta
from statestore.kafka.store import TaskStore

__all__ = [
    "CommitResult",
    "OutputRecord",
    "StoreTopic",
    "TransactionalProducer",
    "commit_tasks",
]

logger = logging.getLogger(__name__)

FaultHook = Callable[[str], None]
"""Called with a step name (``"produced"``: after step 3) for fault injection in tests."""


class TransactionalProducer(Protocol):
    """What a commit needs of a producer (confluent-kafka's ``Producer`` has it)."""

    def begin_transaction(self) -> None:
        """Start a transaction."""

    def produce(  # noqa: PLR0917 - confluent-kafka's signature
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        on_delivery: Callable[[Any, Any], None] | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp: int = 0,
    ) -> None:
        """Queue one record (``BufferError`` when the local queue is full; ``timestamp`` 0: now)."""

    def poll(self, timeout: float = -1) -> int:
        """Serve delivery reports (frees room in the local queue); the count served."""
        ...

    def flush(self, timeout: float = -1) -> int:
        """Wait for every delivery report; the count still queued."""
        ...

    def send_offsets_to_transaction(
        self, positions: list[Any], group_metadata: Any, timeout: float = -1
    ) -> None:
        """Add the consumer offsets to the transaction."""

    def commit_transaction(self, timeout: float = -1) -> None:
        """Commit the transaction."""

    def abort_transaction(self, timeout: float = -1) -> None:
        """Abort the transaction."""


@attrs.frozen(kw_only=True)
class StoreTopic:
    """A store partition to commit and the changelog topic it writes.  Immutable."""

    store: TaskStore[Any, Any]
    topic: str
    topic_id: str


@attrs.frozen(kw_only=True)
class OutputRecord:
    """A record for an output topic, produced inside the commit.  Immutable."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int = -1
    """``-1``: Kafka's default partitioner (murmur2, as ``statestore.partition_for``)."""
    headers: list[tuple[str, bytes]] | None = None
    """Record headers (name, value), or ``None``."""


@attrs.frozen(kw_only=True)
class CommitResult:
    """What one commit wrote.  Immutable."""

    changelog_records: int
    outputs: int
    offsets: int
    seconds: float


def _error_of(exc: BaseException) -> Any:
    return exc.args[0] if exc.args and hasattr(exc.args[0], "code") else None


def _fenced(error: Any) -> bool:
    from confluent_kafka import KafkaError  # noqa: PLC0415

    fenced_codes = {KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
    fenced_codes.add(getattr(KafkaError, "PRODUCER_FENCED", KafkaError._FENCED))
    return bool(error.fatal()) or error.code() in fenced_codes


def _describe(error: Any) -> tuple[str, str]:
    return str(error.name()), str(error.str())


def commit_tasks(
    producer: TransactionalProducer,
    *,
    guarantee: ProcessingGuarantee,
    stores: Sequence[StoreTopic],
    outputs: Sequence[OutputRecord],
    offsets: list[Any],
    group_metadata: Callable[[], Any],
    commit_offsets: Callable[[list[Any]], None],
    timeout_s: float,
    wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    fault_hook: FaultHook | None = None,
) -> CommitResult:
    """Run the commit protocol of the module docstring over ``stores``, ``outputs`` and ``offsets``.

    ``offsets`` are confluent-kafka ``TopicPartition`` s (next offset to read);
    ``commit_offsets`` is the at-least-once offset commit.  On failure every
    store's buffer is dropped and :class:`TransactionAbortedError` or
    :class:`ProducerFencedError` is raised; the caller rewinds its inputs.
    """
    started = time.perf_counter()
    eos = guarantee == "exactly_once_v2"
    last_offsets: dict[int, int] = {}
    delivery_errors: list[Any] = []

    def delivered(index: int) -> Callable[[Any, Any], None]:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                delivery_errors.append(error)
            else:
                offset = message.offset()
                if offset > last_offsets.get(index, -1):
                    last_offsets[index] = offset

        return report

    deadline = time.monotonic() + timeout_s

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    in_transaction = False
    changelog_records = 0
    try:
        if eos:
            producer.begin_transaction()  # 1
            in_transaction = True
        produce = producer.produce
        for index, entry in enumerate(stores):  # 2
            report = delivered(index)
            topic = entry.topic
            partition = entry.store.partition
            pairs, stamps = entry.store.changelog_records()
            if stamps is None:  # key-value: the producer stamps the records
                for key, value in pairs:
                    try:
                        produce(
                            topic, value=value, key=key, partition=partition, on_delivery=report
                        )
                    except BufferError:
                        _produce_when_room(
                            producer,
                            deadline,
                            topic,
                            value=value,
                            key=key,
                            partition=partition,
                            on_delivery=report,
                        )
            else:  # a store in time: each record carries its timestamp (CreateTime)
                for (key, value), stamp in zip(pairs, stamps, strict=True):
                    try:
                        produce(
                            topic,
                            value=value,
                            key=key,
                            partition=partition,
                            on_delivery=report,
                            timestamp=stamp,
                        )
                    except BufferError:
                        _produce_when_room(
                            producer,
                            deadline,
                            topic,
                            value=value,
                            key=key,
                            partition=partition,
                            on_delivery=report,
                            timestamp=stamp,
                        )
            changelog_records += len(pairs)
        for record in outputs:
            try:
                produce(
                    record.topic,
                    value=record.value,
                    key=record.key,
                    partition=record.partition,
                    headers=record.headers,
                )
            except BufferError:
                _produce_when_room(
                    producer,
                    deadline,
                    record.topic,
                    value=record.value,
                    key=record.key,
                    partition=record.partition,
                    headers=record.headers,
                )
        _check_delivered(producer.flush(left()), delivery_errors, eos=eos, timeout_s=timeout_s)  # 3
        if fault_hook is not None:
            fault_hook("produced")
        if eos:
            producer.send_offsets_to_transaction(offsets, group_metadata(), left())  # 4
            _commit_with_retries(producer, deadline)  # 5
            in_transaction = False
        elif offsets:
            commit_offsets(offsets)
    except KafkaClientError:
        _drop(stores)
        if in_transaction:
            _abort_quietly(producer, left())
        raise
    except Exception as exc:
        _drop(stores)
        error = _error_of(exc)
        if error is None:
            # Not a KafkaException: confluent-kafka surfaces a fatal producer error met
            # inside a delivery callback as SystemError, for one.  Aborted and typed; a
            # producer that is really gone fails the next begin_transaction as fenced.
            if in_transaction:
                _abort_quietly(producer, left())
            raise TransactionAbortedError("commit", type(exc).__name__, str(exc)) from exc
        name, reason = _describe(error)
        if eos and _fenced(error):
            raise ProducerFencedError("commit", name, reason) from exc
        if in_transaction:
            _abort_quietly(producer, left())
        raise TransactionAbortedError("commit", name, reason) from exc
    except BaseException:  # KeyboardInterrupt, SystemExit: abort, never leave it open
        _drop(stores)
        if in_transaction:
            _abort_quietly(producer, left())
        raise
    if fault_hook is not None:
        fault_hook("committed")
    now_ms = wall_clock_ms()
    for index, entry in enumerate(stores):  # 6
        last = last_offsets.get(index)
        applied = entry.store.applied_offset if last is None else last + 1
        entry.store.apply(applied, applied_meta(entry.topic_id, now_ms))
    return CommitResult(
        changelog_records=changelog_records,
        outputs=len(outputs),
        offsets=len(offsets),
        seconds=time.perf_counter() - started,
    )


def _check_delivered(
    remaining: int, delivery_errors: Sequence[Any], *, eos: bool, timeout_s: float
) -> None:
    """Raise unless every record was acknowledged without error."""
    if remaining:
        raise TransactionAbortedError(
            "flush", "_TIMED_OUT", f"{remaining} records not acknowledged in {timeout_s}s"
        )
    if delivery_errors:
        name, reason = _describe(delivery_errors[0])
        if eos and _fenced(delivery_errors[0]):
            raise ProducerFencedError("produce", name, reason)
        raise TransactionAbortedError("produce", name, reason)


def _produce_when_room(
    producer: TransactionalProducer, deadline: float, topic: str, **record: Any
) -> None:
    """Produce ``record`` once librdkafka's queue has room (backpressure), or raise at ``deadline``."""
    while True:
        producer.poll(0.05)  # delivery reports free room in the queue
        try:
            producer.produce(topic, **record)
        except BufferError as exc:
            if time.monotonic() >= deadline:
                raise TransactionAbortedError(
                    "produce", "_QUEUE_FULL", f"the producer queue stayed full: {exc}"
                ) from exc
            continue
        return


def _commit_with_retries(producer: TransactionalProducer, deadline: float) -> None:
    """``commit_transaction``, retried while the error is retriable and time is left."""
    while True:
        try:
            producer.commit_transaction(max(0.1, deadline - time.monotonic()))
        except Exception as exc:
            error = _error_of(exc)
            if error is None or not error.retriable() or time.monotonic() >= deadline:
                raise
            logger.info("commit_transaction: %s, retrying", error.str())
            continue
        return


def _drop(stores: Sequence[StoreTopic]) -> None:
    for entry in stores:
        entry.store.drop_pending()


def _abort_quietly(producer: TransactionalProducer, timeout_s: float) -> None:
    try:
        producer.abort_transaction(timeout_s)
    except Exception as exc:  # noqa: BLE001 - the commit's own error is what the caller sees
        logger.warning("abort_transaction failed after a failed commit: %s", exc)
