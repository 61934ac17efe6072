"""The change-logging layer of one store partition: changelog append, then RocksDB apply.

Kafka Streams' ``ChangeLoggingKeyValueBytesStore``: it owns the partition's
changelog :class:`~changelog.Log` and its :class:`~statestore.stores.engine.RocksDBEngine`
(closing both), restores the engine from the changelog once, and then turns
each committed group of writes into one changelog batch plus one RocksDB
``WriteBatch``.  Buffering the writes of a commit is the layer above's job
(:class:`~statestore.stores.buffer.WriteBuffer`).

Commit protocol (one partition; the changelog is the source of truth), run by
:meth:`ChangeLoggingStore.write`:

1. encode the writes as ONE record batch and append it to the
   changelog; under the default flush policy the append fsyncs before it
   returns, so from here the commit is acknowledged and durable;
2. apply the same writes and the new applied offset (the log end offset after
   the append) to RocksDB in one ``WriteBatch`` with the WAL off;
3. (``incremental`` restore only) every ``flush_interval_records`` committed
   records, raise the changelog's cleaning barrier to an applied offset that
   RocksDB has made durable, without waiting on the commit path:

   a. ask RocksDB to flush the data column family and return at once; the
      memtable it seals holds every write up to the applied offset ``X`` of
      the commit that asked;
   b. at a later commit, once RocksDB has no immutable memtable left (the
      sealed one is on disk), write ``X`` as the applied offset, flush the
      metadata column family (a few bytes, waited for), write the current
      applied offset back, and raise the cleaning barrier to ``X``.  Were
      the flush still running when the next interval is due, a waited flush
      of both column families (:meth:`ChangeLoggingStore.flush`) is done instead.

   Under ``full`` restore RocksDB is deleted at every open, so nothing that
   it persists is ever used: step 3 is skipped and RocksDB flushes its
   memtables only when they are full (and at close).

Steps 1 and 2 run one after the other on the caller's thread (overlapping
them on a helper thread was measured slower: docs/performance.md,
"Measurements behind the store layers").

Recovery, matching the steps: a crash before 1 completes leaves the batch out
of the changelog (the loader truncates a torn tail): the commit never happened.
A crash after 1 and before 2 (or before RocksDB flushed 2) leaves RocksDB
behind the changelog: the next open replays from RocksDB's stored applied
offset (incremental) or from the log start offset (full), either way
reaching the committed state.  RocksDB never holds an applied offset ahead of
its data (3b writes ``X`` only once the data up to ``X`` is on disk), and
replaying puts and tombstones a second time is idempotent.  Under a looser
changelog flush policy (no fsync per append) a power cut can take a tail of
the changelog that RocksDB has already persisted: the stored applied offset
is then beyond the log end offset and the next open rebuilds RocksDB from the
changelog, with a warning (:func:`statestore.stores.restore.plan_restore`).

Lifecycle (:mod:`statestore.stores.lifecycle`): ``created`` (constructed over
an open log and engine) -> ``restoring`` (:meth:`ChangeLoggingStore.restore`)
-> ``open`` -> ``closed``; ``failed`` when a commit or flush left the
changelog and RocksDB out of step (only :meth:`~ChangeLoggingStore.close` or
:meth:`~ChangeLoggingStore.abandon` are then allowed).  Reads are not
checked here (the typed store checks its own state on every call; a closed
engine raises on its own).

Invariants:

* RocksDB's applied offset equals the changelog's log end offset after every
  successful :meth:`ChangeLoggingStore.write` and after the restore.
* ``_flushing_offset`` is ``None`` or the applied offset of the commit that
  asked RocksDB for the data flush of step 3a that has not been seen to
  finish; always ``None`` under ``full`` restore.
* The changelog's ``cleaning_barrier_offset`` (incremental restore only) is
  never above the applied offset RocksDB has flushed to disk.
* From construction on, this layer owns the log and the engine: every way out
  (:meth:`~ChangeLoggingStore.close`, :meth:`~ChangeLoggingStore.abandon`)
  releases both.

Thread-safety: not thread-safe.  A store partition is used by one thread at
a time (as Kafka Streams' stores are used by their stream thread); the caller
serializes access.  The background cleaner touches only the changelog, which
is thread-safe on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import NoReturn

from changelog import (
    AppendInfo,
    ChangelogError,
    InvalidRecordError,
    Log,
    LogClosedError,
    RecordTooLargeError,
)
from changelog.record.control import ControlRecordType
from statestore.errors import (
    CommitFailedError,
    InvalidStateStoreError,
    StateStoreError,
    StoreEngineError,
    changelog_errors,
)
from statestore.stores.engine import RocksDBEngine
from statestore.stores.lifecycle import StoreState, move
from statestore.stores.restore import (
    ProgressHook,
    RestorePlan,
    RestoreResult,
    StateRestoreListener,
    restore_into,
)
from statestore.stores.time.layout import RecordFormat, changelog_records
from statestore.txn.participant import Records

__all__ = ["ChangeLoggingStore"]

logger = logging.getLogger(__name__)

_OPEN = StoreState.OPEN


class ChangeLoggingStore:
    """One store partition: its changelog and its RocksDB engine, written together.

    Thread-safety, lifecycle and invariants: see the module docstring.
    """

    def __init__(
        self,
        *,
        store: str,
        partition: int,
        changelog: Log,
        engine: RocksDBEngine,
        plan: RestorePlan,
        flush_interval_records: int,
        record_format: RecordFormat = "plain",
    ) -> None:
        """Take ownership of ``changelog`` and ``engine``; :meth:`restore` then carries out ``plan``.

        ``record_format`` (:mod:`statestore.stores.time.layout`) maps RocksDB
        entries to changelog records: ``plain`` one to one; ``timestamped``
        RocksDB values are ``timestamp | value`` and each changelog record
        carries ``value`` with ``timestamp`` as its CreateTime (a tombstone: the
        log's clock); ``versioned`` RocksDB keys are ``key | timestamp`` and
        each record carries ``key`` at ``timestamp``.  Restore maps back.
        """
        self._record_format = record_format
        self._timestamped = record_format != "plain"
        self.store = store
        self.partition = partition
        self._changelog = changelog
        self._engine = engine
        self._plan = plan
        self._owner = f"{store}-{partition}"
        self._label = f"[{self._owner}]"
        self._flush_interval_records = flush_interval_records
        self._hold_cleaning_barrier = plan.hold_cleaning_barrier
        self._unflushed_records = 0
        self._flushing_offset: int | None = None
        self._state = StoreState.CREATED
        self.get: Callable[[bytes], bytes | None] = engine.get
        """The committed value of a key (the engine's own ``get``: the hot read path)."""
        self.get_many: Callable[[list[bytes]], list[bytes | None]] = engine.get_many
        """The committed values of keys, in order (the engine's multi-get)."""
        self.read_error: Callable[[Exception, str], StateStoreError] = engine.read_error
        """The engine's typed error for a failed :attr:`lookup` (see :meth:`RocksDBEngine.read_error`)."""

    # ------------------------------------------------------------- lifecycle

    @property
    def state(self) -> StoreState:
        """The lifecycle state."""
        return self._state

    @property
    def failed(self) -> bool:
        """Whether a commit or flush left the changelog and RocksDB out of step."""
        return self._state is StoreState.FAILED

    @property
    def changelog(self) -> Log:
        """The changelog partition (owned: closed by :meth:`close`)."""
        return self._changelog

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """The changelog partition, as a one-element tuple."""
        return (self._changelog,)

    @property
    def engine(self) -> RocksDBEngine:
        """The RocksDB engine (owned: closed by :meth:`close`)."""
        return self._engine

    @property
    def lookup(self) -> Callable[[bytes], bytes | None]:
        """The committed value of a key with rocksdict's errors unmapped (:attr:`RocksDBEngine.lookup`).

        For the write buffer's hot ``get``, which maps failures with
        :attr:`read_error` and drops this before closing the partition.
        """
        lookup: Callable[[bytes], bytes | None] = self._engine.lookup
        return lookup

    def _move(self, new: StoreState, operation: str) -> None:
        self._state = move(self._owner, self._state, new, operation)

    def _require_open(self, operation: str) -> None:
        if self._state is not _OPEN:
            raise InvalidStateStoreError(self._owner, self._state.value, operation)

    def restore(
        self,
        *,
        batch_records: int,
        batch_bytes: int | None = None,
        listener: StateRestoreListener | None = None,
        progress: ProgressHook | None = None,
    ) -> RestoreResult:
        """Replay the changelog into the engine as planned; ``created -> restoring -> open``.

        On an error the partition is ``failed`` (close it) and the error propagates.
        """
        self._move(StoreState.RESTORING, "restore")
        try:
            result = restore_into(
                self._engine,
                self._changelog,
                self._plan,
                store=self.store,
                partition=self.partition,
                batch_records=batch_records,
                batch_bytes=batch_bytes,
                listener=listener,
                progress=progress,
                record_format=self._record_format,
            )
        except BaseException:
            self._move(StoreState.FAILED, "restore")
            raise
        self._move(_OPEN, "restore")
        return result

    # ------------------------------------------------------------------ reads

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

    # ----------------------------------------------------------------- writes

    def write(self, records: Records) -> int:
        """Steps 1-3: append ``records`` as one batch, then apply them to RocksDB.

        ``records`` has one entry per key (``None`` value: a tombstone) and is
        not empty.  Returns ``len(records)`` once the batch is durable.  Raises
        :class:`CommitFailedError` (``written=False``: nothing was written and
        the partition stays open; ``written=True``: the partition is failed) or
        :class:`StoreEngineError` (after the append; the partition is failed).
        """
        self._require_open("commit")
        try:
            if self._timestamped:
                pairs, stamps = changelog_records(
                    self._record_format, records, self._changelog.clock
                )
                info = self._changelog.append(pairs, timestamps=stamps)
            else:
                info = self._changelog.append(records)
        except Exception as exc:  # noqa: BLE001 - mapped to CommitFailedError below
            self._raise_append_error(exc)
        self.apply(records, info.last_offset + 1)
        return len(records)

    def append_transactional(
        self,
        records: Records,
        *,
        producer_id: int,
        producer_epoch: int,
    ) -> AppendInfo:
        """The coordinator's T1: ``records`` as one transactional batch; RocksDB is not touched.

        Not fsynced (the coordinator's T2, :meth:`sync_to`, makes every
        partition's batch durable at once, whatever the flush policy); errors
        as :meth:`write`'s append.
        """
        self._require_open("commit")
        try:
            if self._timestamped:
                pairs, stamps = changelog_records(
                    self._record_format, records, self._changelog.clock
                )
                return self._changelog.append_transactional(
                    pairs,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    defer_flush=True,
                    timestamps=stamps,
                )
            return self._changelog.append_transactional(
                records, producer_id=producer_id, producer_epoch=producer_epoch, defer_flush=True
            )
        except Exception as exc:  # noqa: BLE001 - mapped to CommitFailedError below
            self._raise_append_error(exc)

    def sync_to(self, offset: int) -> bool:
        """The coordinator's T2: fsync the changelog below ``offset`` (group commit).

        Returns whether this call ran the fsync.  Any failure fails the
        partition (:class:`CommitFailedError`, ``written=True``).
        """
        try:
            return self._changelog.sync_to(offset)
        except Exception as exc:
            self._move(StoreState.FAILED, "commit")
            if isinstance(exc, ChangelogError | OSError):
                raise CommitFailedError(
                    self.store, self.partition, written=True, detail=str(exc)
                ) from exc
            raise

    def append_marker(
        self,
        marker: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        defer_flush: bool,
    ) -> AppendInfo:
        """The coordinator's T4 (or an ABORT): a COMMIT/ABORT marker; any failure fails the partition."""
        self._require_open("commit")
        try:
            return self._changelog.append_marker(
                marker,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                defer_flush=defer_flush,
            )
        except Exception as exc:
            self._move(StoreState.FAILED, "commit")
            if isinstance(exc, ChangelogError | OSError):
                raise CommitFailedError(
                    self.store, self.partition, written=True, detail=str(exc)
                ) from exc
            raise

    def apply(
        self, records: Records, applied: int, *, meta: Mapping[bytes, bytes] | None = None
    ) -> None:
        """Steps 2-3: apply committed ``records`` to RocksDB with the applied offset ``applied``
        (and ``meta`` in the metadata column family, in the same WriteBatch).

        A :class:`StoreEngineError` fails the partition.
        """
        try:
            self._engine.write(records, applied, meta=meta)
        except StoreEngineError:
            self._move(StoreState.FAILED, "commit")
            raise
        if self._hold_cleaning_barrier:
            self._unflushed_records += len(records)
            if self._flushing_offset is not None:
                self._finish_flush(applied)
            if self._unflushed_records >= self._flush_interval_records:
                self._start_flush(applied)

    def _raise_append_error(self, exc: Exception) -> NoReturn:
        if isinstance(exc, RecordTooLargeError | InvalidRecordError | LogClosedError):
            raise CommitFailedError(
                self.store, self.partition, written=False, detail=str(exc)
            ) from exc
        self._move(StoreState.FAILED, "commit")
        if isinstance(exc, ChangelogError | OSError):
            raise CommitFailedError(
                self.store, self.partition, written=True, detail=str(exc)
            ) from exc
        raise exc

    def _start_flush(self, applied_offset: int) -> None:
        """Step 3a: ask RocksDB to flush the data up to ``applied_offset``, without waiting."""
        if self._flushing_offset is not None:  # the last one is still running: wait this time
            logger.debug("%s RocksDB flush still running; flushing and waiting", self._label)
            self.flush()
            return
        self._engine.request_data_flush()
        self._flushing_offset = applied_offset
        self._unflushed_records = 0

    def _finish_flush(self, applied_offset: int) -> None:
        """Step 3b: once the data flush of 3a is on disk, persist its offset, raise the barrier.

        ``applied_offset`` is the one RocksDB holds now (restored after the flush).
        """
        durable = self._flushing_offset
        if durable is None or self._engine.data_flush_pending():
            return
        self._engine.persist_applied_offset(durable, current=applied_offset)
        self._flushing_offset = None
        self._changelog.cleaning_barrier_offset = durable
        logger.debug("%s RocksDB flushed; cleaning barrier at %s", self._label, durable)

    def flush(self) -> None:
        """Flush RocksDB and wait; (incremental restore) raise the cleaning barrier to the end.

        A :class:`StoreEngineError` fails the partition.
        """
        self._require_open("flush")
        try:
            self._engine.flush()
        except StoreEngineError:
            self._move(StoreState.FAILED, "flush")
            raise
        self._unflushed_records = 0
        self._flushing_offset = None
        if self._hold_cleaning_barrier:
            end = self._changelog.log_end_offset
            self._changelog.cleaning_barrier_offset = end
            logger.debug("%s flushed; cleaning barrier at %s", self._label, end)

    def close(self, *, flush: bool = True) -> None:
        """Close the engine (flushing it unless told not to or failed), then the changelog cleanly.

        Idempotent.  Both are attempted; an error of either propagates (the
        changelog's as :class:`~statestore.errors.ChangelogFailedError`).
        """
        if self._state is StoreState.CLOSED:
            return
        flush = flush and self._state is _OPEN
        self._move(StoreState.CLOSED, "close")
        try:
            self._engine.close(flush=flush)
        finally:
            with changelog_errors(store=self.store, partition=self.partition, operation="close"):
                self._changelog.close()

    def abandon(self) -> None:
        """Release the engine and the changelog as a crash would (no flush, no checkpoints).

        For in-process crash simulation (:meth:`statestore.StateManager.crash`).
        Idempotent.
        """
        if self._state is StoreState.CLOSED:
            return
        self._move(StoreState.CLOSED, "abandon")
        try:
            self._engine.close(flush=False)
        finally:
            with changelog_errors(store=self.store, partition=self.partition, operation="abandon"):
                self._changelog.abandon()
