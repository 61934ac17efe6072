"""The transaction of one process: outputs as they are sent, then every task's changelog records
and the input offsets at commit.

Exactly-once (``exactly_once_v2``, KIP-447: one transactional producer per
process), numbered as the tests crash them:

1. ``begin_transaction``, when the first output of a transaction is sent
   (:meth:`OpenTransaction.send`) or at commit;
2. produce every output as user code sends it, into the open transaction
   (as Kafka Streams' record collector does), and at commit one changelog
   record per buffered key of every store partition (a tombstone for a
   delete) to partition ``p`` of the store's topic (a store in time's with
   its timestamp as the record's CreateTime).  A commit of any size:
   when librdkafka's local queue is full (``BufferError``) the producer is
   polled (delivery reports free room) and the record produced again, until
   the deadline;
3. ``send_offsets_to_transaction`` with the consumer's *current* group
   metadata (generation / member epoch, member id): a zombie whose
   membership has moved on is refused here (fencing).  librdkafka may block
   here past its timeout, for good, while the group coordinator is away (a
   broker that restarted and is missing from the metadata for a while): the
   call runs on the transaction's helper thread (:class:`BoundedCaller`, one
   thread kept between commits) and a call that has not returned
   ``stuck_grace_s`` after its timeout fails the commit as
   :class:`ProducerFencedError` (``_TIMED_OUT``), so the producer, busy in
   that call for good, is replaced (and the helper thread left behind with it);
4. ``commit_transaction``: librdkafka first waits for every record of the
   transaction to be acknowledged (a record that failed fails the commit),
   then commits.  A call that times out (or fails retriably) stays in
   progress inside librdkafka, which then refuses every other transactional
   call (``abort_transaction``, ``begin_transaction``: ``_CONFLICT``) until
   ``commit_transaction`` is called again and ends.  So such a call is called
   again for its outcome, up to ``outcome_wait_s`` past the deadline (the transaction
   timeout: by then every record is acknowledged or failed, as librdkafka
   caps ``message.timeout.ms`` at ``transaction.timeout.ms``, and the
   coordinator has aborted a transaction still open): it commits (the commit
   succeeded) or fails (aborted as any failure).  One still without an outcome
   fails the commit as :class:`ProducerFencedError` (``_TIMED_OUT``): the
   producer is replaced, which aborts its transaction;
5. only now apply each store partition's buffer to RocksDB, in one
   WriteBatch with the applied offset (the offset of its last changelog
   record + 1, from that record's delivery report), the topic id and the
   wall-clock time.  A partition the transaction did not change is written
   only when its stamp is :data:`IDLE_STAMP_INTERVAL_MS` old (its data and
   applied offset are already RocksDB's; only the time would move).

Recovery, matching the steps: a crash (or an error) before 4 completes
leaves an open or aborted transaction: ``read_committed`` readers never see
it, the input offsets stay where they were, RocksDB was not touched, and the
new owner restores the committed changelog and reprocesses the inputs.  A
crash after 4 and before 5 leaves RocksDB behind the committed changelog: the
next restore replays the tail (incremental).  An error with
``txn_requires_abort`` aborts (:class:`TransactionAbortedError`); a fenced
producer or a fatal error is :class:`ProducerFencedError`.  Either way the
buffers are dropped and the caller rewinds the inputs.  A failure while
sending (:meth:`OpenTransaction.send` never raises into user code) is kept
and raised by the commit, which aborts.  Abandoning a transaction
(:meth:`OpenTransaction.abandon`: a ``process()`` exception, a lost
partition) aborts it: its outputs are never visible.

At-least-once: outputs are produced as they are sent (with no transaction:
a rewind produces them again, duplicates as at-least-once allows), the
changelog records at commit, then ``flush`` (every record acknowledged, each
checked by its delivery report), a synchronous ``Consumer.commit`` of the
offsets, then 5.  A crash between the flush and the offset commit leaves
records whose inputs are processed again: duplicates, as Kafka Streams'
at-least-once allows.

Thread-safety: runs on the processor's thread.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import attrs

from statestore.kafka.config import ProcessingGuarantee
from statestore.kafka.errors import KafkaClientError, ProducerFencedError, TransactionAbortedError
from statestore.kafka.restore import applied_meta
from statestore.kafka.store import TaskStore

__all__ = [
    "BoundedCaller",
    "CommitResult",
    "OpenTransaction",
    "OutputRecord",
    "StoreTopic",
    "TransactionalProducer",
    "commit_tasks",
]

logger = logging.getLogger(__name__)

_ABORT_RESUME_TIMEOUT_S = 10.0
"""How long a resumed abort (one that timed out before) may take before ``begin`` gives up."""

IDLE_STAMP_INTERVAL_MS = 1_000
"""How often a commit rewrites the applied time of a store partition it did not change (step
5): a stamp up to this old makes a restore judge the state stale this much early (against
``delete.retention.ms``, a day by default), and sparing the write spares a RocksDB write per
unchanged partition per commit."""

STUCK_CALL_GRACE_S = 10.0
"""``stuck_grace_s`` when a caller gives none: ``ProcessorConfig.stuck_call_grace_ms``'s
default."""

FaultHook = Callable[[str], None]
"""Called with a step name for fault injection in tests: ``"produced"`` after step 2 (and,
at-least-once, the flush), ``"committed"`` after step 4."""


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

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Cluster metadata (of ``topic``)."""


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


