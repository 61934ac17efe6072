"""The logged layer of one store partition: buffered writes, changelog append, RocksDB apply.

Commit protocol (one partition; the changelog is the source of truth):

1. encode the pending writes as ONE record batch and append it to the
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
      of both column families (:meth:`LoggedPartition.flush`) is done instead.

   Under ``full`` restore RocksDB is deleted at every open, so nothing that
   it persists is ever used: step 3 is skipped and RocksDB flushes its
   memtables only when they are full (and at close).

Steps 1 and 2 run one after the other on the caller's thread.  (Until issue
8 step 1 ran on a helper thread so that its fsync overlapped step 2; on this
2-core machine that measured 5-10% *slower* per commit, median of 200
interleaved commits each way, so it was removed.)

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
changelog, with a warning (:func:`statestore.restore.plan_restore`).

Invariants:

* ``_pending`` maps serialized key -> serialized value, ``None`` for a
  tombstone; it holds exactly the writes since the last commit or abort.
  It is one dict for the partition's lifetime (cleared, never replaced), so
  :attr:`LoggedPartition.put` can be its bound ``__setitem__``.
* RocksDB's applied offset equals the changelog's log end offset after every
  successful commit.
* ``_flushing_offset`` is ``None`` or the applied offset of the commit that
  asked RocksDB for the data flush of step 3a that has not been seen to
  finish; always ``None`` under ``full`` restore.
* The changelog's ``cleaning_barrier_offset`` (incremental restore only) is
  never above the applied offset RocksDB has flushed to disk.

Thread-safety: not thread-safe.  A store partition is used by one thread at
a time (as Kafka Streams' stores are used by their stream thread); the caller
serializes access.  The background cleaner touches only the changelog, which
is thread-safe on its own.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterator, Sequence
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

__all__ = ["LoggedPartition"]

logger = logging.getLogger(__name__)

_MISSING: Final[Any] = object()


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
        self._flushing_offset: int | None = None
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
        try:
            info = self.changelog.append(records)
        except Exception as exc:  # noqa: BLE001 - mapped to CommitFailedError below
            self._raise_append_error(exc)
        pending.clear()
        count = len(records)
        applied = info.last_offset + 1
        try:
            self.engine.write(records, applied)
        except StoreEngineError:
            self.failed = True
            raise
        if self._hold_cleaning_barrier:
            self._unflushed_records += count
            if self._flushing_offset is not None:
                self._finish_flush(applied)
            if self._unflushed_records >= self._flush_interval_records:
                self._start_flush(applied)
        return count

    def _raise_append_error(self, exc: Exception) -> NoReturn:
        if isinstance(exc, RecordTooLargeError | InvalidRecordError | LogClosedError):
            raise CommitFailedError(
                self.store, self.partition, written=False, detail=str(exc)
            ) from exc
        self.failed = True
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
        self.engine.request_data_flush()
        self._flushing_offset = applied_offset
        self._unflushed_records = 0

    def _finish_flush(self, applied_offset: int) -> None:
        """Step 3b: once the data flush of 3a is on disk, persist its offset, raise the barrier.

        ``applied_offset`` is the one RocksDB holds now (restored after the flush).
        """
        durable = self._flushing_offset
        if durable is None or self.engine.data_flush_pending():
            return
        self.engine.persist_applied_offset(durable, current=applied_offset)
        self._flushing_offset = None
        self.changelog.cleaning_barrier_offset = durable
        logger.debug("%s RocksDB flushed; cleaning barrier at %s", self._label, durable)

    def flush(self) -> None:
        """Flush RocksDB and wait; (incremental restore) raise the cleaning barrier to the end."""
        self.engine.flush()
        self._unflushed_records = 0
        self._flushing_offset = None
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
