"""The cleaner's bounded key-hash -> offset map (Kafka's ``SkimpyOffsetMap``).

While it builds the map over the dirty section of a log, the cleaner records,
for every key, the offset of the latest record with that key.  The map never
stores a key: it stores a fixed-size hash of it, so its memory is bounded by
configuration (``CleanerConfig.dedupe_buffer_size_bytes``) however long the
keys are.

Layout: one ``dict`` from a 96-bit key hash (a Python ``int``) to the latest
offset (a Python ``int``).  Every per-record step runs in C-level loops over a
whole batch: ``map(hash, keys)``, ``map(crc32c, keys)``, ``dict.update(zip(...))``
to put and ``map(dict.get, ...)`` to look up; no Python code runs per record.

=====================  =====================================================
memory per entry       bytes (CPython 3.11, 64-bit, measured with tracemalloc)
=====================  =====================================================
key hash ``int``       40 (96 bits: four 30-bit digits)
offset ``int``         32
dict table             30 (just before a resize) to 60 (just after one)
resize transient       +30 while the old and the new table coexist
total, worst case      164 measured; :data:`SLOT_BYTES` = 168 is what a pass
                       budgets, so ``memory_bytes // 168`` entries never take
                       more than ``memory_bytes``
=====================  =====================================================

So one MiB of dedupe buffer holds 6,241 keys per pass (5,617 at the default
load factor of 0.9), against 43,690 for Kafka's 24-byte slots: the buffer buys
about 7x fewer keys, and a log with more dirty keys than that takes more,
cheaper passes (the "map fills -> clean up to there -> continue next pass"
rule is unchanged).  The dict grows with the keys actually seen, so a small
dirty section never touches the whole budget.

The hash: ``(hash(key) << 32) ^ crc32c(key)``, i.e. the pair of CPython's
64-bit SipHash-1-3 of the bytes and their CRC-32C: 96 bits.  ``hash`` is
randomized per process (``PYTHONHASHSEED``), which is fine because a map is
built and used within one pass in one process and never stored.  Two different
keys with equal hashes are the same key to the map, and the cleaner would then
drop the older one's latest value.  With ``n`` distinct keys in one pass the
chance of any such pair is about ``n**2 / 2**97``: 6e-18 for a million keys,
6e-16 for ten million (a map of 1.6 GiB), far below the rate of undetected
disk or memory errors.  SipHash is keyed by the per-process seed, so even keys
chosen by an adversary collide with probability ~2**-64 per pair (CRC-32C is
not keyed and adds its 32 bits only for keys not chosen to collide).  Kafka
uses MD5 (128 bits); the earlier version of this map stored 16-byte BLAKE2b
digests in open-addressed arrays (24 bytes a slot) but its Python probe loop
cost ~1 us per record each way, 72% of a pass; this map costs ~0.2 us.

Thread-safety: none.  A map belongs to one cleaning pass at a time; the
caller (one cleaner worker) is its only user.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import lshift, xor
from typing import Final

from crc32c import crc32c

from changelog.errors import InvalidConfigError

__all__ = ["HASH_BITS", "SLOT_BYTES", "OffsetMap", "key_hashes"]

HASH_BITS: Final = 96
"""Width of the stored key hash: 64-bit SipHash (``hash``) next to 32-bit CRC-32C."""

SLOT_BYTES: Final = 168
"""Memory budgeted per entry (hash int, offset int, dict table with resize slack)."""

_EMPTY: Final = -1
_MIN_SLOTS: Final = 3


def key_hashes(keys: Iterable[bytes]) -> list[int]:
    """The 96-bit map hash of each key (no ``None``), computed in C-level loops."""
    keys = keys if isinstance(keys, list | tuple) else list(keys)
    return list(map(xor, map(lshift, map(hash, keys), repeat(32)), map(crc32c, keys)))


class OffsetMap:
    """A memory-bounded map from key hash to the latest offset seen for that key.

    ``memory_bytes`` bounds the map: it holds at most ``slots = memory_bytes //
    SLOT_BYTES`` entries.  ``load_factor`` is ``CleanerConfig.dedupe_buffer_load_factor``:
    the map accepts new keys until ``size`` reaches ``capacity = int(slots *
    load_factor)``; after that :meth:`put_batch` stops and reports how far it
    got, and the cleaner cleans up to there and leaves the rest for the next pass.

    Invariants: ``0 <= size <= capacity <= slots``; ``latest_offset`` is ``-1``
    or the largest offset passed to a put (or to :meth:`update_latest_offset`)
    since the last :meth:`clear`; every stored offset is ``<= latest_offset``.

    Thread-safety: none (see the module docstring).
    """

    __slots__ = ("_capacity", "_latest_offset", "_map", "_slots", "lookups")

    def __init__(self, memory_bytes: int, *, load_factor: float = 0.9) -> None:
        slots = memory_bytes // SLOT_BYTES
        if slots < _MIN_SLOTS:
            raise InvalidConfigError(
                "dedupe_buffer_size_bytes",
                memory_bytes,
                f"must hold at least {_MIN_SLOTS} entries of {SLOT_BYTES} bytes",
            )
        capacity = int(slots * load_factor)
        if capacity < 1:
            raise InvalidConfigError(
                "dedupe_buffer_load_factor",
                load_factor,
                f"leaves no room in a map of {slots} entries: cleaning could never progress",
            )
        self._slots = slots
        self._capacity = capacity
        self._map: dict[int, int] = {}
        self._latest_offset = -1
        self.lookups = 0
        """Number of keys looked up or inserted since :meth:`clear` (statistics)."""

    # ----------------------------------------------------------------- sizes

    @property
    def slots(self) -> int:
        """Most entries the memory budget allows (``memory_bytes // SLOT_BYTES``)."""
        return self._slots

    @property
    def capacity(self) -> int:
        """Most keys the map accepts: ``int(slots * load_factor)``."""
        return self._capacity

    @property
    def size(self) -> int:
        """Number of distinct key hashes stored."""
        return len(self._map)

    @property
    def memory_bytes(self) -> int:
        """The memory budget of the map (``slots * SLOT_BYTES``), an upper bound of its use."""
        return self._slots * SLOT_BYTES

    @property
    def utilization(self) -> float:
        """``size / slots``: how full the map is (Kafka's buffer utilization)."""
        return len(self._map) / self._slots

    @property
    def is_full(self) -> bool:
        """Whether ``size`` has reached ``capacity`` (no new key is accepted)."""
        return len(self._map) >= self._capacity

    @property
    def latest_offset(self) -> int:
        """The end of the mapped range: the largest offset put, or ``-1`` when empty."""
        return self._latest_offset

    def update_latest_offset(self, offset: int) -> None:
        """Extend the mapped range to ``offset`` (records without keys, gaps between segments)."""
        self._latest_offset = max(self._latest_offset, offset)

    def clear(self) -> None:
        """Empty the map (its memory is given back)."""
        self._map = {}
        self._latest_offset = -1
        self.lookups = 0

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
        means the map is full and ``latest_offset`` is the offset of the last
        consumed entry.
        """
        if len(keys) != len(offsets):
            raise ValueError(f"zip() arguments differ in length: {len(keys)} != {len(offsets)}")
        if not keys:
            return 0
        table = self._map
        if None not in keys and len(table) + len(keys) <= self._capacity:  # the fast path
            table.update(zip(key_hashes(keys), offsets, strict=True))  # type: ignore[arg-type]
            consumed = len(keys)
        else:
            consumed = self._put_slowly(keys, offsets)
        self.lookups += consumed
        if consumed:
            self._latest_offset = max(self._latest_offset, offsets[consumed - 1])
        return consumed

    def _put_slowly(self, keys: Sequence[bytes | None], offsets: Sequence[int]) -> int:
        """One entry at a time: a batch with ``None`` keys, or one that may fill the map."""
        table = self._map
        capacity = self._capacity
        consumed = 0
        for key, offset in zip(keys, offsets, strict=True):
            if key is not None:
                hashed = (hash(key) << 32) ^ crc32c(key)
                if hashed not in table and len(table) >= capacity:
                    return consumed
                table[hashed] = offset
            consumed += 1
        return consumed

    def get_batch(self, keys: Sequence[bytes | None]) -> list[int]:
        """The latest offset stored for each key (``-1`` when absent or the key is ``None``)."""
        self.lookups += len(keys)
        if None not in keys:
            return self.get_hashed(key_hashes(keys))  # type: ignore[arg-type]
        get = self._map.get
        return [
            _EMPTY if key is None else get((hash(key) << 32) ^ crc32c(key), _EMPTY) for key in keys
        ]

    def get_hashed(self, hashes: Iterable[int]) -> list[int]:
        """The latest offset stored for each hash from :func:`key_hashes` (``-1`` when absent)."""
        return list(map(self._map.get, hashes, repeat(_EMPTY)))

    def __repr__(self) -> str:
        return (
            f"OffsetMap(slots={self._slots}, size={len(self._map)}, capacity={self._capacity}, "
            f"latest_offset={self._latest_offset})"
        )
