"""The transaction state record: one decision of the local coordinator, as bytes.

The coordinator's log (``<state_dir>/__transaction_state-0``, the local mirror
of Kafka's ``__transaction_state`` topic) is a compacted Kafka-format
partition whose records all have the same key, the transactional id, so the
cleaner keeps only the latest one.  The key is Kafka's own
``TransactionLogKey`` (version 0); the value is ours (Kafka's
``TransactionLogValue`` has no first offsets, and its coordinator needs none:
it writes every marker before it accepts the next transaction).  Big-endian::

    key (Kafka's TransactionLogKey, version 0)
    offset | size | type   | field            | notes
    -------+------+--------+------------------+--------------------------------------
         0 |    2 | int16  | version          | 0
         2 |    2 | int16  | id length        | bytes of the UTF-8 transactional id
         4 |    n | bytes  | transactional id | ``statestore-local``

    value (statestore's transaction state, version 100)
    offset | size | type   | field                  | notes
    -------+------+--------+------------------------+--------------------------------
         0 |    2 | int16  | version                | 100 (Kafka's values are 0-1)
         2 |    8 | int64  | producer_id            | the state directory's producer id
        10 |    2 | int16  | producer_epoch         | bumped at every open (fencing)
        12 |    1 | int8   | state                  | Kafka's TransactionState ids:
           |      |        |                        | 0 Empty, 2 PrepareCommit,
           |      |        |                        | 4 CompleteCommit
        13 |    8 | int64  | last_update_timestamp  | milliseconds since the epoch
        21 |    4 | int32  | partition count        | entries that follow
        25 |    . | entry  | partitions             | see below, sorted by (topic, partition)

    partition entry
    offset | size | type   | field        | notes
    -------+------+--------+--------------+--------------------------------------------
         0 |    2 | int16  | topic length | bytes of the UTF-8 topic
         2 |    t | bytes  | topic        | ``<store>-changelog``
       2+t |    4 | int32  | partition    |
       6+t |    8 | int64  | first_offset | first offset of the committed transaction's
           |      |        |              | data in that partition

**What the partition list means** (the one rule recovery follows): every
transaction of this state directory whose data starts at ``first_offset``
in ``topic-partition`` is *committed*, and its COMMIT marker may not be
durable there yet.  An open transaction found in a partition at open is
rolled forward (COMMIT marker) when the latest record lists it, and aborted
otherwise.  A PrepareCommit record lists the transaction it decides plus
the earlier ones still waiting; Empty (written at open, the epoch bump) and
CompleteCommit (written at a clean close) list only those still waiting.

The record is a plain non-transactional record of the coordinator's log, so
its batch CRC covers it; a value that does not parse raises
:class:`~statestore.errors.TransactionLogCorruptError` naming the offset.

Thread-safety: pure functions; :class:`TransactionStateRecord` is immutable.
"""

from __future__ import annotations

import enum
import struct
from typing import Final

import attrs

from statestore.errors import TransactionLogCorruptError

