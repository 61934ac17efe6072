"""The cleaner's bounded key-hash -> offset map (Kafka's ``SkimpyOffsetMap``), 16 bytes a slot.

While it builds the map over the dirty section of a log, the cleaner records,
for every key, the offset of the latest record with that key.  The map never
stores a key: it stores a fixed-size hash of it, so its memory is bounded by
configuration (``CleanerConfig.dedupe_buffer_size_bytes``) however long the
keys are.

Layout: three numpy arrays, one row per distinct key, sorted by key hash, and
allocated once when the map is created (``np.empty``: pages are touched as rows
fill):

=====  ======  ======  =================================================
bytes  array   dtype   meaning
=====  ======  ======  =================================================
8      hashes  int64   CPython's SipHash-1-3 of the key (``hash(key)``)
4      tags    uint32  CRC-32C of the key
4      deltas  uint32  latest offset minus the map's base offset (the first
                       offset put since :meth:`OffsetMap.clear`)
=====  ======  ======  =================================================

**Budget.** :data:`SLOT_BYTES` = 16: ``slots = memory_bytes // 16`` and the map
accepts ``capacity = int(slots * load_factor)`` keys.  Everything the map ever
allocates fits in ``memory_bytes``: the rows (``capacity`` of them) hold the
sorted keys and, in the rows not filled yet, a *stage* of recent puts; the
temporaries of merging the stage come out of the ``slots - capacity`` rows the
load factor leaves free (:data:`WORK_BYTES_PER_STAGED` bytes per staged record;
measured peak 33, see ``tests/changelog/cleaner/test_offset_map.py``).  A 4 MiB
buffer at the default load factor of 0.9 maps 235,929 keys per pass (16 bytes a
slot, 17.8 bytes a key counting the free slots; the dict-based map before it
budgeted 168 bytes and mapped 22,469; Kafka's 24-byte slots map 157,286).  At
load factor 1.0 there is no free row and the stage is one record: the map then
exceeds its budget by at most one staged record's temporaries.

**Operations, batch-shaped.** :meth:`OffsetMap.put_batch` computes the hashes of
a batch in C-level loops (``map(hash, ...)``, ``map(crc32c, ...)`` into
``np.fromiter``) and appends them to the stage.  When the stage is full, or
before any lookup, it is merged: stable sort, keep the last record of each
key, ``searchsorted`` into the sorted rows, overwrite the deltas of known keys,
and insert the new ones in place: the rows are rewritten from the top in
chunks, each chunk's old rows copied once and scattered with a boolean mask
around the new rows that land in it (no copy of the whole map is ever made).
A merge costs O(stage log stage + rows); the stage is ``free bytes / 44``
records (3.6% of the slots at load factor 0.9), so filling the map to capacity
takes about 25 merges whatever its size, and growth stays linear.  Filling 5M
and 10M distinct keys (batches of 1,000, map sized for them) took 4.5 s and
9.9 s of CPU, against 6.3-7.1 s and 15.2 s for the map before this layout of
the merge (96 bytes of temporaries a staged record, 63 merges, rows moved by a
fancy-indexed scatter); ``benchmarks/offset_map_bench.py``.  Lookups
(:meth:`OffsetMap.get_batch`) are one ``searchsorted`` per batch plus an
equality test of hash and tag.

**Capacity rule** (Kafka's): the map takes new keys until it holds
``capacity``; the record whose key would be the (capacity+1)-th distinct key is
the first one not consumed, and the cleaner cleans up to there and leaves the
rest for the next pass.  A batch that could cross the limit is merged on its
own and cut exactly there.  The map also stops before an offset more than
``2**32 - 2`` past its base offset (the delta would not fit its 32 bits).

**Collisions** (Kafka's rule: equal hash = same key).  Two keys are the same
key to the map when both their 64-bit SipHash and their CRC-32C are equal (96
bits); the cleaner would then drop the older one's latest value.  With ``n``
distinct keys in one pass the chance of any such pair is about ``n**2 /
2**97``: 6e-18 for a million keys, 6e-16 for ten million (a map of 178 MB),
far below the rate of undetected disk or memory errors.  SipHash is keyed by
the per-process seed (``PYTHONHASHSEED``), which is fine because a map is built
and used within one pass in one process and never stored; even keys chosen by
an adversary collide with probability ~2**-64 per pair.  Kafka uses MD5 (128
bits) and accepts the same kind of risk.  Keys with equal SipHash and unequal
CRC-32C are distinct keys and are kept apart (rows are ordered by hash, then
tag).

Rejected designs: a ``dict`` of 96-bit ``int`` -> ``int`` (107-134 bytes per
key, budgeted 168: a 4 MiB buffer took 45 passes over 1M records / 200k keys);
open-addressed numpy arrays (probing at load 0.9 needs many vectorized rounds
per batch, and the free slots are then needed for probing, so no working space
is left in the budget); sorted arrays rebuilt on every merge (``np.insert``
copies the whole map each time: 32 bytes per key at peak and slow growth at 5M
keys).

Thread-safety: none.  A map belongs to one cleaning pass at a time; the
caller (one cleaner worker) is its only user.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, cast

import numpy as np
from crc32c import crc32c

from changelog.errors import InvalidConfigError

__all__ = [
    "HASH_BITS",
    "SLOT_BYTES",
    "WORK_BYTES_PER_STAGED",
    "KeyHashes",
    "OffsetMap",
    "key_hashes",
]

HASH_BITS: Final = 96
"""Width of the stored key hash: 64-bit SipHash (``hash``) next to 32-bit CRC-32C."""

SLOT_BYTES: Final = 16
"""Memory budgeted per slot: 8 (hash) + 4 (tag) + 4 (offset delta); working space comes
out of the slots the load factor leaves free."""

WORK_BYTES_PER_STAGED: Final = 44
"""Upper bound of a merge's temporaries per staged record (measured peak 33: see the tests)."""