_Request = tuple[Callable[[], None], threading.Lock, list[BaseException]]


class BoundedCaller:
    """Runs a blocking call on a helper thread and waits for it a bounded time.

    One daemon thread serves the calls one at a time and is kept between them
    (starting a thread per commit cost ~80 us of wall time here); it ends when
    :meth:`close` is called or after ``idle_exit_s`` without a call.  A call
    still running when its caller stops waiting is left behind with its thread
    (which ends once the call returns); the next call gets a new thread.

    Invariants: ``_thread`` is the thread serving ``_requests`` (both ``None``
    when there is none); a request is put on ``_requests`` only under
    ``_lock``, and a thread leaves only under ``_lock`` with its queue empty.

    Thread-safety: :meth:`call` and :meth:`close` from one thread at a time (the
    processor's); ``_lock`` guards ``_thread`` and ``_requests`` against the
    helper thread's idle exit.
    """

    def __init__(self, name: str, *, idle_exit_s: float = 30.0) -> None:
        self._name = name
        self._idle_exit_s = idle_exit_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._requests: queue.SimpleQueue[_Request | None] | None = None

    def call(self, function: Callable[[], None], wait_s: float) -> bool:
        """Run ``function`` on the helper thread; ``False`` if it has not returned after
        ``wait_s`` (it is left running), else ``True``, or what it raised, raised here."""
        done = threading.Lock()
        done.acquire()  # released by the helper thread when ``function`` returns
        failure: list[BaseException] = []
        with self._lock:
            if self._requests is None:
                self._requests = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._serve, args=(self._requests,), name=self._name, daemon=True
                )
                self._thread.start()
            self._requests.put((function, done, failure))
        if not done.acquire(timeout=wait_s):
            self.close()  # its thread ends once the call returns; the next call gets a new one
            return False
        if failure:
            raise failure[0]
        return True

    def close(self) -> None:
        """End the helper thread once its call (if any) returns; nothing waits for it."""
        with self._lock:
            if self._requests is not None:
                self._requests.put(None)
            self._thread = self._requests = None

    def _serve(self, requests: queue.SimpleQueue[_Request | None]) -> None:
        while True:
            try:
                request = requests.get(timeout=self._idle_exit_s)
            except queue.Empty:
                with self._lock:
                    if not requests.empty():
                        continue  # a call came in meanwhile
                    if self._requests is requests:
                        self._thread = self._requests = None
                    return
            if request is None:
                return
            function, done, failure = request
            try:
                function()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                failure.append(exc)
            done.release()


def _error_of(exc: BaseException) -> Any:
    return exc.args[0] if exc.args and hasattr(exc.args[0], "code") else None


