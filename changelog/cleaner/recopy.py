"""Step 2 of a cleaning pass: group the segments, filter each batch, write the ``.cleaned`` copies.

See :mod:`changelog.cleaner.clean` for the pass as a whole.  Per batch the filter
decides which records stay (Kafka's ``shouldRetainRecord``); a batch that
keeps everything is copied byte for byte, one that keeps nothing is dropped
(except the last of a group), and one that keeps some is rebuilt by copying
the kept records' bytes under a new header (:func:`filtered_batch`): records
keep their offset and timestamp deltas because the batch keeps its base
offset and base timestamp, so nothing is decoded into objects or re-encoded.
Only a batch that must be stamped with a delete horizon, or becomes empty, is
re-encoded record by record.

Thread-safety: everything here is owned by one pass.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from operator import ge, itemgetter
from typing import Any, Final, Protocol, TypeVar

from changelog.cleaner.offset_map import OffsetMap, key_hashes
from changelog.cleaner.stats import CleanerStats
from changelog.errors import CleanerAbortedError, CorruptRecordError
from changelog.limits import INT32_MAX
from changelog.record.batch import (
    BatchHeader,
    Compression,
    decode_key_values,
    decode_records,
    encode_records,
)
from changelog.record.header import BATCH_HEADER_SIZE, CREATE_TIME, write_header
from changelog.record.varint import read_varint
from changelog.segment.segment import LogSegment

__all__ = [
    "Filter",
    "GroupableSegment",
    "check_abort",
    "filtered_batch",
    "group_segments_by_size",
    "min_or_none",
    "rewrite_group",
    "scan_group",
]

_OFFSET: Final = itemgetter(0)  # of an (offset, key, value) entry
_KEY: Final = itemgetter(1)
_VALUE: Final = itemgetter(2)
_CONTINUE: Final = 0x80  # varint: another byte follows
_PAYLOAD: Final = 0x7F
_BITS: Final = 7


class GroupableSegment(Protocol):
    """What grouping reads from a segment (``SourceSegment`` has it): offsets and the three file sizes."""

    @property
    def base_offset(self) -> int:
        """The segment's base offset."""

    @property
    def size_bytes(self) -> int:
        """The ``.log`` size."""

    @property
    def offset_index_bytes(self) -> int:
        """The ``.index`` size."""

    @property
    def time_index_bytes(self) -> int:
        """The ``.timeindex`` size."""


_S = TypeVar("_S", bound=GroupableSegment)


