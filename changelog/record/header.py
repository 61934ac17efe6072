"""The header of a Kafka record batch v2 (magic 2), and the framing of batches in a buffer.

Private helper of :mod:`changelog.record.batch`, which re-exports the public names.

A segment's ``.log`` file is a plain concatenation of batches, each laid out
exactly as Kafka's ``DefaultRecordBatch`` writes it.  All integers in the
header are big-endian; the records after it use zig-zag varints (see
:mod:`changelog.record.body` for one record's layout)::

    offset | size | type   | field                  | notes
    -------+------+--------+------------------------+-----------------------------------------
         0 |    8 | int64  | base_offset            | offset of the first record; not in the CRC
         8 |    4 | int32  | batch_length           | bytes after this field (size - 12)
        12 |    4 | int32  | partition_leader_epoch | not in the CRC; we write 0 (see below)
        16 |    1 | int8   | magic                  | 2; 0 and 1 are the legacy message sets
        17 |    4 | uint32 | crc                    | CRC-32C (Castagnoli) of bytes 21..end
        21 |    2 | int16  | attributes             | bits 0-2 compression codec (0 none,
           |      |        |                        | 1 gzip, 2 snappy, 3 lz4, 4 zstd: see
           |      |        |                        | changelog.record.compression),
           |      |        |                        | 3 timestamp type (0 CreateTime, 1 LogAppendTime),
           |      |        |                        | 4 transactional, 5 control,
           |      |        |                        | 6 delete horizon set (KIP-534)
        23 |    4 | int32  | last_offset_delta      | last offset - base offset (kept when the
           |      |        |                        | cleaner empties the batch)
        27 |    8 | int64  | base_timestamp         | first record's timestamp, or the delete
           |      |        |                        | horizon when attribute bit 6 is set
        35 |    8 | int64  | max_timestamp          | largest record timestamp (-1: none)
        43 |    8 | int64  | producer_id            | -1: not idempotent
        51 |    2 | int16  | producer_epoch         | -1
        53 |    4 | int32  | base_sequence          | -1
        57 |    4 | int32  | records_count          | number of records that follow
        61 |    - | -      | records                | ``records_count`` varint-framed records,
           |      |        |                        | as one compressed stream when the codec
           |      |        |                        | is not 0 (the CRC covers the compressed
           |      |        |                        | bytes)

The CRC covers ``attributes`` through the end of the batch, so the base offset
and the partition leader epoch can be assigned (patched) without recomputing
it, which is what a broker does and what the fast encode path does.

Partition leader epoch: a producer sends -1 and the broker's leader stamps its
epoch on every batch it appends (``LogValidator``); the first leader epoch of
a freshly created partition is 0.  We write 0, so our batches look like those
of a new topic's first leader, and Kafka's recovery puts one entry (epoch 0 at
the first offset) into its leader-epoch cache.

Nothing in this module touches files; reading batches back (framing, CRC and
the order of the checks) is :mod:`changelog.record.reader`.  After a crash the
``.log`` is the only thing trusted, and only batch by batch with CRC
validation; the indexes are rebuilt from it.

Thread-safety: every function is pure and thread-safe; :class:`BatchHeader` is immutable.
"""

from __future__ import annotations

import mmap
import struct
from typing import Final

import attrs
import crc32c

__all__ = [
    "BATCH_HEADER_SIZE",
    "COMPRESSION_CODEC_MASK",
    "CONTROL_FLAG_MASK",
    "CREATE_TIME",
    "DELETE_HORIZON_FLAG_MASK",
    "HEADER",
    "HEADER_FIELDS",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "PARTITION_LEADER_EPOCH",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG_MASK",
    "BatchHeader",
    "Buffer",
    "field_offset",
    "field_struct",
    "patch_header",
    "write_header",
]

# --------------------------------------------------------------------------- header layout

Buffer = bytes | bytearray | memoryview | mmap.mmap
"""What the readers accept: bytes, or a view of a file (``mmap``) or of a larger buffer."""

HEADER_FIELDS: Final = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("partition_leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("records_count", "i"),
)
HEADER: Final = struct.Struct(">" + "".join(code for _, code in HEADER_FIELDS))


def field_offset(name: str) -> int:
    codes = ""
    for field, code in HEADER_FIELDS:
        if field == name:
            return struct.calcsize(">" + codes)
        codes += code
    raise KeyError(name)


