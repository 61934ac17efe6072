"""Step 2 of a cleaning pass: group the segments, filter each batch, write the ``.cleaned`` copies.

See :mod:`changelog.cleaner.clean` for the pass as a whole.  The cleaner does
not parse records: per batch, :class:`Filter` (Kafka's ``LogCleaner``
``RecordFilter``) tells the codec's :func:`changelog.record.filter.filter_batch`
(Kafka's ``MemoryRecords.filterTo``) what stays, and the codec copies the
batch byte for byte when it loses nothing, rebuilds it in its own codec when
it loses some, and writes or drops it when it loses everything.  Kafka's
empty-batch rule: an emptied batch stays (empty) only when it is the last
batch of the cleaning round (``next_offset`` == the first uncleanable
offset), so the log end offset survives a reload; every other emptied batch
goes, so emptied segments shrink to nothing and merge with their neighbours
in later passes.  (Kafka also keeps the last batch of an active idempotent
producer; we keep no producer state, see ``docs/kafka-compatibility.md``.)

Thread-safety: everything here is owned by one pass.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from operator import ge, itemgetter
from typing import Any, Final, Protocol, TypeVar

from changelog.cleaner.offset_map import OffsetMap, key_hashes
from changelog.cleaner.stats import CleanerStats
from changelog.cleaner.transactions import (
    CleanedTransactionMetadata,
    MarkerOutcome,
    control_batch_outcome,
    rewrite_control_batch,
)
from changelog.errors import CleanerAbortedError
from changelog.limits import INT32_MAX
from changelog.record.batch import BatchHeader
from changelog.record.filter import BatchRetention, Entry, FilteredBatch, Retained, filter_batch
from changelog.segment.segment import LogSegment

__all__ = [
    "Filter",
    "GroupableSegment",
    "check_abort",
    "group_segments_by_size",
    "min_or_none",
    "rewrite_group",
    "scan_group",
]

_OFFSET: Final = itemgetter(0)  # of an (offset, key, value) entry
_KEY: Final = itemgetter(1)
_VALUE: Final = itemgetter(2)


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
    """The retention rule of one pass: Kafka's ``shouldRetainRecord`` and batch retention.

    A :class:`changelog.record.filter.RecordFilter`.  Records below the end
    offset stay only when they are the latest of their key in the offset
    map; a tombstone that is the latest goes once its batch's delete horizon
    has passed, unless it lies at or above the cleaning barrier.  An emptied
    batch stays only when it ends the round (``next_offset ==
    upper_bound_offset``, the first uncleanable offset).  ``pending`` collects
    the delete horizon of kept tombstones that only their horizon keeps
    (below the end offset and the barrier): once it passes, the log is due
    again.  ``counting`` says whether stats are counted (off while a group is
    only scanned).

    Expiry (``expiry_cutoff_ms`` not ``None``: the log has ``record_ttl_ms``):
    a data batch whose max timestamp is at or before the cutoff holds only
    expired records, and its data records below the end offset and below the
    barrier go, as shadowed ones do (older records of their keys are then
    shadowed by them, so a key that only expired loses all its records); its
    tombstones keep their own rule.  Records at or above the barrier stay: an
    incremental restore starts there, and without them an older record that
    RocksDB holds, perhaps with a later timestamp, would come back.  A data
    batch kept only because it has not expired yet adds its expiry time to
    ``pending``.

    Thread-safety: owned by one pass.
    """

    def __init__(
        self,
        offset_map: OffsetMap,
        *,
        end_offset: int,
        upper_bound_offset: int,
        now_ms: int,
        delete_retention_ms: int,
        barrier: int | None,
        stats: CleanerStats,
        txn: CleanedTransactionMetadata | None = None,
        expiry_cutoff_ms: int | None = None,
    ) -> None:
        self.map = offset_map
        self.expiry_cutoff_ms = expiry_cutoff_ms
        self.record_ttl_ms = 0 if expiry_cutoff_ms is None else now_ms - expiry_cutoff_ms
        self.txn = txn if txn is not None else CleanedTransactionMetadata()
        """The transactions the pass is inside (:mod:`changelog.cleaner.transactions`)."""
        self._discard = False
        self.end_offset = end_offset
        self.upper_bound_offset = upper_bound_offset
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.barrier = barrier
        self.stats = stats
        self.counting = True
        self.pending: int | None = None

    def batch_retention(self, header: BatchHeader) -> BatchRetention:
        """Kafka's ``checkBatchRetention``: keep an emptied batch only at the end of the round;
        a batch of an aborted transaction loses every record (``self.txn``, rule 1)."""
        self._discard = header.is_transactional and self.txn.on_data_batch(header)
        if header.next_offset == self.upper_bound_offset:
            return BatchRetention.RETAIN_EMPTY
        return BatchRetention.DELETE if self._discard else BatchRetention.DELETE_EMPTY

    def retain(self, header: BatchHeader, entries: list[Entry]) -> Retained:
        """Which entries stay (see the class docstring); a kept tombstone needs a horizon.

        A kept record of a transactional batch tells ``self.txn`` that its transaction
        keeps data (its marker stays, rule 4 of :mod:`changelog.cleaner.transactions`)."""
        retained = self._retain(header, entries)
        if header.is_transactional and retained.keep:
            self.txn.on_data_retained(header.producer_id)
        return retained

    def _retain(self, header: BatchHeader, entries: list[Entry]) -> Retained:
        if self._discard:  # aborted, kept only as an empty batch ending the round
            return Retained(())
        retained = self._retain_by_key(header, entries)
        cutoff = self.expiry_cutoff_ms
        if cutoff is None or not retained.keep:
            return retained
        return self._expire(header, entries, retained, cutoff)

    def _retain_by_key(self, header: BatchHeader, entries: list[Entry]) -> Retained:
        end = self.end_offset
        if header.base_offset >= end:  # not mapped: everything stays
            tombstone = None in map(_VALUE, entries) and any(
                value is None and key is not None for _offset, key, value in entries
            )
            return Retained(range(len(entries)), tombstone)
        if entries and header.last_offset < end:
            keys = list(map(_KEY, entries))
            if None not in keys and None not in map(_VALUE, entries):  # the common case
                offsets = list(map(_OFFSET, entries))
                latest = self.map.get_hashed(key_hashes(keys))
                return Retained(
                    list(itertools.compress(range(len(offsets)), map(ge, offsets, latest)))
                )
        latest = self.map.get_batch([key if offset < end else None for offset, key, _ in entries])
        horizon = header.delete_horizon_ms
        horizon_passed = horizon is not None and self.now_ms >= horizon
        barrier = self.barrier
        count = self.counting
        keep: list[int] = []
        tombstone_kept = False
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
                    self.pending = min_or_none(
                        self.pending,
                        horizon if horizon is not None else self.now_ms + self.delete_retention_ms,
                    )
            keep.append(index)
        return Retained(keep, tombstone_kept)

    def _expire(
        self, header: BatchHeader, entries: list[Entry], retained: Retained, cutoff: int
    ) -> Retained:
        """``retained`` less the expired records (class docstring, "Expiry")."""
        barrier = self.barrier
        end = self.end_offset
        if header.max_timestamp > cutoff:  # not expired yet: due again when it is
            if header.base_offset < end and (barrier is None or header.base_offset < barrier):
                self.pending = min_or_none(self.pending, header.max_timestamp + self.record_ttl_ms)
            return retained
        keep: list[int] = []
        expired = 0
        for index in retained.keep:
            offset, _key, value = entries[index]
            if value is not None and offset < end and (barrier is None or offset < barrier):
                expired += 1
                continue
            keep.append(index)
        if self.counting:
            self.stats.expired_records_removed += expired
        return Retained(keep, retained.needs_horizon)  # every kept tombstone is still there


def min_or_none(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional values (``None`` when both are)."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


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

    A group changes when some batch would not be copied byte for byte
    (:func:`~changelog.record.filter.filter_batch` without building): such a
    group is rewritten, any other is left as it is.
    """
    flt.counting = False
    flt.pending = None
    records = 0
    size = 0
    try:
        for reader in readers:
            for position, header, raw in reader.batches():
                check_abort(name, abort)
                if throttle is not None:
                    throttle(len(raw))
                records += header.records_count
                size += len(raw)
                if header.is_control:
                    outcome = control_batch_outcome(
                        flt.txn, header, raw, now_ms=flt.now_ms, path=reader.path, position=position
                    )
                    if outcome is not MarkerOutcome.COPY:
                        return True, None, 0, 0
                    flt.pending = min_or_none(flt.pending, _marker_horizon(flt, header))
                    continue
                result = filter_batch(
                    raw, header, flt, path=reader.path, position=position, build=False
                )
                if not result.copied:
                    return True, None, 0, 0
        return False, flt.pending, records, size
    finally:
        flt.counting = True


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


