"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % numPartitions``.

A key's partition is computed from its *serialized* bytes exactly as Kafka's
Java producer does (``Utils.murmur2`` with seed ``0x9747b28c``, then
``Utils.toPositive``, which masks the sign bit rather than taking an absolute
value), so a store's partition layout matches a Kafka topic written by Kafka
Streams with the default partitioner.  Pinned by Kafka's own test vectors
(``UtilsTest.testMurmur2``) in ``tests/statestore/test_partitioner.py``.

Thread-safety: pure functions, thread-safe.
"""

from __future__ import annotations

from typing import Final

__all__ = ["murmur2", "partition_for", "to_positive"]

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_R: Final = 24
_MASK32: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 of ``data`` as a *signed* int.

    Little-endian 4-byte words; Java's wrapping ``int`` arithmetic is modelled
    by masking to 32 bits, and ``>>>`` (unsigned shift) by shifting the
    masked value.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    for word in memoryview(data)[:whole].cast("I") if whole and _LITTLE else ():
        k = (word * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    if whole and not _LITTLE:  # pragma: no cover - big-endian hosts only
        for i in range(0, whole, 4):
            k = int.from_bytes(data[i : i + 4], "little")
            k = (k * _M) & _MASK32
            k ^= k >> _R
            k = (k * _M) & _MASK32
            h = ((h * _M) & _MASK32) ^ k
    rest = length & 3
    if rest:
        if rest == 3:
            h ^= data[whole + 2] << 16
        if rest >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit of a 32-bit int (not ``abs``)."""
    return number & 0x7FFFFFFF


def partition_for(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for the serialized ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


_LITTLE: Final = memoryview(b"\x01\x00\x00\x00").cast("I")[0] == 1