__all__ = [
    "TRANSACTIONAL_ID",
    "VALUE_VERSION",
    "TransactionState",
    "TransactionStateRecord",
    "TxnPartition",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

TRANSACTIONAL_ID: Final = "statestore-local"
"""The one transactional id of a state directory (the key of every record)."""

KEY_VERSION: Final = 0
VALUE_VERSION: Final = 100
"""Ours, kept apart from Kafka's ``TransactionLogValue`` versions (0 and 1)."""

_KEY_HEAD: Final = struct.Struct(
    ">"
    "h"  # version
    "h"  # transactional id length
)
_VALUE_HEAD: Final = struct.Struct(
    ">"
    "h"  # version
    "q"  # producer_id
    "h"  # producer_epoch
    "b"  # state
    "q"  # last_update_timestamp
    "i"  # partition count
)
_TOPIC_LENGTH: Final = struct.Struct(">h")
_PARTITION_TAIL: Final = struct.Struct(
    ">"
    "i"  # partition
    "q"  # first_offset
)


class TransactionState(enum.IntEnum):
    """The states we write, with Kafka's ``TransactionState`` ids."""

    EMPTY = 0
    PREPARE_COMMIT = 2
    COMPLETE_COMMIT = 4


@attrs.frozen(order=True)
class TxnPartition:
    """A committed transaction's data in one partition: where it starts."""

    topic: str
    partition: int
    first_offset: int


@attrs.frozen(kw_only=True)
class TransactionStateRecord:
    """One decoded value of the coordinator's log."""

    producer_id: int
    producer_epoch: int
    state: TransactionState
    last_update_timestamp_ms: int
    partitions: tuple[TxnPartition, ...]
    """Committed transactions whose COMMIT marker may be missing (see the module docstring)."""


def encode_key(transactional_id: str = TRANSACTIONAL_ID) -> bytes:
    """Kafka's ``TransactionLogKey`` v0 for ``transactional_id``."""
    data = transactional_id.encode()
    return _KEY_HEAD.pack(KEY_VERSION, len(data)) + data


def decode_key(data: bytes, *, offset: int) -> str:
    """The transactional id of a key; ``offset`` names the record in errors."""
    if len(data) < _KEY_HEAD.size:
        raise TransactionLogCorruptError(offset, f"key of {len(data)} bytes is too short")
    version, length = _KEY_HEAD.unpack_from(data)
    if version != KEY_VERSION or len(data) != _KEY_HEAD.size + length:
        raise TransactionLogCorruptError(
            offset, f"key version {version}, length {length} in {len(data)} bytes"
        )
    try:
        return data[_KEY_HEAD.size :].decode()
    except UnicodeDecodeError as exc:
        raise TransactionLogCorruptError(offset, f"key is not UTF-8: {exc}") from exc


def encode_value(record: TransactionStateRecord) -> bytes:
    """The value bytes of ``record`` (partitions written sorted)."""
    # the fields' order, as attrs orders them, without its slower generated comparisons
    parts = sorted(record.partitions, key=_sort_key)
    out = [
        _VALUE_HEAD.pack(
            VALUE_VERSION,
            record.producer_id,
            record.producer_epoch,
            int(record.state),
            record.last_update_timestamp_ms,
            len(parts),
        )
    ]
    for part in parts:
        topic = part.topic.encode()
        out.append(_TOPIC_LENGTH.pack(len(topic)))
        out.append(topic)
        out.append(_PARTITION_TAIL.pack(part.partition, part.first_offset))
    return b"".join(out)


def _sort_key(part: TxnPartition) -> tuple[str, int, int]:
    return (part.topic, part.partition, part.first_offset)


def decode_value(data: bytes, *, offset: int) -> TransactionStateRecord:
    """Parse a value; :class:`TransactionLogCorruptError` (naming ``offset``) if it does not."""
    try:
        return _decode_value(data, offset)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise TransactionLogCorruptError(offset, f"value does not parse: {exc}") from exc


def _decode_value(data: bytes, offset: int) -> TransactionStateRecord:
    version, pid, epoch, state, stamp, count = _VALUE_HEAD.unpack_from(data)
    if version != VALUE_VERSION:
        raise TransactionLogCorruptError(offset, f"value version {version}, expected 100")
    position = _VALUE_HEAD.size
    parts: list[TxnPartition] = []
    for _ in range(count):
        (length,) = _TOPIC_LENGTH.unpack_from(data, position)
        position += _TOPIC_LENGTH.size
        raw = data[position : position + length]
        if len(raw) != length:
            raise TransactionLogCorruptError(offset, "a topic runs past the value")
        position += length
        partition, first = _PARTITION_TAIL.unpack_from(data, position)
        position += _PARTITION_TAIL.size
        parts.append(TxnPartition(raw.decode(), partition, first))
    if position != len(data):
        raise TransactionLogCorruptError(
            offset, f"{len(data) - position} bytes after the last partition"
        )
    return TransactionStateRecord(
        producer_id=pid,
        producer_epoch=epoch,
        state=TransactionState(state),
        last_update_timestamp_ms=stamp,
        partitions=tuple(parts),
    )
