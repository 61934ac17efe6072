"""Control batches: the COMMIT and ABORT markers that end a transaction in a partition.

A transaction marker is a batch of its own, written by the transaction
coordinator to every partition the transaction touched (Kafka's
``MemoryRecords.withEndTransactionMarker``): attributes bit 4 (transactional)
and bit 5 (control) set, the producer id and epoch of the transaction, base
sequence -1, and exactly one record whose key and value are Kafka's control
record schemas (``ControlRecordType``, ``EndTransactionMarker``).  The record
itself is framed like any other (see :mod:`changelog.record.body`); only its
key and value bytes are fixed-width, big-endian::

    control record key (ControlRecordType, version 0)
    offset | size | type  | field   | notes
    -------+------+-------+---------+------------------------------------------
         0 |    2 | int16 | version | 0; a reader takes a higher one as 0 (Kafka)
         2 |    2 | int16 | type    | 0 ABORT, 1 COMMIT (2-6: KRaft, not ours)

    end transaction marker value (EndTransactionMarker, version 0)
    offset | size | type  | field             | notes
    -------+------+-------+-------------------+---------------------------------
         0 |    2 | int16 | version           | 0
         2 |    4 | int32 | coordinator_epoch | the coordinator's epoch (ours: 0)

The batch header around it (61 bytes, :mod:`changelog.record.header`) has
``attributes`` = 0x30 (transactional | control), ``producer_id`` /
``producer_epoch`` of the transaction, ``base_sequence`` -1,
``last_offset_delta`` 0, ``records_count`` 1, and the marker's timestamp as
both base and max timestamp.  The CRC covers it like any batch.

A control batch the cleaner has emptied (``records_count`` 0) means the
whole transaction is gone from the log: :func:`read_marker` returns ``None``.

Nothing here is trusted without the batch CRC (checked by the batch reader
before these functions see the bytes); after a crash markers are re-read from
the ``.log`` like any batch.

Thread-safety: pure functions, thread-safe; :class:`EndTransactionMarker` is immutable.
"""

from __future__ import annotations

import enum
import struct
from pathlib import Path
from typing import Final

import attrs

from changelog.errors import CorruptRecordError, InvalidRecordError
from changelog.limits import INT16_MAX, INT32_MAX, INT64_MAX
from changelog.record.args import check_int, check_timestamp
from changelog.record.body import decode_body, encode_body
from changelog.record.header import (
    BATCH_HEADER_SIZE,
    CONTROL_FLAG_MASK,
    NO_SEQUENCE,
    PARTITION_LEADER_EPOCH,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    Buffer,
    write_header,
)

__all__ = [
    "CONTROL_KEY",
    "CONTROL_KEY_VERSION",
    "MARKER_VALUE",
    "MARKER_VALUE_VERSION",
    "ControlRecordType",
    "EndTransactionMarker",
    "encode_marker_batch",
    "read_marker",
]

CONTROL_KEY: Final = struct.Struct(
    ">"
    "h"  # version
    "h"  # type
)
"""The control record key: 4 bytes."""
MARKER_VALUE: Final = struct.Struct(
    ">"
    "h"  # version
    "i"  # coordinator_epoch
)
"""The end transaction marker value: 6 bytes."""
CONTROL_KEY_VERSION: Final = 0
MARKER_VALUE_VERSION: Final = 0
_MARKER_ATTRIBUTES: Final = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK


class ControlRecordType(enum.IntEnum):
    """Kafka's control record types that end a transaction (the only ones we write or act on)."""

    ABORT = 0
    COMMIT = 1


@attrs.frozen(kw_only=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker as read from (or written to) a control batch.

    ``offset`` is the marker's offset in the partition (``-1`` before it is
    appended).  Immutable and thread-safe.
    """

    type: ControlRecordType
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int = 0
    timestamp_ms: int = -1
    offset: int = -1

    @property
    def is_commit(self) -> bool:
        """Whether this marker commits its transaction (else it aborts it)."""
        return self.type is ControlRecordType.COMMIT


def encode_marker_batch(
    marker_type: ControlRecordType,
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    partition_leader_epoch: int = PARTITION_LEADER_EPOCH,
) -> bytes:
    """One control batch holding the marker, laid out as in the module docstring.

    Bad arguments raise :class:`InvalidRecordError` before a byte is built.
    """
    if not isinstance(marker_type, ControlRecordType):
        raise InvalidRecordError(f"marker type must be a ControlRecordType, got {marker_type!r}")
    check_int("base_offset", base_offset, 0, INT64_MAX)
    check_int("producer_id", producer_id, 0, INT64_MAX)
    check_int("producer_epoch", producer_epoch, 0, INT16_MAX)
    check_int("coordinator_epoch", coordinator_epoch, 0, INT32_MAX)
    check_int("partition_leader_epoch", partition_leader_epoch, -1, INT32_MAX)
    check_timestamp("timestamp_ms", timestamp_ms)
    key = CONTROL_KEY.pack(CONTROL_KEY_VERSION, int(marker_type))
    value = MARKER_VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)
    buf = bytearray(BATCH_HEADER_SIZE)
    encode_body([(0, 0, key, value, ())], buf)
    return bytes(
        write_header(
            buf,
            base_offset=base_offset,
            partition_leader_epoch=partition_leader_epoch,
            attributes=_MARKER_ATTRIBUTES,
            last_offset_delta=0,
            base_timestamp=timestamp_ms,
            max_timestamp=timestamp_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=NO_SEQUENCE,
            records_count=1,
        )
    )


def read_marker(
    header: BatchHeader, batch: Buffer, *, path: Path | str, position: int
) -> EndTransactionMarker | None:
    """The marker in a control batch (already CRC-checked), or ``None``.

    ``None`` for an emptied control batch (the cleaner removed its record:
    the transaction is gone) and for control types that do not end a
    transaction (KRaft's).  A control record key or value shorter than its
    schema, or a negative version, raises :class:`CorruptRecordError` naming
    ``path`` and ``position`` (Kafka's ``InvalidRecordException``).
    """
    if not header.is_control:
        raise InvalidRecordError(f"{path} at position {position}: not a control batch")
    if header.records_count == 0:
        return None
    records = decode_body(
        batch,
        BATCH_HEADER_SIZE,
        header.size_in_bytes,
        header.records_count,
        base_offset=header.base_offset,
        base_timestamp=header.base_timestamp,
        log_append_time=None,
        make=lambda offset, ts, key, value, _headers: (offset, ts, key, value),
        path=path,
        file_position=position,
    )
    offset, timestamp, key, value = records[0]
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(
            path, position, "control record key is shorter than 4 bytes", actual=key
        )
    key_version, type_id = CONTROL_KEY.unpack_from(key)
    if key_version < 0:
        raise CorruptRecordError(path, position, f"control record key version {key_version} < 0")
    if type_id not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None
    if value is None or len(value) < MARKER_VALUE.size:
        raise CorruptRecordError(
            path, position, "end transaction marker value is shorter than 6 bytes", actual=value
        )
    value_version, coordinator_epoch = MARKER_VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptRecordError(
            path, position, f"end transaction marker version {value_version} < 0"
        )
    return EndTransactionMarker(
        type=ControlRecordType(type_id),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=timestamp,
        offset=offset,
    )
