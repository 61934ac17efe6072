"""The write buffer of one store partition: the writes of the current commit, readable before it.

Kafka Streams keeps a record cache above the change-logging store; here the
buffer holds exactly the writes since the last commit (last write per key
wins, ``None`` is a tombstone) and :meth:`WriteBuffer.commit` hands them to
the change-logging layer below as one group, which makes them one changelog
batch.  Reads see the buffered writes (read-your-writes): :meth:`WriteBuffer.get`
looks in the buffer first, :meth:`WriteBuffer.items` merges it into the
committed entries.

Which writes stay buffered when a commit fails: all of them when the
changelog took nothing (:class:`~statestore.errors.CommitFailedError` with
``written=False``, e.g. a batch over ``max_message_bytes``: abort or commit
less); none once the changelog may have taken the batch (``written=True``,
or :class:`~statestore.errors.StoreEngineError` from RocksDB after the
append): the partition below is then failed and the store must be reopened.

Invariants:

* ``_pending`` maps serialized key -> serialized value, ``None`` for a
  tombstone; it holds the writes since the last successful commit or abort
  (plus, while a commit runs on another thread, those made meanwhile).
  :attr:`WriteBuffer.put` and the compiled ``_fast`` write into it; nothing
  outside this class holds it.
* ``_lookup`` is the partition's RocksDB ``get`` while the buffer is open and
  ``None`` from :meth:`WriteBuffer.close` / :meth:`WriteBuffer.abandon` on (a
  get then fails and is mapped to :class:`~statestore.errors.InvalidStateStoreError`);
  ``_fast`` drops its own reference at the same moment.

The fast path: :meth:`WriteBuffer.fast_path` offers the buffer's put and get
compiled (``statestore/stores/_put.c``: ``Pending``), so that the typed store
above can call them without a Python frame of this layer.  The builder
grants it to the typed store when nothing sits between the two that must
see every call (:mod:`statestore.stores.builder`); nothing else reaches into
the buffer.

Thread-safety: writes and reads come from the typed store's single user thread;
a commit (the coordinator, holding :attr:`WriteBuffer.commit_lock`) may run on
another thread at the same time (the manager commits every store), and then
never drops a write buffered while it runs (see :meth:`WriteBuffer.forget`).
The buffer is the partition's :class:`~statestore.txn.participant.Participant`
in commits: :meth:`~WriteBuffer.take` snapshots the pending writes, which stay
readable until the commit has applied them and :meth:`~WriteBuffer.forget`
drops them.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from changelog import Log
from changelog.native import compiled
from statestore.errors import CommitFailedError, StoreEngineError
from statestore.stores.bytes_store import ChangeLogging
from statestore.txn.commit_lock import CommitLock
from statestore.txn.participant import ForwardedIdentity, ForwardedSteps, Participant, Records

if TYPE_CHECKING:
    from statestore.stores._put import Pending

__all__ = ["WriteBuffer"]

logger = logging.getLogger(__name__)

_MISSING: Final[Any] = object()


def _load_forget() -> (
    Callable[[dict[bytes, bytes | None], list[Any] | dict[Any, Any]], None] | None
):
    """The compiled forget (``statestore/stores/_put.c``), or ``None`` if it was not built."""
    return compiled("statestore.stores._put", "forget")  # type: ignore[no-any-return]


_FORGET: Final = _load_forget()


def _load_pending() -> Callable[..., Pending] | None:
    """The buffer's compiled put and get (``statestore/stores/_put.c``), or ``None`` if not built."""
    return compiled("statestore.stores._put", "Pending")  # type: ignore[no-any-return]


_PENDING: Final = _load_pending()


