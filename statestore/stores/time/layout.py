"""Byte layouts of the stores in time, the same as Kafka Streams' (so changelogs interoperate).

All integers are big-endian; timestamps are signed 64-bit milliseconds and
never negative here (a negative one is refused before anything is buffered).

Timestamped value (the RocksDB value of timestamped key-value and window
stores; Kafka Streams' ``ValueAndTimestampSerializer``):

======  =======  =======  ===========  ==========================================
offset  size     type     field        notes
======  =======  =======  ===========  ==========================================
0       8        int64    timestamp    the changelog record's CreateTime
8       n        bytes    value        the changelog record's value, unchanged
======  =======  =======  ===========  ==========================================

The changelog record carries ``value`` alone and the timestamp in its
CreateTime (no extra bytes); restore puts the timestamp back in front.

Windowed key (the changelog key of a window store; Kafka Streams'
``WindowKeySchema.toStoreKeyBinary``):

======  =======  =======  ============  =========================================
offset  size     type     field         notes
======  =======  =======  ============  =========================================
0       n        bytes    key           the serialized key
n       8        int64    window start  milliseconds
n+8     4        int32    seqnum        0 unless duplicates are retained
======  =======  =======  ============  =========================================

Session key (the changelog key of a session store; Kafka Streams'
``SessionKeySchema.toBinary``):

======  =======  =======  ============  =========================================
offset  size     type     field         notes
======  =======  =======  ============  =========================================
0       n        bytes    key           the serialized key
n       8        int64    end           the session's last record time, ms
n+8     8        int64    start         the session's first record time, ms
======  =======  =======  ============  =========================================

Versioned store (RocksDB; Kafka Streams' changelog of a versioned store
holds ``key`` -> ``value`` with ``timestamp`` as CreateTime, a delete as a
tombstone at its timestamp):

======  =======  =======  ============  =========================================
offset  size     type     field         notes
======  =======  =======  ============  =========================================
0       n        bytes    key           RocksDB key: the serialized key ...
n       8        int64    timestamp     ... and the version's valid-from time
0       1        uint8    flag          RocksDB value: 1 a value, 0 a tombstone
1       m        bytes    value         the changelog record's value (flag 1)
======  =======  =======  ============  =========================================

Segmented RocksDB key (:mod:`statestore.stores.time.segments`; not in the
changelog):

======  =======  =======  ==============  =======================================
offset  size     type     field           notes
======  =======  =======  ==============  =======================================
0       8        uint64   segment id      segment time // segment interval
8       n+s      bytes    changelog key   windowed (s = 12) or session (s = 16) key
======  =======  =======  ==============  =======================================

The segment time is the first 8 bytes of the suffix: a window's start, a
session's end.

Keys of one segment sort together, and inside a segment by windowed key (key
bytes, then window start, then seqnum), so an expired segment is one RocksDB
``delete_range`` and a fetch of one key is one seek per live segment.

Thread-safety: pure functions over immutable values.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Final, Literal

__all__ = [
    "SEGMENT_ID",
    "SEGMENT_PREFIX_BYTES",
    "SEQNUM",
    "SESSION_SUFFIX",
    "SESSION_SUFFIX_BYTES",
    "TIMESTAMP",
    "TIMESTAMP_BYTES",
    "TOMBSTONE_VERSION",
    "VALUE_VERSION",
    "WINDOW_SUFFIX",
    "WINDOW_SUFFIX_BYTES",
    "RecordFormat",
    "SuffixRoute",
    "changelog_records",
    "join_timestamp",
    "key_range_upper_bound",
    "restored_pairs",
    "segment_prefix",
    "session_key",
    "split_session_key",
    "split_timestamp",
    "split_windowed_key",
    "versioned_key",
    "windowed_key",
]

RecordFormat = Literal["plain", "timestamped", "versioned"]
"""How the change-logging layer maps a store's RocksDB entries to changelog records."""

