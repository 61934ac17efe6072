"""Filtering one record batch: Kafka's ``MemoryRecords.filterTo``, for the log cleaner.

A caller (the cleaner) says, through a :class:`RecordFilter`, what happens
to a batch as a whole (:class:`BatchRetention`, Kafka's
``checkBatchRetention``) and which of its records stay (Kafka's
``shouldRetainRecord``, asked for the whole batch at once because a Python
call per record is too slow).  :func:`filter_batch` then produces the batch's
replacement, as ``filterTo`` does:

====================================  ==========================================================
what the filter decided               what is written
====================================  ==========================================================
``DELETE``                            nothing (the records are not even decoded)
every record stays, no new horizon    the batch's bytes, copied byte for byte (any codec)
some records stay                     the batch rebuilt in its own codec (default level), with
                                      its base offset, last offset, producer fields, leader
                                      epoch, timestamp type and flags; its max timestamp is that
                                      of the kept records.  An uncompressed CreateTime batch
                                      without a new horizon is rebuilt by copying the kept
                                      records' bytes under a new header (their deltas are
                                      relative to the unchanged base offset and timestamp)
a kept tombstone (or a marker the     rebuilt with the KIP-534 delete horizon
filter flags) and no horizon yet      ``now_ms + delete_retention_ms`` (attribute bit 6)
no record stays, ``RETAIN_EMPTY``     an empty batch: Kafka's ``writeEmptyHeader`` (61 bytes,
                                      uncompressed, same offsets, producer fields and flags,
                                      base and max timestamp = the old max timestamp)
no record stays, ``DELETE_EMPTY``     nothing
====================================  ==========================================================

The cleaner decides ``RETAIN_EMPTY`` for the last batch of a cleaning round
(``next_offset == first uncleanable offset``) and for batches that hold
producer state; everything else that empties disappears, so emptied segments
shrink to nothing and merge with their neighbours in later rounds, as in Kafka.

Thread-safety: pure functions over immutable inputs; a :class:`RecordFilter`
is called from the thread running :func:`filter_batch`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Protocol

import attrs

from changelog.errors import CorruptRecordError
from changelog.record.batch import (
    CREATE_TIME,
    BatchHeader,
    decode_key_values,
    decode_records,
    encode_records,
    uncompressed_batch,
)
from changelog.record.compression import NONE, Compression
from changelog.record.header import BATCH_HEADER_SIZE, write_header
from changelog.record.varint import read_varint

__all__ = [
    "BatchRetention",
    "Entry",
    "FilteredBatch",
    "RecordFilter",
    "Retained",
    "empty_batch",
    "filter_batch",
]

Entry = tuple[int, bytes | None, bytes | None]
"""``(offset, key, value)`` of one record, what a filter decides on (``value`` None: tombstone)."""

_CONTINUE: Final = 0x80  # varint: another byte follows
_PAYLOAD: Final = 0x7F
_BITS: Final = 7
_ATTRIBUTES_KEPT_WHEN_EMPTY: Final = 0x08 | 0x10 | 0x20  # timestamp type, transactional, control


class BatchRetention(enum.Enum):
    """What becomes of a batch as a whole (Kafka's ``RecordFilter.BatchRetention``)."""

    DELETE = "delete"
    """Drop the batch without looking at its records."""
    RETAIN_EMPTY = "retain_empty"
    """Keep the batch even when no record stays (its offsets and producer state survive)."""
    DELETE_EMPTY = "delete_empty"
    """Drop the batch if no record stays."""


@attrs.frozen(slots=True)
class Retained:
    """A filter's verdict on the records of one batch.

    ``keep`` are the indices (increasing) of the records that stay.
    ``needs_horizon`` says the batch must carry a delete horizon (it keeps a
    tombstone, or a marker whose transaction emptied); :func:`filter_batch`
    stamps ``now_ms + delete_retention_ms`` when the batch has none yet.
    """

    keep: Sequence[int]
    needs_horizon: bool = False


class RecordFilter(Protocol):
    """The cleaner's side of :func:`filter_batch` (Kafka's ``MemoryRecords.RecordFilter``).

    ``batch_retention`` is asked first; unless it says ``DELETE``,
    ``retain`` gets the batch's decoded ``(offset, key, value)`` entries.
    Both are called in log order, once per batch, from one thread.
    """

    @property
    def now_ms(self) -> int:
        """The pass's clock: a new delete horizon is ``now_ms + delete_retention_ms``."""

    @property
    def delete_retention_ms(self) -> int:
        """``delete.retention.ms`` of the log."""

    def batch_retention(self, header: BatchHeader) -> BatchRetention:
        """What becomes of the batch as a whole."""

    def retain(self, header: BatchHeader, entries: list[Entry]) -> Retained:
        """Which records of the batch stay."""


@attrs.frozen(slots=True)
class FilteredBatch:
    """The result of filtering one batch.

    ``data`` is what replaces the batch (``b""``: nothing, it is dropped);
    ``copied`` says ``data`` is the original bytes.  ``records_kept``,
    ``max_timestamp`` and ``offset_of_max_timestamp`` describe ``data`` (for
    the segment's time index); ``last_offset`` is the batch's, kept even when
    emptied.
    """

    data: bytes
    copied: bool
    records_read: int
    records_kept: int
    max_timestamp: int
    offset_of_max_timestamp: int
    last_offset: int


def empty_batch(header: BatchHeader) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader`` for the batch ``header`` describes."""
    return bytes(
        write_header(
            bytearray(BATCH_HEADER_SIZE),
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            attributes=header.attributes & _ATTRIBUTES_KEPT_WHEN_EMPTY,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=header.max_timestamp,
            max_timestamp=header.max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            records_count=0,
        )
    )


def filter_batch(
    raw: bytes,
    header: BatchHeader,
    record_filter: RecordFilter,
    *,
    path: Path | str,
    position: int,
    build: bool = True,
) -> FilteredBatch:
    """Filter the whole batch ``raw`` (its CRC already checked) as the module docstring says.

    ``path`` and ``position`` name the batch in errors.  With ``build=False``
    nothing is encoded: ``data`` is ``raw`` when the batch would be copied,
    else ``b""``, and the counts are those the built result would have; the
    cleaner uses it to find groups that would not change.
    """
    retention = record_filter.batch_retention(header)
    if retention is BatchRetention.DELETE:
        return FilteredBatch(b"", False, header.records_count, 0, -1, -1, header.last_offset)
    plain = uncompressed_batch(raw, header, path=path, position=position)
    entries = decode_key_values(plain, path=path, position=position, validate=False)
    retained = record_filter.retain(header, entries)
    keep = retained.keep
    stamp = retained.needs_horizon and header.delete_horizon_ms is None
    if (
        len(keep) == len(entries)
        and not stamp
        and (entries or retention is BatchRetention.RETAIN_EMPTY)
    ):
        return FilteredBatch(
            raw,
            True,
            len(entries),
            len(entries),
            header.max_timestamp,
            header.last_offset,
            header.last_offset,
        )
    if not keep:
        if retention is not BatchRetention.RETAIN_EMPTY:
            return FilteredBatch(b"", False, len(entries), 0, -1, -1, header.last_offset)
        data = empty_batch(header) if build else b""
        return FilteredBatch(
            data,
            False,
            len(entries),
            0,
            header.max_timestamp,
            header.last_offset,
            header.last_offset,
        )
    if not build:
        return FilteredBatch(b"", False, len(entries), len(keep), -1, -1, header.last_offset)
    if not stamp and header.compression == NONE and header.timestamp_type == CREATE_TIME:
        data, max_ts, max_ts_offset = _copy_kept(
            raw, header, keep, entries, path=path, position=position
        )
        return FilteredBatch(
            data, False, len(entries), len(keep), max_ts, max_ts_offset, header.last_offset
        )
    records = decode_records(plain, path=path, position=position, validate=False)
    kept = [records[index] for index in keep]
    horizon = header.delete_horizon_ms
    if stamp:
        horizon = record_filter.now_ms + record_filter.delete_retention_ms
    data = encode_records(
        kept,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        delete_horizon_ms=horizon,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        timestamp_type=header.timestamp_type,
        compression=Compression(codec=header.compression),
    )
    newest = max(kept, key=lambda record: record.timestamp_ms)
    return FilteredBatch(
        data, False, len(entries), len(kept), newest.timestamp_ms, newest.offset, header.last_offset
    )


def _varlong(raw: bytes, position: int) -> tuple[int, int]:
    """A zig-zag varint at ``position``: ``(value, next position)``; one or two bytes inline."""
    first = raw[position]
    if first < _CONTINUE:
        return (first >> 1) ^ -(first & 1), position + 1
    second = raw[position + 1]
    if second < _CONTINUE:
        zigzag = (first & _PAYLOAD) | (second << _BITS)
        return (zigzag >> 1) ^ -(zigzag & 1), position + 2
    return read_varint(raw, position)


def _copy_kept(
    raw: bytes,
    header: BatchHeader,
    keep: Sequence[int],
    entries: Sequence[Entry],
    *,
    path: Path | str,
    position: int,
) -> tuple[bytes, int, int]:
    """``raw`` (uncompressed) with only the records at the indices ``keep`` (non-empty, increasing).

    Returns ``(batch bytes, max timestamp, offset of the max timestamp)``.
    Every header field is kept but the record count, the max timestamp (over
    the kept records, as ``filterTo``), the length and the CRC.  Each kept
    record is copied with its length prefix, unchanged: its offset and
    timestamp deltas are relative to the unchanged base offset and timestamp.
    """
    wanted = [False] * header.records_count
    for index in keep:
        wanted[index] = True
    parts = [bytes(BATCH_HEADER_SIZE)]
    append = parts.append
    cursor = BATCH_HEADER_SIZE
    max_delta: int | None = None
    max_offset = -1
    for index, keep_it in enumerate(wanted):
        first = raw[cursor]  # the record's length: one or two bytes for records under 8 KiB
        if first < _CONTINUE:
            length, body = (first >> 1) ^ -(first & 1), cursor + 1
        elif raw[cursor + 1] < _CONTINUE:
            zigzag = (first & _PAYLOAD) | (raw[cursor + 1] << _BITS)
            length, body = (zigzag >> 1) ^ -(zigzag & 1), cursor + 2
        else:
            length, body = read_varint(raw, cursor)
        end = body + length
        if keep_it:
            append(raw[cursor:end])
            delta = raw[body + 1]  # the timestamp delta, after the attributes byte
            if delta:  # zero (one byte) when the batch's records share a timestamp
                delta, _ = _varlong(raw, body + 1)
            if max_delta is None or delta > max_delta:
                max_delta, max_offset = delta, entries[index][0]
        cursor = end
    if cursor != len(raw) or max_delta is None:
        raise CorruptRecordError(path, position, "record lengths do not add up to the batch length")
    max_timestamp = header.base_timestamp + max_delta
    data = bytes(
        write_header(
            bytearray(b"".join(parts)),
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            attributes=header.attributes,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=header.base_timestamp,
            max_timestamp=max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            records_count=len(keep),
        )
    )
    return data, max_timestamp, max_offset