class WriteBuffer(ForwardedSteps, ForwardedIdentity):
    """The pending writes of one partition over its change-logging layer (which it owns): a
    :class:`~statestore.stores.bytes_store.ChangeLogging`, local or distributed.

    Implements :class:`~statestore.stores.bytes_store.BytesStore`.
    Thread-safety and invariants: see the module docstring.
    """

    def __init__(self, inner: ChangeLogging) -> None:
        """Buffer writes for ``inner``, a restored partition; closing the buffer closes it."""
        self._inner: ChangeLogging = inner
        self._lookup: Callable[[bytes], bytes | None] | None = inner.lookup
        """RocksDB's own get (errors unmapped; ``None`` once closed)."""
        self._read_error = inner.read_error
        self._inner_get_many = inner.get_many
        self._pending: dict[bytes, bytes | None] = {}
        self.commit_lock = CommitLock()
        self._take = 0
        """The number of the last :meth:`take` (its commit is recorded on the lock when it succeeds)."""
        """Held by whoever commits this partition (the coordinator): one commit at a time."""
        self._fast: Pending | None = (
            None if _PENDING is None else _PENDING(self._pending, inner.lookup)
        )
        """The compiled put and get over ``_pending`` and RocksDB's get (``None``: not built)."""
        self.put: Callable[[bytes, bytes | None], None] = (
            self._pending.__setitem__ if self._fast is None else self._fast
        )
        """Buffer a put (``None``: a tombstone) until :meth:`commit` (no Python frame: hot path)."""

    @property
    def inner(self) -> ChangeLogging:
        """The change-logging layer below (for tools and tests; nothing above inspects it)."""
        return self._inner

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """The partition's local changelog, as a one-element tuple (empty: a broker's topic)."""
        return self._inner.changelogs

    # ------------------------------------------------------------------ reads

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` including uncommitted writes (read-your-writes).

        The hot read path calls RocksDB's ``get`` from this frame
        (:attr:`ChangeLoggingStore.lookup`) and maps a failure with the engine's
        :meth:`~statestore.stores.engine.RocksDBEngine.read_error`: the same typed
        errors as the engine's own ``get``, one Python frame less.
        """
        value = self._pending.get(key, _MISSING)
        if value is _MISSING:
            try:
                return self._lookup(key)  # type: ignore[misc]  # None once closed: mapped below
            except Exception as exc:
                raise self._read_error(exc, "get") from exc
        return value  # type: ignore[no-any-return]

    def fast_path(self) -> Pending | None:
        """This buffer's put and get compiled, for the layer above to call directly; ``None``
        when the compiled module is not built.

        Calling it is :attr:`put`; the typed store's compiled put and get
        (``_put.c``: ``Putter``, ``Getter``) do its put and :meth:`get` without
        a call.  On anything but a plain hit or miss the typed store's Python
        get comes to :meth:`get`.  After :meth:`close` it no longer reaches
        RocksDB.  Offered to the builder, which grants it
        (:mod:`statestore.stores.builder`).
        """
        return self._fast

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The values of ``keys`` in order, uncommitted writes included (read-your-writes).

        One RocksDB multi-get for all keys; a pending write (or tombstone) of a
        key replaces what RocksDB returned for it.
        """
        values = self._inner_get_many(keys)
        pending = self._pending
        if pending:
            get = pending.get
            values = [
                value if (buffered := get(key, _MISSING)) is _MISSING else buffered
                for key, value in zip(keys, values, strict=True)
            ]
        return values

    def items(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key < hi`` in serialized key order (or reversed), pending included.

        With ``key_size_bytes``, only the keys of exactly that length.  The
        pending writes are captured when this is called; writes made
        while iterating are not seen by the iterator.  With nothing pending
        in range, RocksDB's iterator is returned as is (no per-entry Python).
        """
        stored = self._inner.items(lo, hi, reverse=reverse, key_size_bytes=key_size_bytes)
        if not self._pending:
            return stored
        overlay = sorted(
            (key, value)
            for key, value in self._pending.items()
            if (lo is None or key >= lo)
            and (hi is None or key < hi)
            and (key_size_bytes is None or len(key) == key_size_bytes)
        )
        if not overlay:
            return stored
        if reverse:
            overlay.reverse()
        return _merge(stored, overlay, reverse=reverse)

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate (ignores uncommitted writes)."""
        return self._inner.approximate_num_entries()

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
        """Commit this partition alone (one batch) under :attr:`commit_lock`; returns the count.

        For tests and tools that hold a bare buffer; stores commit through the
        coordinator (:meth:`commit_alone`).
        """
        with self.commit_lock:
            records = self.take()
            return self.write(records) if records else 0

    def commit_alone(self) -> int:
        """The one-partition commit with group commit (the coordinator's path for one partition).

        Refuses a failed partition (nothing of it is acknowledged any more);
        returns 0 with nothing pending.  Otherwise waits for
        :attr:`commit_lock` in arrival order, or returns 0 at once when a
        commit that took this thread's writes succeeded meanwhile
        (:meth:`CommitLock.acquire_take`: they are durable); then
        :meth:`take` and :meth:`write`, one batch, one fsync.  One frame for
        what the coordinator would otherwise ask through five calls.
        """
        if self._inner.failed:  # an earlier commit failed after its append
            raise CommitFailedError(
                self._inner.store,
                self._inner.partition,
                written=True,
                detail="the partition failed",
            )
        if not self._pending:
            return 0
        lock = self.commit_lock
        take = lock.acquire_take()  # numbered before the copy: see CommitLock
        if not take:
            return 0  # a commit that took these writes has succeeded: durable, nothing to do
        try:
            self._take = take
            records = self._pending.copy()
            if not records:
                lock.release()
                return 0
            count = self._write(records)
        except BaseException:
            lock.release()
            raise
        lock.release_committed(take)  # what write() records, and the hand-over, in one step
        return count

    # ------------------------------------------------- the Participant protocol

    @property
    def participants(self) -> tuple[Participant, ...]:
        """This partition, as the one member of its store's commits."""
        return (self,)

    def take(self) -> dict[bytes, bytes | None]:
        """A snapshot of the pending writes; they stay buffered (and readable) until :meth:`forget`.

        A copy of the dict (one C call: atomic under the GIL), no tuple per
        record (docs/performance.md, "Measurements behind the store layers").
        """
        self._take = self.commit_lock.next_take()  # numbered before the copy: see CommitLock
        return self._pending.copy()

    def write(self, records: Records) -> int:
        """Commit ``records`` (a :meth:`take`) as one ordinary batch, then forget them.

        On an error, which writes stay buffered is said in the module docstring.
        """
        count = self._write(records)
        self.commit_lock.committed(self._take)
        return count

    def _write(self, records: Records) -> int:
        """:meth:`write` without recording the take as committed (the caller does)."""
        try:
            count = self._inner.write(records)
        except CommitFailedError as exc:
            if exc.written:
                self.forget(records)
            raise
        except StoreEngineError:
            self.forget(records)
            raise
        self.forget(records)
        return count

    def apply(
        self, records: Records, applied_offset: int, *, meta: Mapping[bytes, bytes] | None = None
    ) -> None:
        """T5 of a transaction: ``records`` into RocksDB (see :meth:`ChangeLoggingStore.apply`)."""
        self._inner.apply(records, applied_offset, meta=meta)
        self.commit_lock.committed(self._take)

    def forget(self, records: Records | Sequence[tuple[bytes, bytes | None]]) -> None:
        """Drop from the buffer exactly the writes ``records`` committed, nothing newer.

        The append's fsync releases the GIL, so another thread may buffer
        writes while it runs (the manager commits every store; a store's own
        thread keeps writing).  Clearing the whole dict would drop those
        writes unacknowledged.  Each committed key is popped and, if what was popped is
        not the committed value, put back with ``setdefault`` (which keeps a
        write made in between): a write is never lost; for the few bytecodes
        between the two calls a reader may see the committed value instead.  The
        compiled forget (``_put.c``, for a list of records) applies the same rule
        in one step under the GIL (a rewritten key keeps its place), so there is
        not even that window.
        """
        if _FORGET is not None and (type(records) is dict or type(records) is list):
            _FORGET(self._pending, records)  # the same rule in one step: no window at all
            return
        pending = self._pending
        for key, value in records.items() if isinstance(records, Mapping) else records:
            current = pending.pop(key, _MISSING)
            if current is not value and current is not _MISSING:
                pending.setdefault(key, current)

    def flush(self) -> None:
        """Flush the partition's RocksDB (see :meth:`ChangeLoggingStore.flush`)."""
        self._inner.flush()

    def _release(self) -> None:
        self._lookup = None
        if self._fast is not None:
            self._fast.close()

    def _discard(self) -> None:
        if self._pending:
            logger.warning(
                "[%s-%s] closing with %s uncommitted writes; they are discarded",
                self._inner.store,
                self._inner.partition,
                len(self._pending),
            )
            self._pending.clear()

    def close(self, *, flush: bool = True) -> None:
        """Drop the pending writes (with a warning) and close the partition below; idempotent."""
        self._discard()
        self._release()
        self._inner.close(flush=flush)

    def abandon(self) -> None:
        """Drop the pending writes and abandon the partition below, as a crash would; idempotent."""
        self._discard()
        self._release()
        self._inner.abandon()


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