TIMESTAMP: Final = struct.Struct(">q")
"""A timestamp (int64 BE)."""
TIMESTAMP_BYTES: Final = TIMESTAMP.size
SEQNUM: Final = struct.Struct(">i")
"""A window store's sequence number (int32 BE)."""
WINDOW_SUFFIX: Final = struct.Struct(
    ">"
    "q"  # window start, ms
    "i"  # seqnum
)
"""What follows the key bytes in a windowed key."""
WINDOW_SUFFIX_BYTES: Final = WINDOW_SUFFIX.size
SESSION_SUFFIX: Final = struct.Struct(
    ">"
    "q"  # end, ms
    "q"  # start, ms
)
"""What follows the key bytes in a session key."""
SESSION_SUFFIX_BYTES: Final = SESSION_SUFFIX.size
VALUE_VERSION: Final = b"\x01"
"""First byte of a versioned store's RocksDB value holding a value."""
TOMBSTONE_VERSION: Final = b"\x00"
"""A versioned store's RocksDB value of a delete (a tombstone version)."""
SEGMENT_ID: Final = struct.Struct(">Q")
"""A segment id (uint64 BE): the prefix of a segmented RocksDB key."""
SEGMENT_PREFIX_BYTES: Final = SEGMENT_ID.size


def join_timestamp(timestamp_ms: int, value: bytes) -> bytes:
    """``timestamp | value``: the RocksDB value of a timestamped store."""
    return TIMESTAMP.pack(timestamp_ms) + value


def split_timestamp(stored: bytes) -> tuple[int, bytes]:
    """``(timestamp, value)`` of a RocksDB value written by :func:`join_timestamp`."""
    return TIMESTAMP.unpack_from(stored)[0], stored[TIMESTAMP_BYTES:]


def windowed_key(key: bytes, window_start_ms: int, seqnum: int = 0) -> bytes:
    """``key | window start | seqnum``."""
    return key + WINDOW_SUFFIX.pack(window_start_ms, seqnum)


def split_windowed_key(data: bytes) -> tuple[bytes, int, int]:
    """``(key, window start, seqnum)`` of a windowed key (at least 12 bytes)."""
    start, seqnum = WINDOW_SUFFIX.unpack_from(data, len(data) - WINDOW_SUFFIX_BYTES)
    return data[:-WINDOW_SUFFIX_BYTES], start, seqnum


def session_key(key: bytes, start_ms: int, end_ms: int) -> bytes:
    """``key | end | start``."""
    return key + SESSION_SUFFIX.pack(end_ms, start_ms)


def split_session_key(data: bytes) -> tuple[bytes, int, int]:
    """``(key, start, end)`` of a session key (at least 16 bytes)."""
    end, start = SESSION_SUFFIX.unpack_from(data, len(data) - SESSION_SUFFIX_BYTES)
    return data[:-SESSION_SUFFIX_BYTES], start, end


def segment_prefix(segment_id: int) -> bytes:
    """The 8-byte prefix of the RocksDB keys of segment ``segment_id``."""
    return SEGMENT_ID.pack(segment_id)


def changelog_records(
    record_format: RecordFormat,
    records: Mapping[bytes, bytes | None],
    now_ms: Callable[[], int],
) -> tuple[list[tuple[bytes, bytes | None]], list[int]]:
    """A commit of a store in time as the changelog takes it: ``(key, value)`` pairs and timestamps.

    ``timestamped``: each ``timestamp | value`` becomes ``value`` with
    ``timestamp`` as the record's CreateTime; a tombstone is stamped
    ``now_ms()`` (once per call).  ``versioned``: each ``key | timestamp`` ->
    ``flag | value`` becomes ``key`` -> ``value`` (``None`` for a tombstone
    version) at ``timestamp``.
    """
    if record_format == "versioned":
        return _versioned_changelog_records(records)
    # two comprehensions, no Python call per record (a commit's hot path)
    now = now_ms() if None in records.values() else 0
    unpack = TIMESTAMP.unpack_from
    pairs = [
        (key, None if value is None else value[TIMESTAMP_BYTES:]) for key, value in records.items()
    ]
    stamps = [now if value is None else unpack(value)[0] for value in records.values()]
    return pairs, stamps