def _fenced(error: Any) -> bool:
    from confluent_kafka import KafkaError  # noqa: PLC0415

    fenced_codes = {KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
    fenced_codes.add(getattr(KafkaError, "PRODUCER_FENCED", KafkaError._FENCED))
    return bool(error.fatal()) or error.code() in fenced_codes


def _describe(error: Any) -> tuple[str, str]:
    return str(error.name()), str(error.str())


class OpenTransaction:
    """The producing side of the process's transaction: outputs go out as user code sends them.

    :meth:`send` is the hot path of ``ProcessorContext.send``: under exactly-once
    it begins the transaction if none is open and produces into it; under
    at-least-once it produces with a delivery report per record.  It never
    raises into user code: a failure (an output topic that does not exist, a
    queue that stayed full, a producer error) is kept in :attr:`failure`, the
    records after it are not produced, and :func:`commit_tasks` raises it and
    aborts.  :meth:`abandon` aborts the open transaction.

    Invariants: :attr:`open` only under exactly-once, between
    ``begin_transaction`` and the commit or abort that ends it; :attr:`sent`
    counts the outputs produced since the last commit or abandon.

    Thread-safety: the processor's thread only.
    """

    def __init__(
        self,
        producer: TransactionalProducer,
        *,
        guarantee: ProcessingGuarantee,
        known_topics: Iterable[str] = (),
        send_timeout_s: float = 60.0,
    ) -> None:
        self.producer = producer
        """The producer (replaced by the processor after fencing, with nothing open)."""
        self.exactly_once = guarantee == "exactly_once_v2"
        self.open = False
        """Whether a transaction is open (exactly-once)."""
        self.sent = 0
        """Outputs produced since the last commit or abandon."""
        self.failure: KafkaClientError | None = None
        """The first failure while sending; the commit raises it."""
        self.abort_unfinished = False
        """An abort timed out (a broker away): librdkafka finishes it only when it is called
        again, and refuses ``begin_transaction`` meanwhile (``_CONFLICT``)."""
        self.delivery_errors: list[Any] = []
        """Errors of delivery reports (at-least-once) since the last commit or abandon."""
        self._known = set(known_topics)
        self._send_timeout_s = send_timeout_s
        self._report: Callable[[Any, Any], None] | None = (
            None if self.exactly_once else self.delivery_report
        )
        self.caller = BoundedCaller("send-offsets-to-transaction")
        """The helper thread of step 3 (see the module docstring); :meth:`close` ends it."""

    def delivery_report(self, error: Any, _message: Any) -> None:
        """The delivery report of an at-least-once record: keep an error for the commit."""
        if error is not None:
            self.delivery_errors.append(error)

    def raise_failure(self) -> None:
        """Raise the failure kept while sending, if any."""
        if self.failure is not None:
            raise self.failure

    def begin(self) -> None:
        """``begin_transaction`` unless one is open (exactly-once); raises as the client does.

        An abort that timed out earlier is resumed first (and raises as the
        client does if it times out again: that commit fails, the next one
        resumes it again).
        """
        if self.exactly_once and not self.open:
            if self.abort_unfinished:
                self.producer.abort_transaction(_ABORT_RESUME_TIMEOUT_S)
                self.abort_unfinished = False
            self.producer.begin_transaction()
            self.open = True

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int = -1,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Produce one output now, into the open transaction (see the class docstring)."""
        if self.failure is not None or (topic not in self._known and not self._check_topic(topic)):
            return
        report = self._report
        try:
            if not self.open and self.exactly_once:
                self.begin()
            if headers is None:
                self.producer.produce(topic, value, key, partition, report)
            else:
                self.producer.produce(topic, value, key, partition, report, headers=headers)
        except BufferError:
            try:
                _produce_when_room(
                    self.producer,
                    time.monotonic() + self._send_timeout_s,
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    on_delivery=report,
                    headers=headers,
                )
            except KafkaClientError as exc:
                self.failure = exc
                return
        except Exception as exc:  # noqa: BLE001 - kept, typed, and raised by the commit
            self.failure = self._cause(_typed_failure("produce", exc, eos=self.exactly_once))
            return
        self.sent += 1

    def _cause(self, failure: KafkaClientError) -> KafkaClientError:
        """The fatal error behind ``produce``'s generic ``_FATAL`` (exactly-once).

        After a fatal error librdkafka's ``produce`` reports only ``_FATAL``,
        while the transaction API reports the cause (``_FENCED`` for a producer
        fenced by a newer instance, which the processor replaces; other fatal
        codes stop it).  ``abort_transaction`` asks for it; should it succeed,
        the transaction is aborted and the commit fails with ``failure``.
        """
        if not (self.exactly_once and self.open and failure.code == "_FATAL"):
            return failure
        try:
            self.producer.abort_transaction(1.0)
        except Exception as exc:  # noqa: BLE001 - the cause is what we asked for
            self.open = False
            return _typed_failure("produce", exc, eos=True)
        self.open = False
        return failure

    def _check_topic(self, topic: str) -> bool:
        """Whether ``topic`` exists (asked once per topic); if not, the transaction fails.

        Without this check librdkafka holds the records until the commit times
        out, and the failure reads ``_TIMED_OUT``.
        """
        try:
            metadata = self.producer.list_topics(topic, timeout=10)
        except Exception as exc:  # noqa: BLE001 - kept and raised by the commit
            self.failure = TransactionAbortedError("describe output topic", "_TRANSPORT", str(exc))
            return False
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            self.failure = TransactionAbortedError(
                "produce",
                "UNKNOWN_TOPIC_OR_PART",
                f"output topic {topic!r} does not exist"
                + ("" if found is None else f" ({found.error})"),
            )
            return False
        self._known.add(topic)
        return True

    def forget_topics(self) -> None:
        """Check every output topic again before its next send (after a failed commit: one
        deleted meanwhile is then reported as missing, not as the records' timeout)."""
        self._known.clear()

    def close(self) -> None:
        """End the helper thread (when the processor closes); a later commit starts another."""
        self.caller.close()

    def abandon(self, timeout_s: float) -> None:
        """Abort the open transaction (its outputs never become visible) and start afresh.

        An abort that fails (a fenced producer) is logged: the next
        ``begin_transaction`` fails the same way, and the commit reports it.
        """
        self._reset(abort_timeout_s=timeout_s if self.open else None)

    def _reset(self, *, abort_timeout_s: float | None) -> None:
        self.open = False
        self.sent = 0
        self.failure = None
        self.delivery_errors = []
        if abort_timeout_s is not None:
            self.abort_unfinished = not _abort_quietly(self.producer, abort_timeout_s)


def _typed_failure(operation: str, exc: BaseException, *, eos: bool) -> KafkaClientError:
    """``exc`` of a client call as :class:`ProducerFencedError` or :class:`TransactionAbortedError`."""
    if isinstance(exc, KafkaClientError):
        return exc
    error = _error_of(exc)
    if error is None:
        return TransactionAbortedError(operation, type(exc).__name__, str(exc))
    name, reason = _describe(error)
    if eos and _fenced(error):
        return ProducerFencedError(operation, name, reason)
    return TransactionAbortedError(operation, name, reason)


def commit_tasks(
    transaction: OpenTransaction,
    *,
    stores: Sequence[StoreTopic],
    offsets: list[Any],
    group_metadata: Callable[[], Any],
    commit_offsets: Callable[[list[Any]], None],
    timeout_s: float,
    outputs: Sequence[OutputRecord] = (),
    wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    fault_hook: FaultHook | None = None,
    stuck_grace_s: float | None = None,
    outcome_wait_s: float = 0.0,
) -> CommitResult:
    """Run the commit protocol of the module docstring over ``transaction``, ``stores`` and ``offsets``.

    ``outputs`` are sent first (most outputs were sent before, by user code,
    through ``transaction``).  ``offsets`` are confluent-kafka
    ``TopicPartition`` s (next offset to read); ``commit_offsets`` is the
    at-least-once offset commit.  On failure every store's buffer is dropped,
    the transaction aborted (unless fenced) and :class:`TransactionAbortedError`
    or :class:`ProducerFencedError` raised; the caller rewinds its inputs.
    """
    started = time.perf_counter()
    producer = transaction.producer
    eos = transaction.exactly_once
    last_offsets: dict[int, int] = {}
    errors = transaction.delivery_errors

    def delivered(index: int) -> Callable[[Any, Any], None]:
        def report(error: Any, message: Any) -> None:  # the last record of a partition
            if error is not None:
                errors.append(error)
            else:
                last_offsets[index] = message.offset()

        return report

    deadline = time.monotonic() + timeout_s

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    changelog_records = 0
    reporting = 0  # partitions whose last changelog record reports its offset
    try:
        for record in outputs:
            transaction.send(
                record.topic, record.key, record.value, record.partition, record.headers
            )
        transaction.raise_failure()
        transaction.begin()  # 1
        produce = producer.produce
        every = None if eos else transaction.delivery_report
        for index, entry in enumerate(stores):  # 2
            if not entry.store.participant.pending_count:
                continue
            # A store in time's records carry their timestamps (CreateTime); a key-value
            # store's are the buffered writes as they are, stamped by the producer.
            pairs, stamps = entry.store.changelog_records()
            topic = entry.topic
            partition = entry.store.partition
            final = len(pairs) - 1
            # Only the last record of a partition reports its offset (records of one
            # partition are acknowledged in order); under exactly-once a failed record
            # fails commit_transaction, so the others need no report.
            if stamps is None:
                for key, value in itertools.islice(pairs, final):
                    try:
                        produce(topic, value, key, partition, every)
                    except BufferError:
                        _produce_when_room(
                            producer,
                            deadline,
                            topic,
                            value=value,
                            key=key,
                            partition=partition,
                            on_delivery=every,
                        )
                key, value = pairs[final]
                try:
                    produce(topic, value, key, partition, delivered(index))
                except BufferError:
                    _produce_when_room(
                        producer,
                        deadline,
                        topic,
                        value=value,
                        key=key,
                        partition=partition,
                        on_delivery=delivered(index),
                    )
            else:
                for position, ((key, value), stamp) in enumerate(zip(pairs, stamps, strict=True)):
                    report = delivered(index) if position == final else every
                    try:
                        produce(topic, value, key, partition, report, timestamp=stamp)
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
            reporting += 1
        if not eos:
            _check_delivered(producer.flush(left()), errors, eos=False, timeout_s=timeout_s)
        if fault_hook is not None:
            fault_hook("produced")
        if eos:
            grace_s = STUCK_CALL_GRACE_S if stuck_grace_s is None else stuck_grace_s
            _send_offsets(  # 3
                transaction.caller, producer, offsets, group_metadata(), left(), grace_s
            )
            _commit_with_retries(producer, deadline, outcome_wait_s)  # 4 (waits for every ack)
            transaction.open = False
        elif offsets:
            commit_offsets(offsets)
    except BaseException as exc:
        _drop(stores)
        fenced = isinstance(exc, ProducerFencedError)
        failure: BaseException = exc
        if isinstance(exc, Exception) and not isinstance(exc, KafkaClientError):
            # Not typed yet: a KafkaException of a client call, or (confluent-kafka
            # surfaces a fatal producer error met inside a delivery callback as
            # SystemError) something else.  A producer that is really gone fails the
            # next begin_transaction as fenced.
            failure = _typed_failure("commit", exc, eos=eos)
            fenced = isinstance(failure, ProducerFencedError)
        transaction._reset(abort_timeout_s=None if fenced or not transaction.open else left())
        transaction.forget_topics()
        if failure is exc:
            raise
        raise failure from exc
    sent = transaction.sent
    transaction._reset(abort_timeout_s=None)
    if eos and len(last_offsets) < reporting:
        # The delivery reports of the committed records, served here if the commit did
        # not serve them already (every record is acknowledged: nothing waits).
        try:
            producer.flush(left())
        except Exception as exc:  # noqa: BLE001 - committed: a missing report costs a replay
            logger.warning("flush after commit_transaction: %s", exc)
    if fault_hook is not None:
        fault_hook("committed")
    now_ms = wall_clock_ms()
    for index, entry in enumerate(stores):  # 5
        store = entry.store
        last = last_offsets.get(index)
        if not store.participant.pending_count:
            stamped = store.stamped_ms
            if stamped is not None and now_ms - stamped < IDLE_STAMP_INTERVAL_MS:
                continue  # unchanged, and stamped a moment ago
        elif last is None:
            logger.warning(
                "%s-%s: no delivery report for the last changelog record of a committed"
                " transaction; the applied offset stays %s (a restore replays the tail)",
                entry.topic,
                store.partition,
                store.applied_offset,
            )
        applied = store.applied_offset if last is None else last + 1
        store.apply(applied, applied_meta(entry.topic_id, now_ms))
        store.stamped_ms = now_ms
    return CommitResult(
        changelog_records=changelog_records,
        outputs=sent,
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


def _send_offsets(  # noqa: PLR0917 - the step's inputs, in the order they are used
    caller: BoundedCaller,
    producer: TransactionalProducer,
    offsets: list[Any],
    group_metadata: Any,
    timeout_s: float,
    grace_s: float,
) -> None:
    """``send_offsets_to_transaction``, given up ``grace_s`` after ``timeout_s`` if it has not
    returned (step 3 of the module docstring): :class:`ProducerFencedError` (``_TIMED_OUT``).

    librdkafka does not check this call's timeout while it looks for the group
    coordinator, and a coordinator whose broker left the metadata (a broker
    restarting) is never looked for again: the call can block for ever.  It
    runs on ``caller``'s thread; a stuck one is left behind with its producer.
    """

    def call() -> None:
        producer.send_offsets_to_transaction(offsets, group_metadata, timeout_s)

    if not caller.call(call, timeout_s + grace_s):
        raise ProducerFencedError(
            "send_offsets_to_transaction",
            "_TIMED_OUT",
            f"no answer {timeout_s + grace_s:.1f}s after the call (its timeout {timeout_s:.1f}s"
            " was not honoured: the group coordinator is unreachable or gone from the"
            " metadata); the producer is stuck in that call and is replaced",
        )


def _commit_with_retries(
    producer: TransactionalProducer, deadline: float, outcome_wait_s: float
) -> None:
    """``commit_transaction``, retried while the error is retriable and time is left; past
    ``deadline`` a retriable error (librdkafka keeps the call in progress after any: a timeout,
    a broker away) is called again up to ``outcome_wait_s`` more for its outcome (step 4 of the
    module docstring), then given up as :class:`ProducerFencedError` (``_TIMED_OUT``)."""
    outcome_deadline = deadline + outcome_wait_s
    while True:
        try:
            producer.commit_transaction(max(0.1, deadline - time.monotonic()))
        except Exception as exc:
            error = _error_of(exc)
            if error is None or not error.retriable():
                raise
            now = time.monotonic()
            if now < deadline:
                logger.info("commit_transaction: %s, retrying", error.str())
                continue
            if outcome_wait_s <= 0:
                raise
            if now >= outcome_deadline:
                raise ProducerFencedError(
                    "commit_transaction",
                    "_TIMED_OUT",
                    f"{error.str()}; still without an outcome {outcome_wait_s:.0f} s past its"
                    " deadline: the producer is replaced, which aborts its transaction",
                ) from exc
            logger.warning(
                "commit_transaction failed retriably (%s): called again for its outcome,"
                " up to %.0f s",
                error.str(),
                outcome_deadline - now,
            )
            deadline = outcome_deadline
            continue
        return


def _drop(stores: Sequence[StoreTopic]) -> None:
    for entry in stores:
        entry.store.drop_pending()


def _abort_quietly(producer: TransactionalProducer, timeout_s: float) -> bool:
    """``abort_transaction``, a failure logged, not raised; ``False``: it timed out (or
    failed retriably) and must be called again to finish."""
    try:
        producer.abort_transaction(timeout_s)
    except Exception as exc:  # noqa: BLE001 - the commit's own error is what the caller sees
        logger.warning("abort_transaction failed after a failed commit: %s", exc)
        error = _error_of(exc)
        return error is None or not error.retriable()
    return True