_EMPTY: Final = -1
_MIN_SLOTS: Final = 3
_MAX_DELTA: Final = 2**32 - 2
_MARK_CHUNK: Final = 4096  # shadowed offsets marked per step

KeyHashes = tuple[Any, Any]
"""``(hashes, tags)``: the int64 SipHash and uint32 CRC-32C arrays of a batch of keys."""


def key_hashes(keys: Sequence[bytes]) -> KeyHashes:
    """The map hash of each key (no ``None``): ``(int64 SipHash array, uint32 CRC-32C array)``."""
    n = len(keys)
    return (
        np.fromiter(map(hash, keys), dtype=np.int64, count=n),
        np.fromiter(map(crc32c, keys), dtype=np.uint32, count=n),
    )


def _unique_last(h: Any, t: Any, o: Any, mark: Any = None) -> list[Any]:
    """Sort a batch by (hash, tag) and keep the last record of each key (batch order).

    Returns new arrays (the inputs may be views of the stage, which a merge overwrites).
    ``mark(deltas)``, when given, is called with the deltas of the records dropped (a
    later record of the same key shadows them).
    Temporaries, per record: the order (8 bytes), the sorted hashes and tags (12), two or
    three boolean masks, and the kept rows (16).
    """
    if len(h) <= 1:
        return [h.copy(), t.copy(), o.copy()]
    order = np.argsort(h, kind="stable")
    hs = h[order]
    same_h = hs[1:] == hs[:-1]
    if not same_h.any():
        del same_h
        return [hs, t[order], o[order]]
    ts = t[order]
    if (same_h & (ts[1:] != ts[:-1])).any():  # equal SipHash, different keys: rare
        del order, hs, ts, same_h
        order = np.lexsort((t, h))  # stable: batch order within a key
        hs, ts = h[order], t[order]
        same_h = hs[1:] == hs[:-1]
    keep = np.ones(len(hs), dtype=bool)
    same_h &= ts[1:] == ts[:-1]
    keep[:-1] = ~same_h  # the last of each run of equal keys
    del same_h
    if mark is not None:
        mark(o[order[~keep]])
    order = order[keep]
    hs = hs[keep]
    ts = ts[keep]
    del keep
    return [hs, ts, o[order]]