def restored_pairs(
    record_format: RecordFormat,
    records: Iterable[tuple[bytes | None, int, bytes | None]],
    *,
    expiry_cutoff_ms: int | None = None,
) -> list[tuple[bytes | None, bytes | None]]:
    """Changelog ``(key, timestamp, value)`` as the store's RocksDB entries (inverse of :func:`changelog_records`).

    ``expiry_cutoff_ms`` (``timestamped`` only: a store with a TTL): a value
    whose timestamp is at or before it has expired and becomes a delete of its
    key, not a skip, so that an older value of the key, already applied (an
    incremental restore) or earlier in the replay, perhaps with a later
    timestamp, does not come back.
    """
    pack = TIMESTAMP.pack
    if expiry_cutoff_ms is not None and record_format == "timestamped":
        return [
            (key, None if value is None or stamp <= expiry_cutoff_ms else pack(stamp) + value)
            for key, stamp, value in records
        ]
    if record_format == "versioned":
        return [
            (
                None if key is None else key + pack(stamp),
                TOMBSTONE_VERSION if value is None else VALUE_VERSION + value,
            )
            for key, stamp, value in records
        ]
    return [(key, None if value is None else pack(stamp) + value) for key, stamp, value in records]


def _versioned_changelog_records(
    records: Mapping[bytes, bytes | None],
) -> tuple[list[tuple[bytes, bytes | None]], list[int]]:
    pairs: list[tuple[bytes, bytes | None]] = []
    stamps: list[int] = []
    unpack = TIMESTAMP.unpack_from
    for key, value in records.items():
        stamps.append(unpack(key, len(key) - TIMESTAMP_BYTES)[0])
        data = None if value is None or value[:1] != VALUE_VERSION else value[1:]
        pairs.append((key[:-TIMESTAMP_BYTES], data))
    return pairs, stamps


def versioned_key(key: bytes, timestamp_ms: int) -> bytes:
    """``key | timestamp``: a versioned store's RocksDB key."""
    return key + TIMESTAMP.pack(timestamp_ms)


def key_range_upper_bound(last: bytes, max_suffix: bytes) -> bytes:
    """An exclusive bound above every ``key | suffix`` with ``key <= last`` and ``suffix <= max_suffix``.

    A key that is a proper prefix of ``last`` may sort after ``last |
    max_suffix`` (its suffix is compared with ``last``'s remaining bytes), so
    the bound is the largest ``prefix | max_suffix`` over every prefix of
    ``last`` (the empty one too), plus a zero byte.
    """
    return max(last[:end] + max_suffix for end in range(len(last) + 1)) + b"\x00"


class SuffixRoute:
    """How a segmented store in time's keys go to partitions: by the plain key, as Kafka Streams.

    Kafka Streams partitions a window, session or versioned store's changelog by
    the record's plain key (``murmur2(key bytes)``), not by the windowed, session
    or versioned key; a store of several partitions does the same, so every window
    (session, version) of a key lives in one partition.  A key shorter than the
    suffix is not a data key: it is the segmented engine's stream time
    (:data:`~statestore.stores.time.segments.STREAM_TIME_KEY`), which each
    partition keeps for its own records; read across partitions, the largest
    one is the store's (:meth:`combine`).

    Offered to :class:`~statestore.stores.partitioned.PartitionedStore` by the
    builder.  Immutable; thread-safe.
    """

    def __init__(self, suffix_bytes: int) -> None:
        """Route by the key bytes before a ``suffix_bytes`` suffix."""
        self._suffix = suffix_bytes

    def routing_key(self, key: bytes) -> bytes | None:
        """The bytes that pick ``key``'s partition (``None``: not a data key, see :meth:`combine`)."""
        if len(key) < self._suffix:
            return None
        return key[: len(key) - self._suffix]

    def combine(self, answers: Iterable[bytes | None]) -> bytes | None:
        """Every partition's stream time (8 bytes, int64 BE) -> the largest (``None``: none)."""
        times = [int(TIMESTAMP.unpack(answer)[0]) for answer in answers if answer is not None]
        return TIMESTAMP.pack(max(times)) if times else None
