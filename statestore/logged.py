"""The logged layer of one store partition: buffered writes, changelog append, RocksDB apply.

Commit protocol (one partition; the changelog is the source of truth):

1. encode the pending writes as ONE record batch and append it to the
   changelog; under the default flush policy the append fsyncs before it
   returns, so from here the commit is acknowledged and durable;
2. apply the same writes and the new applied offset (the log end offset after
   the append) to RocksDB in one ``WriteBatch`` with the WAL off.  For commits
   of at least :data:`PIPELINE_MIN_RECORDS` records, step 1 runs on the
   partition's appender thread and step 2 starts as soon as the batch is in
   the log (the log end offset has moved past it) while its fsync runs:
   fsync releases the GIL, the RocksDB write holds it, so they overlap.
   ``commit()`` still returns only after the fsync.  RocksDB may thus hold a
   batch a moment before the changelog has made it durable; that is safe
   because RocksDB's WAL is off (nothing of it survives a crash unless
   flushed, and our flushes happen after the fsync), and should a background
   memtable flush persist it before a power cut took the batch, the stored
   applied offset is beyond the log end offset and the next open rebuilds;
3. every ``flush_interval_records`` committed records, flush RocksDB and
   raise the changelog's cleaning barrier to the flushed applied offset (only
   with ``incremental`` restore).

Recovery, matching the steps: a crash before 1 completes leaves the batch out
of the changelog (the loader truncates a torn tail): the commit never happened.
A crash after 1 and before 2 (or before RocksDB flushed 2) leaves RocksDB
behind the changelog: the next open replays from RocksDB's stored applied
offset (incremental) or from the log start offset (full), either way
reaching the committed state.  RocksDB never holds an applied offset ahead of
its data, and replaying puts and tombstones a second time is idempotent.

Invariants:

* ``_pending`` maps serialized key -> serialized value, ``None`` for a
  tombstone; it holds exactly the writes since the last commit or abort.
  It is one dict for the partition's lifetime (cleared, never replaced), so
  :attr:`LoggedPartition.put` can be its bound ``__setitem__``.
* RocksDB's applied offset equals the changelog's log end offset after every
  successful commit.
* The changelog's ``cleaning_barrier_offset`` (incremental restore only) is
  never above the applied offset RocksDB has flushed to disk.

Thread-safety: not thread-safe.  A store partition is used by one thread at
a time (as Kafka Streams' stores are used by their stream thread); the caller
serializes access.  Its appender thread (a one-worker executor, shut down at
close) runs only ``changelog.append`` for a commit that waits for it.  The background cleaner touches only the changelog, which
is thread-safe on its own.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from typing import Any, Final, NoReturn

from changelog.errors import (
    ChangelogError,
    InvalidRecordError,
    LogClosedError,
    RecordTooLargeError,
)
from changelog.log import Log
from statestore.engine import RocksDBEngine
from statestore.errors import CommitFailedError, StoreEngineError

__all__ = ["PIPELINE_MIN_RECORDS", "LoggedPartition"]

logger = logging.getLogger(__name__)

_MISSING: Final[Any] = object()

PIPELINE_MIN_RECORDS: Final = 64
"""Commits of at least this many records overlap the RocksDB write with the changelog fsync."""

_POLL_INTERVAL_S: Final = 0.00005


class LoggedPartition:
    """One store partition: a RocksDB engine, its changelog and the writes not yet committed.

    Thread-safety and invariants: see the module docstring.
    """

    def __init__(
        self,
        *,
        store: str,
        partition: int,
        changelog: Log,
        engine: RocksDBEngine,
        flush_interval_records: int,
        hold_cleaning_barrier: bool,
    ) -> None:
        """Wrap an engine already restored up to ``changelog.log_end_offset``."""
        self.store = store
        self.partition = partition
        self.changelog = changelog
        self.engine = engine
        self._label = f"[{store}-{partition}]"
        self._pending: dict[bytes, bytes | None] = {}
        self.put: Callable[[bytes, bytes | None], None] = self._pending.__setitem__
        """Buffer a put (``None``: a tombstone) until :meth:`commit` (the dict's own setter: hot path)."""
        self._engine_get = engine.raw_get
        self._flush_interval_records = flush_interval_records
        self._hold_cleaning_barrier = hold_cleaning_barrier
        self._unflushed_records = 0
        self._executor: futures.ThreadPoolExecutor | None = None
        self.failed = False

    # ------------------------------------------------------------------ reads

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` including uncommitted writes (read-your-writes)."""
        value = self._pending.get(key, _MISSING)
        if value is _MISSING:
            try:
                return self._engine_get(key)  # type: ignore[no-any-return]
            except Exception as exc:
                raise StoreEngineError(self.engine.path, "get", str(exc)) from exc
        return value  # type: ignore[no-any-return]

    def items(
        self, lo: bytes | None = None, hi: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key < hi`` in serialized key order (or reversed), pending included.

        The pending writes are captured when this is called; writes made
        while iterating are not seen by the iterator.  With nothing pending
        in range, RocksDB's iterator is returned as is (no per-entry Python).
        """
        stored = self.engine.items(lo, hi, reverse=reverse)
        if not self._pending:
            return stored
        overlay = sorted(
            (key, value)
            for key, value in self._pending.items()
            if (lo is None or key >= lo) and (hi is None or key < hi)
        )
        if not overlay:
            return stored
        if reverse:
            overlay.reverse()
        return _merge(stored, overlay, reverse=reverse)

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate (ignores uncommitted writes)."""
        return self.engine.approximate_num_entries()

    # ----------------------------------------------------------------- writes

    def put_many(self, pairs: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Buffer several puts."""
        self._pending.update(pairs)

    @property
    def pending_count(self) -> int:
        """Writes buffered since the last commit."""
        return len(self._pending)

    def abort(self) -> int:
        """Discard the pending writes; returns how many were dropped."""
        dropped = len(self._pending)
        self._pending.clear()
        return dropped

    def commit(self) -> int:
        """Append the pending writes as one batch and apply them to RocksDB.

        Returns the number of records committed (0: nothing was pending and
        nothing was written), once the batch is durable.  Raises
        :class:`CommitFailedError` (see its ``written`` field) or
        :class:`StoreEngineError` (the partition is then failed).
        """
        pending = self._pending
        if not pending:
            return 0
        records = list(pending.items())
        end = self.changelog.log_end_offset + len(records)
        if len(records) >= PIPELINE_MIN_RECORDS:
            applied = self._append_overlapped(records, end)
        else:
            self._append(records)
            applied = False
        pending.clear()
        if not applied:
            try:
                self.engine.write(records, end)
            except StoreEngineError:
                self.failed = True
                raise
        self._unflushed_records += len(records)
        if self._unflushed_records >= self._flush_interval_records:
            self.flush()
        return len(records)

    def _append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        try:
            self.changelog.append(records)
        except Exception as exc:  # noqa: BLE001 - mapped to CommitFailedError below
            self._raise_append_error(exc, rocksdb_ahead=False)

    def _raise_append_error(self, exc: BaseException, *, rocksdb_ahead: bool) -> NoReturn:
        if not isinstance(exc, Exception):
            raise exc  # a simulated crash (or KeyboardInterrupt) passes through untouched
        if not rocksdb_ahead and isinstance(
            exc, RecordTooLargeError | InvalidRecordError | LogClosedError
        ):
            raise CommitFailedError(
                self.store, self.partition, written=False, detail=str(exc)
            ) from exc
        self.failed = True
        if isinstance(exc, ChangelogError | OSError):
            raise CommitFailedError(
                self.store, self.partition, written=True, detail=str(exc)
            ) from exc
        raise exc

    def _append_overlapped(self, records: list[tuple[bytes, bytes | None]], end: int) -> bool:
        """Step 1 on the appender thread; step 2 here as soon as the batch is in the log.

        Returns whether RocksDB was written.  The changelog's fsync releases the
        GIL, so RocksDB's write (which holds it) runs while the fsync does.
        """
        log = self.changelog
        future = self._appender().submit(log.append, records)
        applied = False
        try:
            while not future.done():
                if log.log_end_offset >= end:  # written; the fsync is running
                    self.engine.write(records, end)
                    applied = True
                    break
                time.sleep(_POLL_INTERVAL_S)
        except BaseException:
            futures.wait([future])  # the append finishes (the changelog decides), then fail
            self.failed = True
            raise
        error = future.exception()  # waits for the fsync
        if error is not None:
            self._raise_append_error(error, rocksdb_ahead=applied)
        return applied

    def _appender(self) -> futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"{self.store}-{self.partition}-append"
            )
        return self._executor

    def flush(self) -> None:
        """Flush RocksDB and (incremental restore) raise the cleaning barrier to what is durable."""
        self.engine.flush()
        self._unflushed_records = 0
        if self._hold_cleaning_barrier:
            self.changelog.cleaning_barrier_offset = self.changelog.log_end_offset
            logger.debug(
                "%s flushed; cleaning barrier at %s", self._label, self.changelog.log_end_offset
            )

    def close(self, *, flush: bool = True) -> None:
        """Close the engine (flushing it unless the partition failed); pending writes are dropped."""
        if self._pending:
            logger.warning(
                "%s closing with %s uncommitted writes; they are discarded",
                self._label,
                len(self._pending),
            )
            self._pending.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.engine.close(flush=flush and not self.failed)


def _merge(
    stored: Iterator[tuple[bytes, bytes]],
    overlay: list[tuple[bytes, bytes | None]],
    *,
    reverse: bool,
) -> Iterator[tuple[bytes, bytes]]:
    """Merge sorted ``stored`` entries with sorted pending writes; pending wins, tombstones hide.

    ``heapq.merge`` is stable between its inputs, so for equal keys the pending
    write (listed first) comes out first and the stored entry right after it.
    """
    previous: bytes | None = None
    tagged_overlay = ((key, 0, value) for key, value in overlay)
    tagged_stored = ((key, 1, value) for key, value in stored)
    for key, _source, value in heapq.merge(
        tagged_overlay, tagged_stored, key=lambda entry: entry[0], reverse=reverse
    ):
        if key == previous:
            continue
        previous = key
        if value is not None:
            yield key, value
