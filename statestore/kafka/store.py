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
KIP-892 since 4.4).

Stores in time (``KafkaStoreSpec.time``, :mod:`statestore.stores.time`) are
the same top layers as in local mode over the same lower layers: the engine is
segmented for window, session and versioned stores
(:meth:`KafkaStoreSpec.open_engine`), and the changelog records are mapped as
the local change-logging layer maps them
(:func:`statestore.stores.time.layout.changelog_records`): a timestamped
value's timestamp becomes the record's timestamp (CreateTime) and leaves the
value, a version's timestamp leaves the key; the restore puts them back
(:func:`statestore.stores.time.layout.restored_pairs`).  What the store cannot do in this mode (its own
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
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Generic, NoReturn, TypeVar

import attrs

from changelog import AppendInfo, Log
from changelog.record.control import ControlRecordType
from statestore.config import RocksDBConfig
from statestore.errors import (
    InvalidStateStoreError,
    StateStoreError,
    StoreEngineError,
    UnsupportedStoreOperationError,
)
from statestore.metrics.registry import MetricsRegistry
from statestore.serdes import BytesSerde, MsgpackSerde, Serde, StringSerde
from statestore.stores.builder import wrap_partitions
from statestore.stores.engine import RocksDBEngine
from statestore.stores.lifecycle import StoreState, move
from statestore.stores.metered import PartitionMetrics
from statestore.stores.reader import StoreReader
from statestore.stores.spec import RECORD_OVERHEAD_BYTES
from statestore.stores.time.base import TimeStoreBase
from statestore.stores.time.layout import RecordFormat, changelog_records
from statestore.stores.time.segments import SegmentedEngine
from statestore.stores.time.settings import TimeSettings, TtlSettings
from statestore.stores.time.top import wrap_time_store
from statestore.stores.typed import KeyValueStore
from statestore.txn.participant import Participant, Records

__all__ = ["ChangelogRecords", "KafkaStoreSpec", "TaskStore", "TopicChangeLoggingStore"]

K = TypeVar("K")
V = TypeVar("V")

PRODUCER_MAX_MESSAGE_BYTES: Final = 1_000_000
"""The producer's default ``message.max.bytes``: the largest batch it sends."""

DEFAULT_RECORD_CACHE_MAX_ENTRIES: Final = 10_000
"""Committed values a key-value store partition keeps in its record cache by default."""

ChangelogRecords = tuple[list[tuple[bytes, bytes | None]], list[int] | None]
"""A commit's changelog records of one store partition: ``(key, value)`` pairs and their
timestamps (``None``: the producer stamps them, as for key-value stores)."""

_RUNTIME_COMMITS: Final = (
    "its changelog is a topic partition on the broker, written only by the processor's "
    "Kafka transaction"
)


@attrs.frozen(kw_only=True)
class KafkaStoreSpec:
    """A store the processor keeps per partition: name, serdes, record limit, type.  Immutable.

    ``time=None`` is a key-value store; :meth:`timestamped`, :meth:`window`,
    :meth:`session` and :meth:`versioned` build the specs of the stores in time
    (the same arguments as the local manager's methods).
    """

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
    time: TimeSettings | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(TimeSettings)),
    )
    """The store in time this is (``None``: a key-value store).  A TTL store
    (:meth:`ttl`) expires as in local mode, except that the broker's cleaner knows no TTL:
    expired values leave the topic by the sweep's tombstones, and a restore or a standby
    applies a value that has expired as a delete (:meth:`expiry_cutoff_ms`)."""
    record_cache_max_entries: int = attrs.field(
        default=DEFAULT_RECORD_CACHE_MAX_ENTRIES, validator=attrs.validators.ge(0)
    )
    """How many committed values each partition of a key-value store keeps in memory
    (:class:`~statestore.stores.caching.CachingStore`, Kafka Streams' record cache): a get
    of a cached key does not read RocksDB.  ``0``: no cache.  Stores in time have none."""

    @classmethod
    def timestamped(
        cls,
        name: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KafkaStoreSpec:
        """A timestamped key-value store (:class:`~statestore.TimestampedKeyValueStore`)."""
        return cls._of(name, TimeSettings.timestamped_key_value(), key_serde, value_serde)

    @classmethod
    def ttl(
        cls,
        name: str,
        *,
        ttl: TtlSettings,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KafkaStoreSpec:
        """A key-value store whose values expire (:class:`~statestore.TtlKeyValueStore`).

        As in local mode (docs/time.md, "TTL"), except that the broker's cleaner knows
        no TTL: expired values leave the topic by the sweep's tombstones.
        """
        return cls._of(name, TimeSettings.timestamped_key_value(ttl=ttl), key_serde, value_serde)

    @classmethod
    def window(
        cls,
        name: str,
        *,
        window_size_ms: int,
        retention_ms: int,
        segment_interval_ms: int | None = None,
        retain_duplicates: bool = False,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KafkaStoreSpec:
        """A window store (:class:`~statestore.WindowStore`)."""
        settings = TimeSettings.window(
            window_size_ms=window_size_ms,
            retention_ms=retention_ms,
            segment_interval_ms=segment_interval_ms,
            retain_duplicates=retain_duplicates,
        )
        return cls._of(name, settings, key_serde, value_serde)

    @classmethod
    def session(
        cls,
        name: str,
        *,
        retention_ms: int,
        segment_interval_ms: int | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KafkaStoreSpec:
        """A session store (:class:`~statestore.SessionStore`)."""
        settings = TimeSettings.session(
            retention_ms=retention_ms, segment_interval_ms=segment_interval_ms
        )
        return cls._of(name, settings, key_serde, value_serde)

    @classmethod
    def versioned(
        cls,
        name: str,
        *,
        history_retention_ms: int,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KafkaStoreSpec:
        """A versioned key-value store (:class:`~statestore.VersionedKeyValueStore`)."""
        settings = TimeSettings.versioned_key_value(history_retention_ms=history_retention_ms)
        return cls._of(name, settings, key_serde, value_serde)

    @classmethod
    def _of(
        cls,
        name: str,
        time: TimeSettings,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
    ) -> KafkaStoreSpec:
        return cls(
            name=name,
            key_serde=StringSerde() if key_serde is None else key_serde,
            value_serde=MsgpackSerde() if value_serde is None else value_serde,
            time=time,
        )

    @property
    def record_format(self) -> RecordFormat:
        """How RocksDB entries map to changelog records (:mod:`statestore.stores.time.layout`)."""
        return "plain" if self.time is None else self.time.record_format

    def expiry_cutoff_ms(self, now_ms: int) -> int | None:
        """A store with a TTL: the restore's expiry cutoff at ``now_ms`` (else ``None``)."""
        if self.time is None or self.time.ttl is None:
            return None
        return now_ms - self.time.ttl.ttl_ms

    def open_engine(self, path: Path, *, config: RocksDBConfig, label: str) -> RocksDBEngine:
        """Open (creating if missing) this store's RocksDB partition at ``path``.

        Segmented by time for window, session and versioned stores.
        """
        if self.time is None or not self.time.segmented:
            return RocksDBEngine.open(path, config=config, cache=None, label=label)
        return SegmentedEngine.open_segmented(
            path, config=config, cache=None, settings=self.time, label=label
        )


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
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Committed entries with ``lo <= key < hi`` in key order (or reversed); with
        ``key_size_bytes``, only the keys of exactly that length."""
        return self._engine.items(lo, hi, reverse=reverse, key_size_bytes=key_size_bytes)

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

    :attr:`store` is the user-facing store (:class:`~statestore.KeyValueStore`,
    or a store in time).  The runtime reads :meth:`changelog_records` (what to
    produce), then :meth:`apply` (after ``commit_transaction``) or
    :meth:`drop_pending` (after an abort).  All take the buffer's writes as
    they are when called, so they apply or drop exactly what was produced only
    because nothing writes in between: user code runs inside ``process`` on the
    processor's thread, which also commits.  See the module docstring.  Not
    thread-safe.
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
        time_settings: TimeSettings | None = None,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        record_cache_max_entries: int = DEFAULT_RECORD_CACHE_MAX_ENTRIES,
    ) -> None:
        """Build the stack over ``engine`` (restored from the topic; owned from here on).

        With ``metrics`` the partition gets the local mode's metered layer and
        partition metrics (operation counters at ``DEBUG``, commits counted at
        :meth:`apply`, the RocksDB gauges; no changelog gauges: the log is the
        broker's).  With ``time_settings`` (and ``engine`` opened by
        :meth:`KafkaStoreSpec.open_engine`) the store is that store in time,
        whose default timestamps and tombstone timestamps come from ``now_ms``.
        A key-value store (no ``time_settings``) keeps up to ``record_cache_max_entries``
        committed values in a record cache (``0``: none; see
        :attr:`KafkaStoreSpec.record_cache_max_entries`).
        """
        self._part = TopicChangeLoggingStore(store=name, partition=partition, engine=engine)
        self._record_format: RecordFormat = (
            "plain" if time_settings is None else time_settings.record_format
        )
        self._now_ms = now_ms
        meter = None
        if metrics is not None:
            meter = PartitionMetrics(metrics, store=name, partition=partition)
            meter.attach_engine(engine)
        plain = time_settings is None  # a store in time serializes in its own top layer
        inner_key: Serde[Any] = key_serde if plain else BytesSerde()
        inner_value: Serde[Any] = value_serde if plain else BytesSerde()
        self._inner: KeyValueStore[Any, Any] = wrap_partitions(
            [(self._part, meter)],
            name=name,
            key_serde=inner_key,
            value_serde=inner_value,
            max_record_bytes=max_record_bytes,
            committer=None,
            cache_max_entries=record_cache_max_entries if plain else 0,
            reader=StoreReader(
                name=name,
                engines=[engine],
                key_serde=inner_key,
                value_serde=inner_value,
                visibility=threading.Lock(),  # one partition: each read is one snapshot anyway
            ),
        )
        self._top: TimeStoreBase[K, V] | None = (
            None
            if time_settings is None
            else wrap_time_store(
                self._inner,
                time_settings,
                key_serde=key_serde,
                value_serde=value_serde,
                now_ms=now_ms,
            )
        )
        (self._participant,) = self._inner.participants
        self.stamped_ms: int | None = None
        """The wall-clock time the last commit wrote as this partition's applied time
        (``None``: none since this stack was built); see
        :data:`statestore.kafka.commit.IDLE_STAMP_INTERVAL_MS`."""

    @property
    def store(self) -> Any:
        """The store user code reads and writes (the same class as in local mode).

        A :class:`~statestore.KeyValueStore`, or for a store in time its
        :class:`~statestore.WindowStore`, :class:`~statestore.SessionStore`,
        :class:`~statestore.TimestampedKeyValueStore` or
        :class:`~statestore.VersionedKeyValueStore`.
        """
        return self._inner if self._top is None else self._top

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
        """A snapshot of the buffered writes as RocksDB takes them (serialized; ``None``: a
        tombstone), in write order."""
        return self._participant.take()

    def changelog_records(self) -> ChangelogRecords:
        """The buffered writes as changelog records (:data:`ChangelogRecords`), in write order.

        A key-value store's are :attr:`pending` as they are; a store in time's
        carry each record's timestamp (a tombstone's: ``now_ms``), mapped as
        the local change-logging layer maps them.
        """
        records = self._participant.take()
        if self._record_format == "plain":
            return list(records.items()), None
        return changelog_records(self._record_format, records, self._now_ms)

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
        self._inner.close(flush=flush)
