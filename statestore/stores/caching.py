"""The record cache of one store partition: committed values of recently used keys, in memory.

Kafka Streams keeps a record cache over its stores (``statestore.cache.max.bytes``) so that
a read of a hot key does not reach RocksDB.  :class:`CachingStore` is that cache as a layer
of the one stack: it wraps a partition's change-logging layer
(:class:`~statestore.stores.bytes_store.ChangeLogging`) and is one itself, under the write
buffer (:class:`~statestore.stores.buffer.WriteBuffer`)::

    typed -> (metered) -> write buffer -> caching -> change-logging -> RocksDB

It holds **committed** values only, as the bytes RocksDB holds (``None``: the key has no
value): the values :attr:`CachingStore.lookup` read from RocksDB, and the records a commit
wrote to RocksDB (:meth:`CachingStore.apply`, :meth:`CachingStore.write`), put in after
RocksDB took them.  Uncommitted writes stay in the write buffer above, so an aborted
transaction or a rewind (the write buffer drops its writes) leaves nothing here to drop:
what the cache holds is RocksDB's state, entry for entry.  A restore or a standby's
promotion writes RocksDB before the stack is built over it, and a new stack starts with an
empty cache.  A commit that fails empties the cache (RocksDB may or may not hold it; the
partition below is failed and its store must be reopened anyway).

Bounded by entries (``max_entries``, a setting of the store's spec): when a miss or a
commit takes the cache past it, the older entries (by first insertion) are dropped until
half of ``max_entries`` is left.  Dropping in halves costs one C-level copy per
``max_entries / 2`` insertions, and nothing per hit: a hit is one ``dict`` lookup in C,
with no Python frame (:attr:`CachingStore.lookup` is the bound ``__getitem__`` of a
``dict`` whose ``__missing__`` reads RocksDB), so the write buffer's compiled get
(``_put.c``: ``Pending``) reaches it without a call into Python.  Unlike Kafka Streams'
cache it does not hold dirty entries or delay changelog writes (the write buffer does
that), and a hit does not refresh an entry's age (first-in, first-out, not LRU).

Only point reads are cached: ranges, multi-gets and the RocksDB gauges go to the layer below
unchanged (they read the same committed state).  Only stores whose RocksDB is changed by
nothing but this stack's commits may have it: the builder grants it to distributed mode's
plain key-value stores (:mod:`statestore.stores.builder`), not to stores in time (a window
store's RocksDB drops expired segments by itself).

Invariants: every entry ``key -> value`` of ``_entries`` equals RocksDB's committed value of
``key`` (``None``: none); ``len(_entries) <= max_entries`` after every call returns.

Thread-safety: not thread-safe, like the layers around it: the write buffer's user thread
reads, the committer (the same thread in distributed mode) applies.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping

from changelog import Log
from statestore.stores.bytes_store import ChangeLogging
from statestore.txn.participant import ForwardedIdentity, ForwardedSteps, Records

__all__ = ["CachingStore"]


class _Entries(dict[bytes, bytes | None]):
    """The cache's entries: a ``dict`` whose missing keys are read from RocksDB and kept.

    ``self[key]`` is a hit in C; a miss runs :meth:`__missing__` (one RocksDB get, then the
    entry is kept).  An error of the read propagates and keeps nothing.
    """

    __slots__ = ("_load", "max_entries")

    def __init__(self, load: Callable[[bytes], bytes | None], max_entries: int) -> None:
        super().__init__()
        self._load = load
        self.max_entries = max_entries

    def __missing__(self, key: bytes) -> bytes | None:
        value = self._load(key)
        if len(self) >= self.max_entries:
            self.shrink()
        self[key] = value
        return value

    def shrink(self) -> None:
        """Keep the newest ``max_entries // 2`` entries (by first insertion), drop the rest."""
        keep = list(itertools.islice(self.items(), max(len(self) - self.max_entries // 2, 0), None))
        self.clear()
        self.update(keep)

    def committed(self, records: Records) -> None:
        """Take a commit's records (RocksDB has them), then shrink if past the bound."""
        self.update(records)
        if len(self) > self.max_entries:
            self.shrink()


class CachingStore(ForwardedSteps, ForwardedIdentity):
    """A record cache over one partition's change-logging layer (see the module docstring).

    Implements :class:`~statestore.stores.bytes_store.ChangeLogging`; owns the layer it
    wraps (closing this closes it).
    """

    def __init__(self, inner: ChangeLogging, *, max_entries: int) -> None:
        """Cache up to ``max_entries`` (>= 1) committed values of ``inner`` (open, restored)."""
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self._inner: ChangeLogging = inner
        self._entries = _Entries(inner.lookup, max_entries)
        self.read_error = inner.read_error
        """The layer below's typed error for a failed :attr:`lookup` (a miss reads it)."""
        self.get_many: Callable[[list[bytes]], list[bytes | None]] = inner.get_many
        """The committed values of keys, in order (the layer below's multi-get)."""

    @property
    def max_entries(self) -> int:
        """The bound on the number of cached values."""
        return self._entries.max_entries

    @property
    def cached_entries(self) -> int:
        """How many committed values the cache holds now."""
        return len(self._entries)

    # -- reads -------------------------------------------------------------------------

    @property
    def lookup(self) -> Callable[[bytes], bytes | None]:
        """The committed value of a key, from the cache or (a miss) from the layer below,
        whose errors pass unmapped (see :attr:`read_error`)."""
        return self._entries.__getitem__

    def items(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Committed entries with ``lo <= key < hi`` in key order (or reversed; with
        ``key_size_bytes``, only keys of that length): the layer below's."""
        return self._inner.items(lo, hi, reverse=reverse, key_size_bytes=key_size_bytes)

    def approximate_num_entries(self) -> int:
        """The layer below's estimate."""
        return self._inner.approximate_num_entries()

    # -- identity ----------------------------------------------------------------------

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """The layer below's local changelog partitions."""
        return self._inner.changelogs

    # -- commits -----------------------------------------------------------------------

    def write(self, records: Records) -> int:
        """The layer below's one-partition commit, then ``records`` into the cache."""
        try:
            count = self._inner.write(records)
        except BaseException:
            self._entries.clear()
            raise
        self._entries.committed(records)
        return count

    def apply(
        self, records: Records, applied: int, *, meta: Mapping[bytes, bytes] | None = None
    ) -> None:
        """Committed ``records`` into the layer below (RocksDB), then into the cache."""
        try:
            self._inner.apply(records, applied, meta=meta)
        except BaseException:
            self._entries.clear()
            raise
        self._entries.committed(records)

    # -- lifecycle ---------------------------------------------------------------------

    def flush(self) -> None:
        """Flush the layer below."""
        self._inner.flush()

    def close(self, *, flush: bool = True) -> None:
        """Empty the cache and close the layer below; idempotent."""
        self._entries.clear()
        self._inner.close(flush=flush)

    def abandon(self) -> None:
        """Empty the cache and abandon the layer below, as a crash would; idempotent."""
        self._entries.clear()
        self._inner.abandon()