class OffsetMap:
    """A memory-bounded map from key hash to the latest offset seen for that key.

    ``memory_bytes`` bounds the map: it has ``slots = memory_bytes // SLOT_BYTES``
    slots.  ``load_factor`` is ``CleanerConfig.dedupe_buffer_load_factor``: the map
    accepts new keys until ``size`` reaches ``capacity = int(slots * load_factor)``;
    after that :meth:`put_batch` stops and reports how far it got, and the cleaner
    cleans up to there and leaves the rest for the next pass.

    Invariants: ``0 <= size <= capacity <= slots``; rows ``[0, size)`` are sorted
    by (hash, tag) with no two equal; rows ``[size, size + staged)`` are the stage
    (puts not yet merged, in put order); ``latest_offset`` is ``-1`` or the largest
    offset passed to a put (or to :meth:`update_latest_offset`) since the last
    :meth:`clear`; every stored offset is ``<= latest_offset``.

    Thread-safety: none (see the module docstring).
    """

    __slots__ = (
        "_base",
        "_bounds",
        "_capacity",
        "_deltas",
        "_hashes",
        "_latest_offset",
        "_rows",
        "_shadowed",
        "_size",
        "_slots",
        "_stage_max",
        "_staged",
        "_tags",
        "lookups",
    )

    def __init__(self, memory_bytes: int, *, load_factor: float = 0.9) -> None:
        slots = memory_bytes // SLOT_BYTES
        if slots < _MIN_SLOTS:
            raise InvalidConfigError(
                "dedupe_buffer_size_bytes",
                memory_bytes,
                f"must hold at least {_MIN_SLOTS} slots of {SLOT_BYTES} bytes",
            )
        capacity = int(slots * load_factor)
        if capacity < 1:
            raise InvalidConfigError(
                "dedupe_buffer_load_factor",
                load_factor,
                f"leaves no room in a map of {slots} slots: cleaning could never progress",
            )
        self._slots = slots
        self._capacity = capacity
        free_bytes = (slots - capacity) * SLOT_BYTES
        # the stage lives in rows the map has not filled (size + staged <= capacity): the free
        # rows pay only for the merge's temporaries
        self._stage_max = max(1, free_bytes // WORK_BYTES_PER_STAGED)
        self._rows = capacity  # the stage lives in rows [size, capacity)
        self._hashes = np.empty(self._rows, dtype=np.int64)
        self._tags = np.empty(self._rows, dtype=np.uint32)
        self._deltas = np.empty(self._rows, dtype=np.uint32)
        self._size = 0
        self._staged = 0
        self._base = -1
        self._latest_offset = -1
        self._bounds: Any = None
        self._shadowed: Any = None
        self.lookups = 0
        """Number of keys looked up or inserted since :meth:`clear` (statistics)."""

    # ----------------------------------------------------------------- sizes

    @property
    def slots(self) -> int:
        """Slots the memory budget allows (``memory_bytes // SLOT_BYTES``)."""
        return self._slots

    @property
    def capacity(self) -> int:
        """Most keys the map accepts: ``int(slots * load_factor)``."""
        return self._capacity

    @property
    def stage_records(self) -> int:
        """Most puts staged before a merge (what the free slots pay for)."""
        return self._stage_max

    @property
    def size(self) -> int:
        """Number of distinct key hashes stored (merges the stage first)."""
        self._merge_stage()
        return self._size

    @property
    def memory_bytes(self) -> int:
        """The memory budget of the map (``slots * SLOT_BYTES``), an upper bound of its use."""
        return self._slots * SLOT_BYTES

    @property
    def utilization(self) -> float:
        """``size / slots``: how full the map is (Kafka's buffer utilization)."""
        return self.size / self._slots

    @property
    def is_full(self) -> bool:
        """Whether ``size`` has reached ``capacity`` (no new key is accepted)."""
        return self.size >= self._capacity

    @property
    def latest_offset(self) -> int:
        """The end of the mapped range: the largest offset put, or ``-1`` when empty."""
        return self._latest_offset

    def update_latest_offset(self, offset: int) -> None:
        """Extend the mapped range to ``offset`` (records without keys, gaps between segments)."""
        self._latest_offset = max(self._latest_offset, offset)

    def clear(self) -> None:
        """Empty the map (its arrays are kept for the next pass); stop watching for shadows."""
        self._size = 0
        self._staged = 0
        self._base = -1
        self._latest_offset = -1
        self._bounds = None
        self._shadowed = None
        self.lookups = 0

    def watch_shadowed(self, base_offsets: Sequence[int]) -> None:
        """From now on, note which offset ranges hold a record that a later put shadows.

        ``base_offsets`` (increasing) split the offsets into ranges ``[base_offsets[i],
        base_offsets[i+1])``, the last one open (a log's segments).  Whenever a put
        replaces the offset stored for a key, or a batch holds a key twice, the range
        of the replaced offset is marked: some record there is no longer the latest of
        its key.  :meth:`shadowed` reads the marks; :meth:`clear` stops watching.  The
        cleaner uses it to prove, without reading a segment again, that a pass removes
        nothing from it.
        """
        self._merge_stage()  # puts before the watch are not watched
        self._bounds = np.asarray(base_offsets, dtype=np.int64)
        self._shadowed = np.zeros(len(self._bounds), dtype=bool)

    def shadowed(self) -> list[bool]:
        """Per range of :meth:`watch_shadowed`: whether a put shadowed a record in it."""
        if self._shadowed is None:
            raise ValueError("watch_shadowed() was not called since the last clear()")
        self._merge_stage()
        marks: list[bool] = self._shadowed.tolist()
        return marks

    def _mark(self, deltas: Any) -> None:
        """Mark the ranges of the shadowed offsets ``base + deltas`` (in chunks: bounded temporaries)."""
        bounds = self._bounds
        for first in range(0, len(deltas), _MARK_CHUNK):
            offsets = deltas[first : first + _MARK_CHUNK].astype(np.int64)
            offsets += self._base
            index = np.searchsorted(bounds, offsets, side="right")
            index -= 1
            self._shadowed[index[index >= 0]] = True

    # ------------------------------------------------------------ operations

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as the latest for ``key``; ``False`` (nothing stored) when full."""
        return self.put_batch((key,), (offset,)) == 1

    def get(self, key: bytes) -> int:
        """The latest offset stored for ``key``, or ``-1``."""
        return self.get_batch((key,))[0]

    def put_batch(self, keys: Sequence[bytes | None], offsets: Sequence[int]) -> int:
        """Put ``keys[i] -> offsets[i]`` in order, stopping when a new key would exceed capacity.

        ``None`` keys (records without a key) are skipped but still extend
        ``latest_offset``.  Offsets must not decrease (a log is read in order).
        Returns how many leading entries were consumed; less than ``len(keys)``
        means the map is full (or the next offset is out of its 32-bit range)
        and ``latest_offset`` is the offset of the last consumed entry.
        """
        n = len(keys)
        if n != len(offsets):
            raise ValueError(f"zip() arguments differ in length: {n} != {len(offsets)}")
        if not n:
            return 0
        if self._base < 0:
            self._base = offsets[0]
        limit = self._base + _MAX_DELTA
        if offsets[-1] > limit:  # cut before the first offset out of range
            cut = next(i for i, offset in enumerate(offsets) if offset > limit)
            consumed = self._put_keyed(keys[:cut], offsets[:cut]) if cut else 0
            self._consumed(offsets, consumed)
            return consumed
        consumed = self._put_keyed(keys, offsets)
        self._consumed(offsets, consumed)
        return consumed

    def _consumed(self, offsets: Sequence[int], consumed: int) -> None:
        self.lookups += consumed
        if consumed:
            self._latest_offset = max(self._latest_offset, offsets[consumed - 1])

    def _put_keyed(self, keys: Sequence[bytes | None], offsets: Sequence[int]) -> int:
        """Put a batch whose offsets fit; ``None`` keys are consumed and not stored."""
        n = len(keys)
        if None in keys:
            present = [i for i, key in enumerate(keys) if key is not None]
            kept_keys = [keys[i] for i in present]
            got = self._put_keyed(kept_keys, [offsets[i] for i in present]) if present else 0
            if got == len(present):
                return n
            return present[got]  # the first key not taken: everything before it is consumed
        keyed = cast("Sequence[bytes]", keys)
        step = self._stage_max
        done = 0
        while done < n:
            piece = min(step, n - done)
            got = self._put_piece(keyed[done : done + piece], offsets[done : done + piece])
            done += got
            if got < piece:
                break
        return done

    def _put_piece(self, keys: Sequence[bytes], offsets: Sequence[int]) -> int:
        """Put at most ``stage_records`` keyed records: stage them, or merge exactly at the limit."""
        n = len(keys)
        if self._staged + n > self._stage_max or self._size + self._staged + n > self._capacity:
            self._merge_stage()  # before this piece's arrays exist: they would add to the peak
        h, t = key_hashes(keys)
        o = np.asarray(offsets, dtype=np.int64)
        o -= self._base
        deltas = o.astype(np.uint32)
        del o
        if self._size + self._staged + n <= self._capacity:  # cannot overflow: stage
            start = self._size + self._staged
            self._hashes[start : start + n] = h
            self._tags[start : start + n] = t
            self._deltas[start : start + n] = deltas
            self._staged += n
            return n
        consumed = self._cut_at_capacity(h, t)
        if consumed:
            rows = _unique_last(h[:consumed], t[:consumed], deltas[:consumed], self._marker())
            del h, t, deltas
            self._merge(rows)
        return consumed

    def _cut_at_capacity(self, h: Any, t: Any) -> int:
        """How many leading records of a batch fit: stop at the (capacity+1)-th distinct key."""
        room = self._capacity - self._size
        order = np.lexsort((t, h))
        hs, ts = h[order], t[order]
        first = np.ones(len(hs), dtype=bool)
        first[1:] = (hs[1:] != hs[:-1]) | (ts[1:] != ts[:-1])
        uh, ut, first_index = hs[first], ts[first], order[first]  # lexsort is stable
        new = ~self._find(uh, ut)[1]
        if int(new.sum()) <= room:
            return len(h)
        return int(np.sort(first_index[new])[room])

    def _merge_stage(self) -> None:
        if not self._staged:
            return
        start, end = self._size, self._size + self._staged
        self._staged = 0
        rows = _unique_last(
            self._hashes[start:end], self._tags[start:end], self._deltas[start:end], self._marker()
        )
        self._merge(rows)

    def _marker(self) -> Any:
        return self._mark if self._bounds is not None else None

    def _find(self, h: Any, t: Any) -> tuple[Any, Any]:
        """``(row, found)`` of each (hash, tag): the row where it is, or where it would go."""
        size = self._size
        hashes = self._hashes[:size]
        pos = np.searchsorted(hashes, h)
        if not size:
            return pos, np.zeros(len(h), dtype=bool)
        at_hash = hashes.take(pos, mode="clip")
        same_h = at_hash == h
        del at_hash
        same_h &= pos < size
        found = self._tags[:size].take(pos, mode="clip") == t
        found &= same_h
        odd = np.flatnonzero(same_h & ~found)
        del same_h
        if len(odd):  # equal SipHash, another tag: walk the run of equal hashes (rare)
            tags = self._tags
            for i in odd.tolist():
                row = int(pos[i])
                while row < size and hashes[row] == h[i] and tags[row] < t[i]:
                    row += 1
                pos[i] = row
                found[i] = row < size and hashes[row] == h[i] and tags[row] == t[i]
        return pos, found

    def _merge(self, rows: list[Any]) -> None:
        """Merge sorted unique (hash, tag, delta) rows: overwrite known keys, insert new ones.

        ``rows`` is ``[hashes, tags, deltas]``; the list is emptied, so that each array is
        freed as soon as its new rows are taken (the peak stays within the stage's budget).
        """
        h, t, o = rows
        rows.clear()
        pos, found = self._find(h, t)
        if found.any():
            rows_found = pos[found]
            if self._bounds is not None:
                self._mark(self._deltas[rows_found])
            self._deltas[rows_found] = o[found]
            del rows_found
        new = ~found
        del found
        j = int(new.sum())
        if not j:
            return
        npos = pos[new]
        del pos
        nh = h[new]
        del h
        nt = t[new]
        del t
        no = o[new]
        del o, new
        size = self._size
        assert size + j <= self._rows  # the stage rules keep it so
        final = npos
        final += np.arange(j)  # where each new row ends up
        del npos
        arrays: tuple[Any, ...] = (self._hashes, self._tags, self._deltas)
        news: tuple[Any, ...] = (nh, nt, no)
        first = int(final[0])
        chunk = max(self._stage_max // 2, 256)
        hi = size + j
        b = j
        while (
            hi > first
        ):  # output rows [lo, hi), from the top: no row is overwritten before it moves
            lo = max(first, hi - chunk)
            a = int(np.searchsorted(final, lo))
            # output row p holds old row p - (new rows below p): the old rows of the chunk
            # are the contiguous run [lo - a, hi - b)
            if b - a == hi - lo:  # only new rows
                for array, values in zip(arrays, news, strict=True):
                    array[lo:hi] = values[a:b]
            else:
                keep = np.ones(hi - lo, dtype=bool)
                keep[final[a:b] - lo] = False
                for array, values in zip(arrays, news, strict=True):
                    moved = array[lo - a : hi - b].copy()  # the source overlaps the target
                    region = array[lo:hi]
                    region[keep] = moved
                    del moved
                    region[~keep] = values[a:b]
                del keep
            hi, b = lo, a
        self._size = size + j

    def get_batch(self, keys: Sequence[bytes | None]) -> list[int]:
        """The latest offset stored for each key (``-1`` when absent or the key is ``None``)."""
        self.lookups += len(keys)
        if None not in keys:
            return self.get_hashed(key_hashes(keys))  # type: ignore[arg-type]
        present = [i for i, key in enumerate(keys) if key is not None]
        out = [_EMPTY] * len(keys)
        if present:
            found = self.get_hashed(key_hashes([keys[i] for i in present]))  # type: ignore[misc]
            for i, offset in zip(present, found, strict=True):
                out[i] = offset
        return out

    def get_hashed(self, hashes: KeyHashes) -> list[int]:
        """The latest offset stored for each hash from :func:`key_hashes` (``-1`` when absent)."""
        self._merge_stage()
        h, t = hashes
        if not self._size:
            return [_EMPTY] * len(h)
        pos, found = self._find(h, t)
        pos[~found] = 0
        out = self._deltas[pos].astype(np.int64)
        out += self._base
        out[~found] = _EMPTY
        result: list[int] = out.tolist()
        return result

    def __repr__(self) -> str:
        return (
            f"OffsetMap(slots={self._slots}, size={self.size}, capacity={self._capacity}, "
            f"latest_offset={self._latest_offset})"
        )