def _add(writer: Writer, result: FilteredBatch, stats: CleanerStats) -> None:
    if not result.data:
        return
    writer.add(
        result.data,
        result.records_kept,
        result.last_offset,
        result.max_timestamp,
        result.offset_of_max_timestamp,
    )
    stats.records_kept += result.records_kept
    stats.bytes_kept += len(result.data)


def _marker_horizon(flt: Filter, header: BatchHeader) -> int | None:
    """When a marker the pass keeps as it is lets the log be due again: its stamped
    horizon, or now when the pass freed it (rule 4 of :mod:`changelog.cleaner.transactions`)."""
    if flt.txn.freed and header.delete_horizon_ms is None:
        return flt.now_ms
    return header.delete_horizon_ms


def _rewrite_control(
    flt: Filter, writer: Writer, reader: Any, position: int, header: BatchHeader, *, raw: bytes
) -> None:
    """A control batch in :func:`rewrite_group`: Kafka's marker rules
    (:mod:`changelog.cleaner.transactions`), an emptied batch kept only at the end of the round."""
    outcome = control_batch_outcome(
        flt.txn, header, raw, now_ms=flt.now_ms, path=reader.path, position=position
    )
    if outcome is MarkerOutcome.COPY:
        writer.add(raw, 0, header.last_offset, header.max_timestamp, header.last_offset)
        flt.pending = min_or_none(flt.pending, _marker_horizon(flt, header))
        return
    if outcome is MarkerOutcome.DROP and header.next_offset != flt.upper_bound_offset:
        return
    horizon = flt.now_ms + flt.delete_retention_ms
    data = rewrite_control_batch(
        header,
        raw,
        delete_horizon_ms=horizon,
        keep_record=outcome is MarkerOutcome.STAMP,
        path=reader.path,
        position=position,
    )
    writer.add(data, 0, header.last_offset, header.max_timestamp, header.last_offset)
    if outcome is MarkerOutcome.STAMP:
        flt.pending = min_or_none(flt.pending, horizon)


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
    flt.pending = None
    for reader in readers:
        for position, header, raw in reader.batches():
            check_abort(name, abort)
            if throttle is not None:
                throttle(len(raw))
            stats.records_read += header.records_count
            stats.bytes_read += len(raw)
            if header.is_control:
                _rewrite_control(flt, writer, reader, position, header, raw=raw)
                continue
            result = filter_batch(raw, header, flt, path=reader.path, position=position)
            _add(writer, result, stats)
            if throttle is not None and result.data and not result.copied:
                throttle(len(result.data))
    writer.flush()
    return flt.pending
