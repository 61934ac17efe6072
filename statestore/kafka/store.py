"""A store partition in distributed mode: the local stack over a changelog topic partition.

The store user code gets (:meth:`ProcessorContext.store
<statestore.kafka.ProcessorContext.store>`) is the same
:class:`~statestore.KeyValueStore` as in local mode, over the same write
buffer (read-your-writes) and, with metrics, the same metered layer: the same
serdes, the same ``SerializationError``/``DeserializationError``, ``None``-key
and record-size checks, the same answers.  Only the change-logging layer
differs: :class:`TopicChangeLoggingStore`, whose changelog is partition ``p``
of the topic ``<application_id>-<store>-changelog`` and whose commits are
driven by the processor's Kafka transaction:

1. the processor produces the buffered writes (:attr:`TaskStore.pending`)
   to the changelog topic inside its transaction
   (:func:`statestore.kafka.commit.commit_tasks`);
2. only after ``commit_transaction`` returns, :meth:`TaskStore.apply` writes
   them to RocksDB together with the broker offset after the last one (and
   the topic id and applied time) in one ``WriteBatch``, then drops them from
   the buffer; an aborted transaction drops them instead
   (:meth:`TaskStore.drop_pending`).

So RocksDB never holds uncommitted data (the property Kafka Streams gets from
KIP-892 since 4.4).  What the store cannot do in this mode (its own
``commit()``, ``abort()``, ``transaction()``, a local ``changelog``) raises
:class:`~statestore.errors.UnsupportedStoreOperationError`, which says why.

:class:`TaskStore` is the runtime's handle on one store partition: it builds
the stack (:func:`statestore.stores.builder.wrap_partitions`) and commits it;
it is not user-facing.

Thread-safety: not thread-safe; the processor's thread uses a task's stores
(user code runs inside ``process`` on that thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Generic, NoReturn, TypeVar

import attrs

from changelog import AppendInfo, Log
from changelog.record.control import ControlRecordType
from statestore.errors import (
    InvalidStateStoreError,
    StateStoreError,
    StoreEngineError,
    UnsupportedStoreOperationError,
)
from statestore.metrics.metered import PartitionMetrics
from statestore.metrics.registry import MetricsRegistry
from statestore.serdes import MsgpackSerde, Serde, StringSerde
from statestore.stores.builder import wrap_partitions
from statestore.stores.engine import RocksDBEngine
from statestore.stores.lifecycle import StoreState, move
from statestore.stores.participant import Participant, Records
from statestore.stores.reader import StoreReader
from statestore.stores.spec import RECORD_OVERHEAD_BYTES
from statestore.stores.typed import KeyValueStore

__all__ = ["KafkaStoreSpec", "TaskStore", "TopicChangeLoggingStore"]

K = TypeVar("K")
V = TypeVar("V")

PRODUCER_MAX_MESSAGE_BYTES: Final = 1_000_000
"""The producer's default ``message.max.bytes``: the largest batch it sends."""

_RUNTIME_COMMITS: Final = (
    "its changelog is a topic partition on the broker, written only by the processor's "
    "Kafka transaction"
)


@attrs.frozen(kw_only=True)
class KafkaStoreSpec:
    """A store the processor keeps per partition: name, serdes, record limit.  Immutable."""

    name: str
    key_serde: Serde[Any] = attrs.field(factory=StringSerde)
    value_serde: Serde[Any] = attrs.field(factory=MsgpackSerde)
    max_record_bytes: int = attrs.field(
        default=PRODUCER_MAX_MESSAGE_BYTES - RECORD_OVERHEAD_BYTES,
        validator=attrs.validators.ge(1),
    )
    """The largest serialized key + value a put accepts: a larger record would fail the
    producer at commit (``message.max.bytes``) and abort the whole transaction, so it is
    refused at the put (:class:`~statestore.errors.RecordTooLargeForLogError`)."""