def field_struct(name: str) -> struct.Struct:
    return struct.Struct(">" + dict(HEADER_FIELDS)[name])


BATCH_HEADER_SIZE: Final = HEADER.size
"""61: the fixed header in front of the records (Kafka's ``RECORD_BATCH_OVERHEAD``)."""
LOG_OVERHEAD: Final = field_offset("partition_leader_epoch")
"""12: base offset + batch length, the bytes ``batch_length`` does not count."""
_LEADER_EPOCH_OFFSET: Final = field_offset("partition_leader_epoch")
_MAGIC_OFFSET: Final = field_offset("magic")
_CRC_OFFSET: Final = field_offset("crc")
_ATTRIBUTES_OFFSET: Final = field_offset("attributes")
_LAST_OFFSET_DELTA_OFFSET: Final = field_offset("last_offset_delta")
_HEADER_SIZE_UP_TO_MAGIC: Final = _MAGIC_OFFSET + 1
_PREFIX: Final = struct.Struct(">" + "".join(code for _, code in HEADER_FIELDS[:4]))
_BASE_OFFSET: Final = field_struct("base_offset")
_LEADER_EPOCH: Final = field_struct("partition_leader_epoch")
_CRC: Final = field_struct("crc")
_LAST_OFFSET_DELTA: Final = field_struct("last_offset_delta")

MAGIC: Final = 2
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
PARTITION_LEADER_EPOCH: Final = 0
"""What we write: the leader epoch of a freshly created partition (see the module docstring)."""
CREATE_TIME: Final = 0
LOG_APPEND_TIME: Final = 1

COMPRESSION_CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_FLAG_MASK: Final = 0x10
CONTROL_FLAG_MASK: Final = 0x20
DELETE_HORIZON_FLAG_MASK: Final = 0x40

_INT16_MAX: Final = 2**15 - 1


@attrs.frozen(slots=True)
class BatchHeader:
    """The 61 header bytes of one batch, decoded (field order as on disk).

    Invariants (checked by :func:`decode_header` for anything read from disk):
    ``magic == 2``; ``batch_length >= 49``; ``last_offset_delta >= 0``;
    ``records_count >= 0``.  Immutable and thread-safe.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_in_bytes(self) -> int:
        """Bytes the batch takes in the file: ``batch_length + LOG_OVERHEAD``."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        """Offset of the last record the batch was written with (kept after cleaning)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """``last_offset + 1``: where the next batch's offsets start."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """Compression codec id (attribute bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """:data:`CREATE_TIME` (0) or :data:`LOG_APPEND_TIME` (1), attribute bit 3."""
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        """Attribute bit 4."""
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        """Attribute bit 5: a transaction marker batch, not application data."""
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """Attribute bit 6 (KIP-534): ``base_timestamp`` holds the delete horizon."""
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The time after which the cleaner may drop this batch's tombstones, or ``None``."""
        return self.base_timestamp if self.has_delete_horizon else None


# --------------------------------------------------------------------------- writing


def write_header(
    buf: bytearray,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytearray:
    """Write the header into the first 61 bytes of ``buf`` (the records follow), CRC last; ``buf``.

    Returns ``buf`` itself, not a copy: a caller that keeps the batch takes
    ``bytes(buf)`` once.  (Each copy of a 130 KB batch cost 20-40 us here, page
    faults included, when it was made on every call; issue 14 part 7.)
    """
    HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    _CRC.pack_into(buf, _CRC_OFFSET, crc32c.crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
    return buf


def patch_header(
    buf: bytearray,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    last_offset_delta: int | None = None,
) -> None:
    """Assign the base offset and leader epoch of a built batch, as a broker does.

    Neither field is covered by the CRC.  ``last_offset_delta`` is, so the CRC
    is recomputed when it changes.
    """
    _BASE_OFFSET.pack_into(buf, 0, base_offset)
    _LEADER_EPOCH.pack_into(buf, _LEADER_EPOCH_OFFSET, partition_leader_epoch)
    if last_offset_delta is None:
        return
    if _LAST_OFFSET_DELTA.unpack_from(buf, _LAST_OFFSET_DELTA_OFFSET)[0] != last_offset_delta:
        _LAST_OFFSET_DELTA.pack_into(buf, _LAST_OFFSET_DELTA_OFFSET, last_offset_delta)
        _CRC.pack_into(buf, _CRC_OFFSET, crc32c.crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
