"""The records section of a v2 batch, in pure Python: the reference codec (private).

:mod:`changelog.record.batch` owns the batch header and the public API; this
module only walks the records that follow the 61-byte header.  It is the spec
the compiled fast path (aiokafka) is cross-checked against, and the fallback
when that extension is not available.

One record (all varints are zig-zag, see :mod:`changelog.record.varint`)::

    field            type       notes
    length           varint     bytes from ``attributes`` to the end of the record
    attributes       int8       unused by Kafka, always 0
    timestamp_delta  varlong    record timestamp - batch base_timestamp
    offset_delta     varint     record offset - batch base_offset
    key_length       varint     -1 = null key
    key              bytes
    value_length     varint     -1 = null value (a tombstone)
    value            bytes
    header_count     varint     >= 0
    headers          [header_key_length varint (>= 0), header_key utf-8,
                      header_value_length varint (-1 = null), header_value]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, TypeVar

import attrs

from changelog.errors import CorruptRecordError
from changelog.record.header import Buffer
from changelog.record.varint import read_varint, write_varint

__all__ = ["Headers", "Record", "decode_body", "encode_body"]

Headers = tuple[tuple[str, bytes | None], ...]
"""Record headers: ``(key, value)`` pairs, the value possibly null."""

T = TypeVar("T")


@attrs.frozen(slots=True)
class Record:
    """One record as read back from the log: its offset, timestamp, key, value and headers.

    A ``value`` of ``None`` is a tombstone.  Immutable and thread-safe.
    """

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


_NULL: Final = -1
_RECORD_ATTRIBUTES: Final = 0


def encode_body(
    entries: Iterable[tuple[int, int, bytes | None, bytes | None, Headers]],
    out: bytearray,
) -> None:
    """Append one framed record per ``(offset_delta, timestamp_delta, key, value, headers)``.

    The caller has validated types and ranges; this only lays bytes down.
    """
    for offset_delta, timestamp_delta, key, value, headers in entries:
        record = bytearray(b"\x00")  # attributes: unused, 0
        write_varint(timestamp_delta, record)
        write_varint(offset_delta, record)
        _write_nullable(key, record)
        _write_nullable(value, record)
        write_varint(len(headers), record)
        for header_key, header_value in headers:
            raw_key = header_key.encode("utf-8")
            write_varint(len(raw_key), record)
            record += raw_key
            _write_nullable(header_value, record)
        write_varint(len(record), out)
        out += record


def _write_nullable(data: bytes | None, out: bytearray) -> None:
    if data is None:
        write_varint(_NULL, out)
    else:
        write_varint(len(data), out)
        out += data


def decode_body(
    buf: Buffer,
    start: int,
    end: int,
    count: int,
    *,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    make: Callable[[int, int, bytes | None, bytes | None, Headers], T],
    path: Path | str,
    file_position: int,
) -> list[T]:
    """Decode ``count`` records from ``buf[start:end]`` with ``make(offset, ts, key, value, headers)``.

    ``log_append_time`` is the batch's max timestamp when the batch uses
    LogAppendTime (every record then carries it, as in Kafka), else ``None``.
    Framing errors raise :class:`CorruptRecordError` at ``file_position`` plus
    the record's position inside ``buf``; bytes left over after ``count``
    records are an error too.
    """
    records: list[T] = []
    position = start
    record_start = start
    try:
        for _ in range(count):
            record_start = position
            offset_delta, timestamp_delta, key, value, headers, position = _read_record(
                buf, position, end
            )
            timestamp = (
                base_timestamp + timestamp_delta if log_append_time is None else log_append_time
            )
            records.append(make(base_offset + offset_delta, timestamp, key, value, headers))
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(
            path, file_position + record_start, f"malformed record: {exc}"
        ) from exc
    if position != end:
        raise CorruptRecordError(
            path,
            file_position + position,
            f"{end - position} bytes left over after the batch's {count} records",
        )
    return records


def _read_record(
    buf: Buffer, position: int, end: int
) -> tuple[int, int, bytes | None, bytes | None, Headers, int]:
    """One record at ``position``: its fields and the position after it (ValueError if bad)."""
    length, position = read_varint(buf, position)
    body_start = position
    if length < 0 or body_start + length > end:
        raise ValueError(f"record length {length} overruns the batch")
    position += 1  # attributes
    timestamp_delta, position = read_varint(buf, position)
    offset_delta, position = read_varint(buf, position)
    key, position = _read_nullable(buf, position, end)
    value, position = _read_nullable(buf, position, end)
    header_count, position = read_varint(buf, position)
    if header_count < 0:
        raise ValueError(f"negative header count {header_count}")
    headers: Headers = ()
    if header_count:
        headers, position = _read_headers(buf, position, end, header_count)
    if position - body_start != length:
        raise ValueError(
            f"record length says {length} bytes but its fields take {position - body_start}"
        )
    return offset_delta, timestamp_delta, key, value, headers, position


def _read_nullable(buf: Buffer, position: int, end: int) -> tuple[bytes | None, int]:
    length, position = read_varint(buf, position)
    if length < 0:
        if length != _NULL:
            raise ValueError(f"negative length {length}")
        return None, position
    stop = position + length
    if stop > end:
        raise ValueError(f"field of {length} bytes overruns the batch")
    return bytes(buf[position:stop]), stop


def _read_headers(buf: Buffer, position: int, end: int, count: int) -> tuple[Headers, int]:
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        key_length, position = read_varint(buf, position)
        if key_length < 0:
            raise ValueError(f"header key length {key_length} (a header key cannot be null)")
        stop = position + key_length
        if stop > end:
            raise ValueError("header key overruns the batch")
        key = bytes(buf[position:stop]).decode("utf-8")  # UnicodeDecodeError is a ValueError
        value, position = _read_nullable(buf, stop, end)
        headers.append((key, value))
    return tuple(headers), position