class TopicChangeLoggingStore:
    """One store partition whose changelog is a Kafka topic partition (see the module docstring).

    Implements :class:`~statestore.stores.bytes_store.ChangeLogging` under the
    write buffer.  Owns its :class:`~statestore.stores.engine.RocksDBEngine`,
    which the processor has already restored from the topic.

    Lifecycle (:mod:`statestore.stores.lifecycle`): constructed ``open`` over
    the restored engine; ``failed`` when writing a committed transaction to
    RocksDB failed (the task must be closed and restored again); ``closed``.

    Invariants: the engine's applied offset is the broker offset after the
    last committed changelog record of this partition that RocksDB holds;
    :attr:`applied_offset` equals it.
    """

    def __init__(self, *, store: str, partition: int, engine: RocksDBEngine) -> None:
        """Take ownership of ``engine`` (restored and open)."""
        self._store = store
        self._partition = partition
        self._owner = f"{store}-{partition}"
        self._engine = engine
        self._state = StoreState.OPEN
        self.applied_offset: int = engine.applied_offset() or 0
        """The next changelog offset after the last committed record of this partition."""
        self.read_error: Callable[[Exception, str], StateStoreError] = engine.read_error
        """The engine's typed error for a failed :attr:`lookup`."""
        self.get_many: Callable[[list[bytes]], list[bytes | None]] = engine.get_many
        """The committed values of keys, in order (the engine's multi-get)."""

    @property
    def store(self) -> str:
        """The store's name."""
        return self._store

    @property
    def partition(self) -> int:
        """The partition number (of the inputs and of the changelog topic)."""
        return self._partition

    @property
    def failed(self) -> bool:
        """Whether applying a committed transaction to RocksDB failed."""
        return self._state is StoreState.FAILED

    @property
    def engine(self) -> RocksDBEngine:
        """The RocksDB engine (owned: closed by :meth:`close`)."""
        return self._engine

    @property
    def changelog(self) -> Log:
        """Refused: the changelog is a topic on the broker, not a local :class:`~changelog.Log`."""
        raise self._refuse("read a local changelog")

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """No local changelog partitions: ``()``."""
        return ()

    @property
    def lookup(self) -> Callable[[bytes], bytes | None]:
        """The committed value of a key, rocksdict's errors unmapped (:attr:`RocksDBEngine.lookup`)."""
        lookup: Callable[[bytes], bytes | None] = self._engine.lookup
        return lookup

    def items(
        self, lo: bytes | None = None, hi: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Committed entries with ``lo <= key < hi`` in key order (or reversed)."""
        return self._engine.items(lo, hi, reverse=reverse)

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate."""
        return self._engine.approximate_num_entries()

    def _refuse(self, operation: str) -> UnsupportedStoreOperationError:
        return UnsupportedStoreOperationError(self._owner, operation, _RUNTIME_COMMITS)

    def write(self, records: Records) -> NoReturn:
        """Refused: only the processor's transaction commits (see :meth:`apply`)."""
        raise self._refuse("commit on its own")

    def append_transactional(
        self, records: Records, *, producer_id: int, producer_epoch: int
    ) -> NoReturn:
        """Refused: the broker is this changelog's transaction coordinator."""
        raise self._refuse("join a local transaction")

    def sync_to(self, offset: int) -> NoReturn:
        """Refused: the broker is this changelog's transaction coordinator."""
        raise self._refuse("join a local transaction")

    def append_marker(
        self,
        marker: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        defer_flush: bool,
    ) -> AppendInfo:
        """Refused: the broker writes this changelog's transaction markers."""
        raise self._refuse("join a local transaction")

    def apply(
        self, records: Records, applied: int, *, meta: Mapping[bytes, bytes] | None = None
    ) -> None:
        """Step 2 of the module docstring: committed ``records``, the broker offset ``applied``
        and ``meta`` into RocksDB in one ``WriteBatch``.

        A :class:`~statestore.errors.StoreEngineError` fails the partition.
        """
        if self._state is not StoreState.OPEN:
            raise self._refuse_state("commit")
        try:
            self._engine.write(records, applied, meta=meta)
        except StoreEngineError:
            self._state = move(self._owner, self._state, StoreState.FAILED, "commit")
            raise
        self.applied_offset = applied

    def _refuse_state(self, operation: str) -> StateStoreError:
        return InvalidStateStoreError(self._owner, self._state.value, operation)

    def flush(self) -> None:
        """Flush RocksDB and wait."""
        self._engine.flush()

    def close(self, *, flush: bool = True) -> None:
        """Close RocksDB (flushing it unless told not to or failed); idempotent."""
        if self._state is StoreState.CLOSED:
            return
        flush = flush and self._state is StoreState.OPEN
        self._state = move(self._owner, self._state, StoreState.CLOSED, "close")
        self._engine.close(flush=flush)

    def abandon(self) -> None:
        """Release RocksDB as a crash would (no flush); idempotent."""
        self.close(flush=False)


class TaskStore(Generic[K, V]):
    """The runtime's handle on one store partition of a task: the stack, and how to commit it.

    :attr:`store` is the user-facing :class:`~statestore.KeyValueStore`.  The
    runtime reads :attr:`pending` (what to produce), then :meth:`apply`
    (after ``commit_transaction``) or :meth:`drop_pending` (after an abort).
    Both take the buffer's writes as they are when called, so they apply or
    drop exactly what was produced only because nothing writes in between:
    user code runs inside ``process`` on the processor's thread, which also
    commits.  See the module docstring.  Not thread-safe.
    """

    def __init__(
        self,
        *,
        name: str,
        partition: int,
        engine: RocksDBEngine,
        key_serde: Serde[K],
        value_serde: Serde[V],
        max_record_bytes: int = PRODUCER_MAX_MESSAGE_BYTES - RECORD_OVERHEAD_BYTES,
        metrics: MetricsRegistry | None = None,
    ) -> None:
        """Build the stack over ``engine`` (restored from the topic; owned from here on).

        With ``metrics`` the partition gets the local mode's metered layer and
        partition metrics (operation counters at ``DEBUG``, commits counted at
        :meth:`apply`, the RocksDB gauges; no changelog gauges: the log is the
        broker's).
        """
        self._part = TopicChangeLoggingStore(store=name, partition=partition, engine=engine)
        meter = None
        if metrics is not None:
            meter = PartitionMetrics(metrics, store=name, partition=partition)
            meter.attach_engine(engine)
        self._store: KeyValueStore[K, V] = wrap_partitions(
            [(self._part, meter)],
            name=name,
            key_serde=key_serde,
            value_serde=value_serde,
            max_record_bytes=max_record_bytes,
            committer=None,
            reader=StoreReader(
                name=name,
                engines=[engine],
                key_serde=key_serde,
                value_serde=value_serde,
                visibility=threading.Lock(),  # one partition: each read is one snapshot anyway
            ),
        )
        (self._participant,) = self._store.participants

    @property
    def store(self) -> KeyValueStore[K, V]:
        """The store user code reads and writes (the same class as in local mode)."""
        return self._store

    @property
    def name(self) -> str:
        """The store's name."""
        return self._part.store

    @property
    def partition(self) -> int:
        """The partition this store instance holds."""
        return self._part.partition

    @property
    def engine(self) -> RocksDBEngine:
        """The RocksDB engine (the runtime restores through it)."""
        return self._part.engine

    @property
    def participant(self) -> Participant:
        """The partition as a member of the runtime's commits."""
        return self._participant

    @property
    def applied_offset(self) -> int:
        """The next changelog offset after the last committed record of this partition."""
        return self._part.applied_offset

    @property
    def pending(self) -> Mapping[bytes, bytes | None]:
        """A snapshot of the buffered writes (serialized; ``None``: a tombstone), in write order."""
        return self._participant.take()

    def drop_pending(self) -> int:
        """Forget the buffered writes (an aborted transaction); the count dropped."""
        records = self._participant.take()
        self._participant.forget(records)
        return len(records)

    def apply(self, applied_offset: int, meta: Mapping[bytes, bytes]) -> None:
        """Write the buffered writes, ``applied_offset`` and ``meta`` to RocksDB in one
        WriteBatch, then drop them from the buffer (after ``commit_transaction``)."""
        records = self._participant.take()
        self._participant.apply(records, applied_offset, meta=meta)
        self._participant.forget(records)

    def close(self, *, flush: bool = True) -> None:
        """Drop the buffer and close RocksDB (idempotent), releasing its lock for a new owner."""
        if self._participant.pending_count:
            self.drop_pending()  # a closed task's uncommitted writes are dropped, not warned about
        self._store.close(flush=flush)
