"""One cleaning pass over one log: Kafka's ``Cleaner.doClean``, as a plain function.

:func:`clean_log` decides whether the log is due (see :mod:`changelog.cleaner_manager`)
and :func:`clean` runs the pass.  A pass never changes an offset; it only drops
records.  Its steps:

1. **Map** the dirty section ``[first dirty, first uncleanable)`` into an
   :class:`~changelog.offset_map.OffsetMap` (key hash -> latest offset).  If
   the map fills, the pass maps only up to where it filled; the rest waits for
   the next pass.  ``end offset`` = one past the last mapped offset (at least
   the first dirty offset).
2. **Recopy** every non-active segment that starts below the end offset, from
   the log start, in groups of adjacent segments whose sum fits in
   ``segment_bytes``, the index size limit and int32 relative offsets.  A
   record is kept when its offset is at or past the end offset, or it is the
   latest for its key; a tombstone that is the latest is dropped once its
   batch's delete horizon has passed (KIP-534) unless it lies at or above the
   log's cleaning barrier.  The first pass that keeps a tombstone stamps its
   batch with the horizon ``now + delete_retention_ms``.  A batch that loses
   nothing and needs no stamp is copied byte for byte; a batch that loses
   everything is dropped, except the last batch of each group (the new
   segment's last batch), which is kept empty so that the segment's last
   offset, and so the log end offset, survive a reload.  A group in which nothing
   changes is not rewritten at all.
3. **Swap** each run of adjacent rewritten groups at once: one
   ``log.replace_segments`` per run fsyncs the ``.cleaned`` segments and runs
   the ``.cleaned -> .swap -> .deleted`` protocol under ``log.lock`` (the
   only time the pass holds it, apart from the snapshot).  When every group
   is rewritten (or the untouched ones are all at the start) that is one swap
   and a crash leaves exactly the old or exactly the new log; otherwise each
   run is exactly old or new (the loader's recovery needs each swap to cover
   contiguous segments, see :func:`_contiguous_runs`).  If a source segment
   vanished meanwhile (retention, truncation) the pass is aborted.  The
   price: the disk holds the old and the cleaned copies of the rewritten
   range until the swap.
4. **Checkpoint** the end offset as the next first dirty offset, after every
   swap (a crash before it only repeats work).

``abort()`` is checked between batches; when it returns true the pass raises
:class:`~changelog.errors.CleanerAbortedError` and deletes its ``.cleaned`` files.

The pass is three functions so that its CPU-heavy middle can run in another
process: :func:`snapshot` (under ``log.lock``: read-only descriptors of the
segments to read, and the pass's plain-value :class:`PassInput`),
:func:`compact` (steps 1-2; touches no live ``Log``) and :func:`commit`
(steps 3-4).  :func:`clean` runs all three in the calling thread;
:func:`changelog.cleaner_service.clean_in_process` runs :func:`compact` in a
child process.

Memory: the offset map (``dedupe_buffer_size_bytes / threads``, capped by
what the dirty section could need) plus one batch and one write buffer
(``io_buffer_size_bytes``); only offsets and key hashes outlive a batch.

Thread-safety: a pass may run in any thread while writers append: it reads
non-active segments through its own descriptors and takes ``log.lock`` only
for the snapshot and the swap.  Two passes over the same log must not run at
once (the caller, :class:`~changelog.cleaner_manager.CleanerManager`, ensures it).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from changelog.cleaner_manager import (
    LogToClean,
    log_to_clean,
    record_pending_delete_horizon,
    write_cleaner_checkpoint,
)
from changelog.config import CleanerConfig, LogConfig
from changelog.errors import CleanerAbortedError, LogStorageError
from changelog.files import CLEANED_SUFFIX
from changelog.offset_map import SLOT_BYTES, OffsetMap
from changelog.record_batch import BatchHeader, decode_key_values, decode_records, encode_records
from changelog.segment import INT32_MAX, LogSegment
from changelog.segment_reader import SegmentReader

if TYPE_CHECKING:
    from changelog.log import Log

__all__ = [
    "CleanerStats",
    "Compacted",
    "PassInput",
    "SourceSegment",
    "build_offset_map",
    "clean",
    "clean_log",
    "commit",
    "compact",
    "group_segments_by_size",
    "map_memory_bytes",
    "snapshot",
]

_log = logging.getLogger(__name__)

_NEVER: Final = lambda: False  # noqa: E731 - the default abort check
_MIN_RECORD_BYTES: Final = 7  # a record's smallest framing: seven one-byte varints


@attrs.define(kw_only=True)
class CleanerStats:
    """What one pass did (Kafka's ``CleanerStats``), returned by :func:`clean_log`.

    ``bytes_read``/``records_read`` count the recopy phase (every batch of the
    segments considered, rewritten or not); ``bytes_kept`` counts what is in
    the log afterwards (written plus left untouched).  Durations are wall-clock
    seconds from ``time.monotonic``.

    Invariants (once the pass returned): ``records_kept <= records_read``;
    ``first_dirty_offset <= end_offset <= first_uncleanable_offset``.
    (``bytes_kept`` may exceed ``bytes_read`` a little in a pass that only
    stamps delete horizons: timestamps become deltas from the horizon.)

    Thread-safety: filled in by one pass; read it after the pass returns.
    """

    log_name: str = ""
    first_dirty_offset: int = 0
    end_offset: int = 0
    first_uncleanable_offset: int = 0
    due_reason: str | None = None
    map_records_read: int = 0
    map_bytes_read: int = 0
    records_read: int = 0
    bytes_read: int = 0
    records_written: int = 0
    bytes_written: int = 0
    records_kept: int = 0
    bytes_kept: int = 0
    tombstones_removed: int = 0
    invalid_records: int = 0
    segments_rewritten: int = 0
    segments_untouched: int = 0
    groups_swapped: int = 0
    buffer_utilization: float = 0.0
    pending_delete_horizon_ms: int | None = None
    map_duration_s: float = 0.0
    duration_s: float = 0.0

    @property
    def records_removed(self) -> int:
        """Records read in the recopy phase and not kept."""
        return self.records_read - self.records_kept

    @property
    def mb_per_s_read(self) -> float:
        """Megabytes (10**6) read in both phases per second of the whole pass."""
        return (
            (self.bytes_read + self.map_bytes_read) / 1e6 / self.duration_s
            if self.duration_s
            else 0.0
        )

    @property
    def mb_per_s_written(self) -> float:
        """Megabytes written per second of the whole pass."""
        return self.bytes_written / 1e6 / self.duration_s if self.duration_s else 0.0

    @property
    def size_reduction(self) -> float:
        """Fraction of the recopied bytes removed (0.25: a quarter smaller)."""
        return 1.0 - self.bytes_kept / self.bytes_read if self.bytes_read else 0.0

    def summary(self) -> str:
        """A multi-line summary like the one Kafka's cleaner logs."""
        total = self.duration_s or 1e-9
        recopy = max(self.duration_s - self.map_duration_s, 0.0)
        fewer = 1.0 - self.records_kept / self.records_read if self.records_read else 0.0
        return (
            f"cleaned log {self.log_name} (dirty section = [{self.first_dirty_offset}, "
            f"{self.end_offset}), due to {self.due_reason})\n"
            f"\t{(self.bytes_read + self.map_bytes_read) / 1e6:,.1f} MB of log processed in "
            f"{self.duration_s:,.2f} seconds ({self.mb_per_s_read:,.1f} MB/sec).\n"
            f"\tIndexed {self.map_bytes_read / 1e6:,.1f} MB in {self.map_duration_s:.2f} seconds "
            f"({100 * self.map_duration_s / total:.1f}% of total time)\n"
            f"\tBuffer utilization: {100 * self.buffer_utilization:.1f}%\n"
            f"\tCleaned {self.bytes_read / 1e6:,.1f} MB in {recopy:.2f} seconds "
            f"({100 * recopy / total:.1f}% of total time)\n"
            f"\tStart size: {self.bytes_read / 1e6:,.1f} MB ({self.records_read:,d} messages)\n"
            f"\tEnd size: {self.bytes_kept / 1e6:,.1f} MB ({self.records_kept:,d} messages)\n"
            f"\t{100 * self.size_reduction:.1f}% size reduction ({100 * fewer:.1f}% fewer messages); "
            f"{self.segments_rewritten} segments rewritten, {self.segments_untouched} untouched, "
            f"{self.tombstones_removed} tombstones removed"
        )


def _prefix(log: Any) -> str:
    return f"[{log.topic}-{log.partition}]"


def _now_ms(log: Any) -> int:
    clock = getattr(log, "clock", None)
    if clock is None:
        return int(time.time() * 1000)
    return int(clock())


def map_memory_bytes(config: CleanerConfig, *, dirty_bytes: int | None = None) -> int:
    """Offset map size of one worker: the dedupe buffer shared by ``threads`` workers (as Kafka).

    With ``dirty_bytes`` it is also capped by what the dirty section could
    need (a record takes at least ``_MIN_RECORD_BYTES`` bytes), so cleaning a
    small log does not allocate the whole buffer.
    """
    share = max(config.dedupe_buffer_size_bytes // config.threads, 1024)
    if dirty_bytes is None:
        return share
    keys = dirty_bytes // _MIN_RECORD_BYTES + 1
    needed = int(keys / max(config.dedupe_buffer_load_factor, 0.01)) * SLOT_BYTES + 2 * SLOT_BYTES
    return max(1024, min(share, needed))


def clean_log(
    log: Log,
    *,
    force: bool = False,
    config: CleanerConfig | None = None,
    now_ms: int | None = None,
    abort: Callable[[], bool] = _NEVER,
    offset_map: OffsetMap | None = None,
    throttle: Callable[[int], None] | None = None,
) -> CleanerStats | None:
    """Clean ``log`` once, now, if it is due; return the pass's stats or ``None`` if not due.

    Honours the log's configuration: the cleanup policy must include
    ``compact``; the dirty ratio must exceed ``min_cleanable_dirty_ratio``
    (``force=True`` ignores only that threshold), or a dirty record must be
    older than ``max_compaction_lag_ms``, or a kept tombstone must have passed
    its delete horizon.  ``now_ms`` defaults to the log's clock.
    """
    if not log.config.compact:
        return None
    now = _now_ms(log) if now_ms is None else now_ms
    to_clean = log_to_clean(log, now_ms=now, force=force)
    if to_clean.due_reason is None:
        return None
    return clean(
        to_clean,
        config=config or CleanerConfig(),
        now_ms=now,
        abort=abort,
        offset_map=offset_map,
        throttle=throttle,
    )


# ----------------------------------------------------------------- step 1: the offset map


@attrs.frozen(kw_only=True)
class SourceSegment:
    """A non-active segment as one pass sees it: a private reader and the sizes at snapshot time.

    ``reader`` is a :class:`~changelog.segment.SegmentReader` on a descriptor
    opened under ``log.lock`` (``fd``), so the pass is unaffected by appends, renames or deletions
    after the snapshot.  ``next_base_offset`` is the following segment's base
    offset: this segment's offsets all lie below it.  Owned by one pass.
    """

    base_offset: int
    next_base_offset: int
    size_bytes: int
    offset_index_bytes: int
    time_index_bytes: int
    fd: int = -1
    """The descriptor ``reader`` owns (``-1`` when unknown): what a worker process is handed."""
    reader: Any = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen(kw_only=True)
class PassInput:
    """Everything a pass needs besides its segments (plain values: it can cross a process)."""

    name: str
    directory: str
    log_config: LogConfig
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    barrier: int | None
    due_reason: str | None


def _open_fd(segment: LogSegment) -> int:
    """A read-only descriptor of our own on the ``.log`` (a worker process can be handed it)."""
    path = segment.log_path
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise LogStorageError(path, "open", exc) from exc


def _own_reader(fd: int, path: Path, base_offset: int, size: int) -> SegmentReader:
    """A reader that closes ``fd`` when it is closed."""
    return SegmentReader(fd, path, base_offset, size, functools.partial(os.close, fd))


def snapshot(to_clean: LogToClean) -> tuple[PassInput, list[LogSegment], list[SourceSegment]]:
    """Under ``log.lock``: the pass's input, and readers over every segment below the
    first uncleanable offset (the segment objects too, for the swap)."""
    log = to_clean.log
    with log.lock:
        segments = list(log.segments)
        chosen: list[LogSegment] = []
        sources: list[SourceSegment] = []
        try:
            for segment, following in itertools.pairwise(segments):
                if segment.base_offset >= to_clean.first_uncleanable_offset:
                    break
                chosen.append(segment)
                fd = _open_fd(segment)
                sources.append(
                    SourceSegment(
                        base_offset=segment.base_offset,
                        next_base_offset=following.base_offset,
                        size_bytes=segment.size_bytes,
                        offset_index_bytes=segment.offset_index.size_in_bytes,
                        time_index_bytes=segment.time_index.size_in_bytes,
                        fd=fd,
                        reader=_own_reader(
                            fd, segment.log_path, segment.base_offset, segment.size_bytes
                        ),
                    )
                )
        except BaseException:
            for source in sources:
                source.reader.close()
            raise
        inputs = PassInput(
            name=f"{log.topic}-{log.partition}",
            directory=str(log.dir),
            log_config=log.config,
            first_dirty_offset=to_clean.first_dirty_offset,
            first_uncleanable_offset=to_clean.first_uncleanable_offset,
            now_ms=0,
            barrier=log.cleaning_barrier_offset,
            due_reason=to_clean.due_reason,
        )
    return inputs, chosen, sources


def build_offset_map(
    sources: Sequence[SourceSegment],
    start: int,
    end: int,
    offset_map: OffsetMap,
    *,
    stats: CleanerStats,
    abort: Callable[[], bool],
    throttle: Callable[[int], None] | None,
) -> int:
    """Map keys of ``[start, end)`` to their latest offsets; return the end offset of the map.

    The returned offset is ``end`` when everything fitted, else one past the
    last offset mapped before the map filled (always ``> start`` when the
    range holds a keyed record: an empty map takes at least one key).
    """
    offset_map.clear()
    for source in sources:
        if source.next_base_offset <= start:
            continue
        if source.base_offset >= end:
            break
        reader = source.reader
        for position, header, raw in reader.batches():
            if header.next_offset <= start:
                continue
            if header.base_offset >= end:
                break
            _check_abort(stats.log_name, abort)
            if throttle is not None:
                throttle(len(raw))
            stats.map_bytes_read += len(raw)
            if header.is_control:
                offset_map.update_latest_offset(min(header.last_offset, end - 1))
                continue
            entries = decode_key_values(raw, path=reader.path, position=position, validate=False)
            if header.base_offset < start or header.last_offset >= end:  # straddles a bound
                entries = [entry for entry in entries if start <= entry[0] < end]
            keys = [key for _offset, key, _value in entries]
            offsets = [offset for offset, _key, _value in entries]
            stats.map_records_read += len(entries)
            consumed = offset_map.put_batch(keys, offsets)
            if consumed < len(entries):
                _log.debug(
                    "[%s] offset map full at offset %s (%s keys)",
                    stats.log_name,
                    offset_map.latest_offset,
                    offset_map.size,
                )
                return max(start, offset_map.latest_offset + 1)
            offset_map.update_latest_offset(min(header.last_offset, end - 1))
        offset_map.update_latest_offset(min(source.next_base_offset, end) - 1)
    return max(start, min(end, offset_map.latest_offset + 1))


# ----------------------------------------------------------------- step 2: grouping


def group_segments_by_size(
    segments: Sequence[SourceSegment],
    *,
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> list[list[SourceSegment]]:
    """Kafka's ``groupSegmentsBySize``: runs of adjacent segments that fit in one segment.

    A group's ``.log`` bytes stay within ``max_size``, its index bytes within
    ``max_index_size``, and its offsets within int32 of its base offset (the
    last offset of a segment is estimated by the next segment's base - 1, or
    by ``first_uncleanable_offset - 1`` for the last one).
    """
    groups: list[list[SourceSegment]] = []
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


class _Filter:
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


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _is_last(reader: Any, position: int, header: BatchHeader, last_reader: Any) -> bool:
    """Whether the batch is the last one of its group (kept even when emptied)."""
    return reader is last_reader and position + header.size_in_bytes == reader.end_position


def _check_abort(name: str, abort: Callable[[], bool]) -> None:
    if abort():
        raise CleanerAbortedError(f"[{name}] cleaning aborted")


def _scan_group(
    name: str,
    readers: Sequence[Any],
    flt: _Filter,
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
            _check_abort(name, abort)
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
            pending = _min(pending, candidate)
    return False, pending, records, size


class _Writer:
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


def _rewrite_group(
    name: str,
    readers: Sequence[Any],
    cleaned: LogSegment,
    flt: _Filter,
    *,
    stats: CleanerStats,
    abort: Callable[[], bool],
    throttle: Callable[[int], None] | None,
    io_buffer_bytes: int,
) -> int | None:
    """Copy what the filter keeps from ``readers`` into ``cleaned``; return the pending horizon."""
    writer = _Writer(cleaned, io_buffer_bytes, stats)
    pending: int | None = None
    for reader in readers:
        for position, header, raw in reader.batches():
            _check_abort(name, abort)
            if throttle is not None:
                throttle(len(raw))
            stats.records_read += header.records_count
            stats.bytes_read += len(raw)
            if header.is_control:
                writer.add(raw, 0, header.last_offset, header.max_timestamp, header.last_offset)
                continue
            entries = decode_key_values(raw, path=reader.path, position=position, validate=False)
            keep, tombstone_kept, candidate = flt.retained(header, entries, count=True)
            pending = _min(pending, candidate)
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


# ----------------------------------------------------------------- step 3: the swap


def _swap(log: Any, old: Sequence[LogSegment], new: Sequence[LogSegment]) -> None:
    """Replace the contiguous ``old`` by ``new`` in one ``Log.replace_segments`` (under ``log.lock``).

    One swap per run of adjacent groups (Kafka swaps group by group), so a
    crash leaves the run exactly old or exactly new.  ``replace_segments``
    raises :class:`CleanerAbortedError` (and deletes ``new``) if a segment of
    ``old`` left the log meanwhile (retention, truncation).
    """
    log.replace_segments(list(new), list(old))


@attrs.define(kw_only=True)
class Compacted:
    """What the expensive half of a pass produced: cleaned segments not yet swapped in.

    ``replaced`` lists, per cleaned segment, the base offsets of the source
    segments it replaces.  Owned by one pass.
    """

    stats: CleanerStats
    cleaned: list[LogSegment]
    replaced: list[list[int]]


def compact(
    inputs: PassInput,
    sources: Sequence[SourceSegment],
    *,
    config: CleanerConfig,
    abort: Callable[[], bool] = _NEVER,
    offset_map: OffsetMap | None = None,
    throttle: Callable[[int], None] | None = None,
) -> Compacted:
    """Steps 1 and 2: map the dirty section and write ``.cleaned`` segments (flushed).

    Touches no live ``Log``: it reads ``sources`` and writes new files in
    ``inputs.directory``, so it can run in a worker process.  On any error
    (including an abort) the ``.cleaned`` files it made are deleted.
    """
    started = time.monotonic()
    stats = CleanerStats(
        log_name=inputs.name,
        first_dirty_offset=inputs.first_dirty_offset,
        first_uncleanable_offset=inputs.first_uncleanable_offset,
        due_reason=inputs.due_reason,
    )
    if offset_map is None:
        dirty = sum(s.size_bytes for s in sources if s.next_base_offset > inputs.first_dirty_offset)
        offset_map = OffsetMap(
            map_memory_bytes(config, dirty_bytes=dirty),
            load_factor=config.dedupe_buffer_load_factor,
        )
    _log.info(
        "[%s] beginning cleaning: dirty section [%s, %s), due to %s",
        inputs.name,
        inputs.first_dirty_offset,
        inputs.first_uncleanable_offset,
        inputs.due_reason,
    )
    end = build_offset_map(
        sources,
        inputs.first_dirty_offset,
        inputs.first_uncleanable_offset,
        offset_map,
        stats=stats,
        abort=abort,
        throttle=throttle,
    )
    stats.end_offset = end
    stats.buffer_utilization = offset_map.utilization
    stats.map_duration_s = time.monotonic() - started
    flt = _Filter(
        offset_map,
        end_offset=end,
        now_ms=inputs.now_ms,
        delete_retention_ms=inputs.log_config.delete_retention_ms,
        barrier=inputs.barrier,
        stats=stats,
    )
    groups = group_segments_by_size(
        [source for source in sources if source.base_offset < end],
        max_size=inputs.log_config.segment_bytes,
        max_index_size=inputs.log_config.segment_index_bytes,
        first_uncleanable_offset=inputs.first_uncleanable_offset,
    )
    pending: int | None = None
    cleaned_segments: list[LogSegment] = []
    replaced: list[list[int]] = []
    try:
        for group in groups:
            readers = [source.reader for source in group]
            changed, group_pending, records, size = _scan_group(
                inputs.name, readers, flt, abort, throttle
            )
            if not changed:
                stats.segments_untouched += len(group)
                stats.records_read += records
                stats.records_kept += records
                stats.bytes_read += size
                stats.bytes_kept += size
                pending = _min(pending, group_pending)
                continue
            cleaned = LogSegment.create(
                Path(inputs.directory),
                group[0].base_offset,
                config=inputs.log_config,
                file_suffix=CLEANED_SUFFIX,
            )
            cleaned_segments.append(cleaned)
            group_pending = _rewrite_group(
                inputs.name,
                readers,
                cleaned,
                flt,
                stats=stats,
                abort=abort,
                throttle=throttle,
                io_buffer_bytes=config.io_buffer_size_bytes,
            )
            cleaned.on_become_inactive()  # fsynced by replace_segments (S1) before the swap
            replaced.append([source.base_offset for source in group])
            pending = _min(pending, group_pending)
            stats.segments_rewritten += len(group)
            stats.groups_swapped += 1
        _check_abort(inputs.name, abort)
    except Exception:
        for segment in cleaned_segments:  # an abort or a failure: the .cleaned files go
            segment.delete()
        raise
    stats.pending_delete_horizon_ms = pending
    stats.duration_s = time.monotonic() - started
    return Compacted(stats=stats, cleaned=cleaned_segments, replaced=replaced)


def _contiguous_runs(
    segments: Sequence[LogSegment], compacted: Compacted
) -> list[tuple[list[LogSegment], list[LogSegment]]]:
    """Split the rewritten groups into runs of adjacent groups: ``(old segments, new segments)``.

    The loader completes an interrupted swap by deleting every ordinary
    segment between the lowest ``.swap`` base offset and the highest ``.swap``
    next offset (as Kafka's ``LogLoader`` does), which is only right when the
    segments being replaced are contiguous.  A group left untouched between two
    rewritten ones therefore splits the swap in two.
    """
    position = {segment.base_offset: index for index, segment in enumerate(segments)}
    runs: list[tuple[list[LogSegment], list[LogSegment]]] = []
    previous_last = -2
    for bases, cleaned in zip(compacted.replaced, compacted.cleaned, strict=True):
        first, last = position[bases[0]], position[bases[-1]]
        group = [segments[index] for index in range(first, last + 1)]
        if first == previous_last + 1 and runs:
            runs[-1][0].extend(group)
            runs[-1][1].append(cleaned)
        else:
            runs.append((group, [cleaned]))
        previous_last = last
    return runs


def commit(
    log: Any, segments: Sequence[LogSegment], compacted: Compacted, started: float
) -> CleanerStats:
    """Steps 3 and 4: swap the cleaned segments in, then advance the checkpoint.

    ``segments`` are the snapshot's segment objects (matched to
    ``compacted.replaced`` by base offset).  Adjacent rewritten groups are
    swapped together, so a crash leaves each run exactly old or exactly new
    (the whole log, when no untouched group separates two rewritten ones).
    Raises :class:`CleanerAbortedError` (the cleaned files not yet swapped
    deleted) if a segment left the log meanwhile.
    """
    stats = compacted.stats
    runs = _contiguous_runs(segments, compacted)
    swapped = 0
    try:
        for old, new in runs:
            _swap(log, old, new)
            swapped += len(new)
    except Exception:
        for segment in compacted.cleaned[swapped:]:
            segment.delete()
        raise
    write_cleaner_checkpoint(log, stats.end_offset)
    record_pending_delete_horizon(log, stats.pending_delete_horizon_ms)
    stats.duration_s = time.monotonic() - started
    _log.info("%s %s", _prefix(log), stats.summary())
    return stats


def clean(
    to_clean: LogToClean,
    *,
    config: CleanerConfig,
    now_ms: int,
    abort: Callable[[], bool] = _NEVER,
    offset_map: OffsetMap | None = None,
    throttle: Callable[[int], None] | None = None,
) -> CleanerStats:
    """Run one pass over ``to_clean.log`` in this thread (steps 1-4 of the module docstring).

    ``offset_map`` lets a worker reuse its map across passes (it is cleared
    first); ``throttle(n)`` is called with every ``n`` bytes read or written.
    Raises :class:`~changelog.errors.CleanerAbortedError` when ``abort()``
    turns true or the log changed under the pass; the log is then unchanged
    and the ``.cleaned`` files are deleted.
    """
    started = time.monotonic()
    inputs, segments, sources = snapshot(to_clean)
    inputs = attrs.evolve(inputs, now_ms=now_ms)
    try:
        compacted = compact(
            inputs, sources, config=config, abort=abort, offset_map=offset_map, throttle=throttle
        )
    finally:
        for source in sources:
            source.reader.close()
    return commit(to_clean.log, segments, compacted, started)