def group_segments_by_size(
    segments: Sequence[_S],
    *,
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> list[list[_S]]:
    """Kafka's ``groupSegmentsBySize``: runs of adjacent segments that fit in one segment.

    A group's ``.log`` bytes stay within ``max_size``, its index bytes within
    ``max_index_size``, and its offsets within int32 of its base offset (the
    last offset of a segment is estimated by the next segment's base - 1, or
    by ``first_uncleanable_offset - 1`` for the last one).
    """
    groups: list[list[_S]] = []
    index = 0
    while index < len(segments):
        group = [segments[index]]
        log_size = segments[index].size_bytes
        index_size = segments[index].offset_index_bytes
        time_index_size = segments[index].time_index_bytes
        index += 1
        while index < len(segments):
            candidate = segments[index]
            last = (
                segments[index + 1].base_offset - 1
                if index + 1 < len(segments)
                else first_uncleanable_offset - 1
            )
            if (
                log_size + candidate.size_bytes > max_size
                or index_size + candidate.offset_index_bytes > max_index_size
                or time_index_size + candidate.time_index_bytes > max_index_size
                or (candidate.size_bytes > 0 and last - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(candidate)
            log_size += candidate.size_bytes
            index_size += candidate.offset_index_bytes
            time_index_size += candidate.time_index_bytes
            index += 1
        groups.append(group)
    return groups


# ----------------------------------------------------------------- step 2: the record filter


class Filter:
    """The retention rule of one pass (Kafka's ``shouldRetainRecord`` and batch retention).

    Thread-safety: owned by one pass.
    """

    def __init__(
        self,
        offset_map: OffsetMap,
        *,
        end_offset: int,
        now_ms: int,
        delete_retention_ms: int,
        barrier: int | None,
        stats: CleanerStats,
    ) -> None:
        self.map = offset_map
        self.end_offset = end_offset
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.barrier = barrier
        self.stats = stats

    def retained(
        self,
        header: BatchHeader,
        entries: list[tuple[int, bytes | None, bytes | None]],
        *,
        count: bool,
    ) -> tuple[list[int], bool, int | None]:
        """``(indices of the entries to keep, a kept one is a tombstone, pending horizon)``.

        The pending horizon is the delete horizon of a kept tombstone that
        only its horizon keeps (below the end offset and the barrier): once
        it passes, the log is due again.
        """
        end = self.end_offset
        if header.base_offset >= end:  # not mapped: everything stays
            values = list(map(_VALUE, entries))
            tombstone = None in values and any(
                value is None and key is not None for _offset, key, value in entries
            )
            return list(range(len(entries))), tombstone, None
        if entries and header.last_offset < end:
            keys = list(map(_KEY, entries))
            if None not in keys and None not in map(_VALUE, entries):  # the common case
                offsets = list(map(_OFFSET, entries))
                latest = self.map.get_hashed(key_hashes(keys))
                kept = list(itertools.compress(range(len(offsets)), map(ge, offsets, latest)))
                return kept, False, None
        latest = self.map.get_batch([key if offset < end else None for offset, key, _ in entries])
        horizon = header.delete_horizon_ms
        horizon_passed = horizon is not None and self.now_ms >= horizon
        barrier = self.barrier
        keep: list[int] = []
        tombstone_kept = False
        pending: int | None = None
        for index, (offset, key, value) in enumerate(entries):
            if offset >= end:
                keep.append(index)
                tombstone_kept = tombstone_kept or (value is None and key is not None)
                continue
            if key is None:
                if count:
                    self.stats.invalid_records += 1
                continue
            if offset < latest[index]:
                continue
            if value is None:
                held = barrier is not None and offset >= barrier
                if horizon_passed and not held:
                    if count:
                        self.stats.tombstones_removed += 1
                    continue
                tombstone_kept = True
                if not held:
                    pending = (
                        horizon if horizon is not None else self.now_ms + self.delete_retention_ms
                    )
            keep.append(index)
        return keep, tombstone_kept, pending


def min_or_none(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional values (``None`` when both are)."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _is_last(reader: Any, position: int, header: BatchHeader, last_reader: Any) -> bool:
    """Whether the batch is the last one of its group (kept even when emptied)."""
    return reader is last_reader and position + header.size_in_bytes == reader.end_position


def check_abort(name: str, abort: Callable[[], bool]) -> None:
    """Raise :class:`CleanerAbortedError` when ``abort()`` says so (checked between batches)."""
    if abort():
        raise CleanerAbortedError(f"[{name}] cleaning aborted")


def scan_group(
    name: str,
    readers: Sequence[Any],
    flt: Filter,
    abort: Callable[[], bool],
    throttle: Callable[[int], None] | None,
) -> tuple[bool, int | None, int, int]:
    """``(changed, pending horizon, records, bytes)`` of a group; stops at the first change.

    Nothing counts as a change that would not remove a record or an empty
    batch or stamp a horizon: such a group is left as it is.
    """
    pending: int | None = None
    records = 0
    size = 0
    for reader in readers:
        for position, header, raw in reader.batches():
            check_abort(name, abort)
            if throttle is not None:
                throttle(len(raw))
            records += header.records_count
            size += len(raw)
            if header.is_control:
                continue
            entries = decode_key_values(raw, path=reader.path, position=position, validate=False)
            keep, tombstone_kept, candidate = flt.retained(header, entries, count=False)
            if len(keep) < len(entries):
                return True, None, 0, 0
            if not entries and not _is_last(reader, position, header, readers[-1]):
                return True, None, 0, 0
            if tombstone_kept and header.delete_horizon_ms is None:
                return True, None, 0, 0
            pending = min_or_none(pending, candidate)
    return False, pending, records, size


class Writer:
    """Buffers output batches and appends them to the ``.cleaned`` segment in large writes.

    Thread-safety: owned by one pass.
    """

    def __init__(self, segment: LogSegment, buffer_bytes: int, stats: CleanerStats) -> None:
        self.segment = segment
        self.buffer_bytes = buffer_bytes
        self.stats = stats
        self.buf = bytearray()
        self.largest_offset = -1
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1

    def add(
        self, data: bytes, records: int, last_offset: int, max_ts: int, max_ts_offset: int
    ) -> None:
        self.buf += data
        self.stats.records_written += records
        self.stats.bytes_written += len(data)
        self.largest_offset = last_offset
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = max_ts_offset
        if len(self.buf) >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.segment.append(
                bytes(self.buf),
                largest_offset=self.largest_offset,
                largest_timestamp_ms=self.max_timestamp,
                offset_of_max_timestamp=self.offset_of_max_timestamp,
            )
            self.buf.clear()
            self.max_timestamp = -1
            self.offset_of_max_timestamp = -1


def rewrite_group(
    name: str,
    readers: Sequence[Any],
    cleaned: LogSegment,
    flt: Filter,
    *,
    stats: CleanerStats,
    abort: Callable[[], bool],
    throttle: Callable[[int], None] | None,
    io_buffer_bytes: int,
) -> int | None:
    """Copy what the filter keeps from ``readers`` into ``cleaned``; return the pending horizon."""
    writer = Writer(cleaned, io_buffer_bytes, stats)
    pending: int | None = None
    for reader in readers:
        for position, header, raw in reader.batches():
            check_abort(name, abort)
            if throttle is not None:
                throttle(len(raw))
            stats.records_read += header.records_count
            stats.bytes_read += len(raw)
            if header.is_control:
                writer.add(raw, 0, header.last_offset, header.max_timestamp, header.last_offset)
                continue
            entries = decode_key_values(raw, path=reader.path, position=position, validate=False)
            keep, tombstone_kept, candidate = flt.retained(header, entries, count=True)
            pending = min_or_none(pending, candidate)
            last = _is_last(reader, position, header, readers[-1])
            stamp = tombstone_kept and header.delete_horizon_ms is None
            if len(keep) == len(entries) and not stamp and (entries or last):
                writer.add(
                    raw, len(entries), header.last_offset, header.max_timestamp, header.last_offset
                )
                stats.records_kept += len(entries)
                stats.bytes_kept += len(raw)
                continue
            if not keep and not last:
                continue
            if (
                keep
                and not stamp
                and header.timestamp_type == CREATE_TIME
                and not header.compression
            ):
                data, max_ts, max_ts_offset = filtered_batch(
                    raw, header, keep, entries, path=reader.path, position=position
                )
                writer.add(data, len(keep), header.last_offset, max_ts, max_ts_offset)
                stats.records_kept += len(keep)
                stats.bytes_kept += len(data)
                if throttle is not None:
                    throttle(len(data))
                continue
            records = decode_records(raw, path=reader.path, position=position, validate=False)
            kept = [records[index] for index in keep]
            horizon: int | None = None
            if tombstone_kept:
                horizon = header.delete_horizon_ms
                if horizon is None:
                    horizon = flt.now_ms + flt.delete_retention_ms
            data = encode_records(
                kept,
                base_offset=header.base_offset,
                last_offset_delta=header.last_offset_delta,
                delete_horizon_ms=horizon,
                max_timestamp_ms=None if kept else header.max_timestamp,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                partition_leader_epoch=header.partition_leader_epoch,
                is_transactional=header.is_transactional,
                compression=Compression(codec=header.compression),
            )
            if kept:
                newest = max(kept, key=lambda record: record.timestamp_ms)
                max_ts, max_ts_offset = newest.timestamp_ms, newest.offset
            else:
                max_ts, max_ts_offset = header.max_timestamp, header.last_offset
            writer.add(data, len(kept), header.last_offset, max_ts, max_ts_offset)
            stats.records_kept += len(kept)
            stats.bytes_kept += len(data)
            if throttle is not None:
                throttle(len(data))
    writer.flush()
    return pending


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


def filtered_batch(
    raw: bytes,
    header: BatchHeader,
    keep: Sequence[int],
    entries: Sequence[tuple[int, bytes | None, bytes | None]],
    *,
    path: Any,
    position: int,
) -> tuple[bytes, int, int]:
    """``raw`` with only the records at the indices ``keep`` (non-empty, increasing).

    Returns ``(batch bytes, max timestamp, offset of the max timestamp)``.  The
    new batch keeps every header field but the record count, the max timestamp
    (recomputed over the kept records, as Kafka's ``filterTo`` does), the
    length and the CRC; ``last_offset_delta`` is kept too, so the batch still
    ends where it ended.  Each kept record is copied with its length prefix,
    unchanged: its offset and timestamp deltas are relative to the unchanged
    base offset and base timestamp.  ``entries`` are the batch's decoded
    ``(offset, key, value)`` (the offsets of the kept records).
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
    data = write_header(
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
    return data, max_timestamp, max_offset
