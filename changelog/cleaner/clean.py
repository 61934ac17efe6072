"""One cleaning pass over one log: Kafka's ``Cleaner.doClean``, as a plain function.

:func:`clean_log` decides whether the log is due (see :mod:`changelog.cleaner.manager`)
and :func:`clean` runs the pass.  A pass never changes an offset; it only drops
records.  Its steps:

1. **Map** the dirty section ``[first dirty, first uncleanable)`` into an
   :class:`~changelog.cleaner.offset_map.OffsetMap` (key hash -> latest offset).  If
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
   batch with the horizon ``now + delete_retention_ms``.  The codec filters
   each batch (:func:`changelog.record.filter.filter_batch`, Kafka's
   ``filterTo``): one that loses nothing and needs no stamp is copied byte
   for byte, one that loses some is rebuilt in its own codec, one that loses
   everything is dropped, except (Kafka's rule) the last batch of the
   cleaning round (its next offset is the first uncleanable offset), kept
   empty so that the log end offset survives a reload.  So a group can
   become an empty segment, and empty segments merge with their neighbours
   in later passes.  A group in which nothing changes is not rewritten at
   all, unless it holds an empty segment next to others (Kafka rewrites
   every group; we rewrite those so that empty segments merge away).  A group
   the map build proved unchanged (:class:`SegmentEvidence`: wholly mapped, no
   record shadowed by a later put, no tombstone, keyless record, empty,
   control or transactional batch) is not even read again; one with a
   shadowed record is rewritten without a scan first.  (Step 2's code is :mod:`changelog.cleaner.recopy`.)
3. **Swap** every rewritten group at once: one ``log.replace_segments``
   fsyncs the ``.cleaned`` segments, raises ``cleaner-swap-offset-checkpoint``
   to the end offset (durably, before anything is renamed: the holes the
   pass leaves are explained before they exist) and runs the ``.cleaned ->
   .swap -> .deleted`` protocol under ``log.lock`` (the only time the pass holds it,
   apart from the snapshot), so a crash leaves exactly the old or exactly
   the new log.  Untouched groups between rewritten ones stay where they are
   (loader pass L4 deletes, per ``.swap`` file, only the segments inside that
   file's own offset range).  If a source segment vanished meanwhile
   (retention, truncation) the pass is aborted.  The price: the disk holds
   the old and the cleaned copies of the rewritten groups until the swap.
4. **Checkpoint** the end offset as the next first dirty offset, after the
   swap (a crash before it only repeats work).

``abort()`` is checked between batches; when it returns true the pass raises
:class:`~changelog.errors.CleanerAbortedError` and deletes its ``.cleaned`` files.

The pass is three functions so that its CPU-heavy middle can run in another
process: :func:`snapshot` (under ``log.lock``: read-only descriptors of the
segments to read, and the pass's plain-value :class:`PassInput`),
:func:`compact` (steps 1-2; touches no live ``Log``) and :func:`commit`
(steps 3-4).  :func:`clean` runs all three in the calling thread;
:func:`changelog.cleaner.worker.clean_in_process` runs :func:`compact` in a
child process.  Stats are :class:`~changelog.cleaner.stats.CleanerStats`.

Memory: the offset map (``dedupe_buffer_size_bytes / threads``, capped by
what the dirty section could need) plus one batch and one write buffer
(``io_buffer_size_bytes``); only offsets and key hashes outlive a batch.

Thread-safety: a pass may run in any thread while writers append: it reads
non-active segments through its own descriptors and takes ``log.lock`` only
for the snapshot and the swap.  Two passes over the same log must not run at
once (the caller, :class:`~changelog.cleaner.manager.CleanerManager`, ensures it).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from changelog.cleaner.manager import (
    LogToClean,
    advance_swap_checkpoint,
    log_to_clean,
    record_pending_delete_horizon,
    write_cleaner_checkpoint,
)
from changelog.cleaner.offset_map import SLOT_BYTES, OffsetMap
from changelog.cleaner.recopy import (
    Filter,
    check_abort,
    group_segments_by_size,
    min_or_none,
    rewrite_group,
    scan_group,
)
from changelog.cleaner.stats import CleanerStats
from changelog.cleaner.transactions import (
    CleanedTransactionMetadata,
    batch_marker,
    write_cleaned_txn_indexes,
)
from changelog.config import CleanerConfig, LogConfig
from changelog.errors import LogStorageError
from changelog.fs.files import CLEANED_SUFFIX
from changelog.record.batch import decode_key_values
from changelog.segment.reader import SegmentReader
from changelog.segment.segment import LogSegment
from changelog.segment.txn_index import AbortedTxn

if TYPE_CHECKING:
    from changelog.log.log import Log

__all__ = [
    "CleanerStats",
    "Compacted",
    "PassInput",
    "SegmentEvidence",
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
_summary_log = logging.getLogger(f"{__package__}.summary")
"""``changelog.cleaner.summary``: one INFO record per pass, Kafka's ``log-cleaner.log`` lines."""

_NEVER: Final = lambda: False  # noqa: E731 - the default abort check
_MIN_RECORD_BYTES: Final = 7  # a record's smallest framing: seven one-byte varints
_OFFSET: Final = itemgetter(0)  # of an (offset, key, value) entry
_KEY: Final = itemgetter(1)
_VALUE: Final = itemgetter(2)


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

    A closed or failed log is refused first (:meth:`Log.check_open
    <changelog.log.log.Log.check_open>`): nothing is read, nothing written.
    """
    log.check_open()
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

    ``reader`` is a :class:`~changelog.segment.segment.SegmentReader` on a descriptor
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


@attrs.define(kw_only=True)
class SegmentEvidence:
    """What building the offset map saw of one source segment: enough to skip its recopy.

    A segment lying wholly inside the mapped range ``[first dirty, end)`` was read
    batch by batch while the map was built.  If no record of it was shadowed by a
    later put (:meth:`~changelog.cleaner.offset_map.OffsetMap.watch_shadowed`) and it
    holds nothing the filter treats specially (a tombstone, a record without a key, an
    empty, control or transactional batch), the pass keeps every batch of it byte for
    byte, so step 2 neither scans nor rewrites it.  If a record of it was shadowed,
    step 2 rewrites it without scanning it first.  Owned by one pass.
    """

    records: int = 0
    """Records in the batches read while mapping."""
    bytes: int = 0
    """Bytes of those batches."""
    special: bool = False
    """A batch the filter may change without a shadowing put (see above)."""
    mapped: bool = False
    """Every batch of the segment was read and mapped (set once the map is built)."""
    shadowed: bool = False
    """A later put shadowed one of its records: the pass removes that record."""


def _aborted_tuples(rows: Any) -> tuple[tuple[int, int, int, int], ...]:
    """``PassInput.aborted`` from rows (lists, after a trip through JSON to a worker)."""
    return tuple((int(a), int(b), int(c), int(d)) for a, b, c, d in rows)


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
    aborted: tuple[tuple[int, int, int, int], ...] = attrs.field(
        default=(), converter=_aborted_tuples
    )
    """The log's aborted transactions overlapping the pass (``.txnindex`` entries as tuples)."""


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


MAX_PASS_SEGMENTS: Final = 512
"""The most source segments one pass reads (each is read through a descriptor of its own,
opened at the snapshot): a log of 10,000 small segments is cleaned by a few passes, each
merging up to this many, instead of one pass that needs 10,000 descriptors at once.  A
pass whose clean section alone is longer takes that section whole (it must reach the
first dirty offset)."""


def snapshot(to_clean: LogToClean) -> tuple[PassInput, list[LogSegment], list[SourceSegment]]:
    """Under ``log.lock``: the pass's input, and readers over every segment below the
    first uncleanable offset (the segment objects too, for the swap).

    At most :data:`MAX_PASS_SEGMENTS` segments past the one holding the first dirty
    offset are taken: the first uncleanable offset is lowered to the next one's base
    offset (the rest is cleaned by the next pass)."""
    log = to_clean.log
    with log.lock:
        log.check_open()  # a log closed since it was chosen: write nothing beside it
        segments = list(log.segments)
        chosen: list[LogSegment] = []
        sources: list[SourceSegment] = []
        first_uncleanable = to_clean.first_uncleanable_offset
        try:
            for segment, following in itertools.pairwise(segments):
                if segment.base_offset >= first_uncleanable:
                    break
                if (
                    len(chosen) >= MAX_PASS_SEGMENTS
                    and segment.base_offset > to_clean.first_dirty_offset
                ):
                    first_uncleanable = segment.base_offset
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
            first_uncleanable_offset=first_uncleanable,
            now_ms=0,
            barrier=log.cleaning_barrier_offset,
            due_reason=to_clean.due_reason,
            aborted=_aborted_rows(log, first_uncleanable),
        )
    return inputs, chosen, sources


def _aborted_rows(log: Any, upper_bound: int) -> tuple[tuple[int, int, int, int], ...]:
    """The aborted transactions of ``[log start, upper_bound)`` as plain tuples (under ``log.lock``)."""
    collect = getattr(log, "aborted_transactions", None)
    if collect is None or upper_bound <= log.log_start_offset:
        return ()
    return tuple(
        (t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
        for t in collect(log.log_start_offset, upper_bound)
    )


def _txn_metadata(inputs: PassInput) -> CleanedTransactionMetadata:
    return CleanedTransactionMetadata(AbortedTxn(*row) for row in inputs.aborted)


def build_offset_map(
    sources: Sequence[SourceSegment],
    start: int,
    end: int,
    offset_map: OffsetMap,
    *,
    stats: CleanerStats,
    abort: Callable[[], bool],
    throttle: Callable[[int], None] | None,
    txn: CleanedTransactionMetadata | None = None,
    evidence: list[SegmentEvidence] | None = None,
) -> int:
    """Map keys of ``[start, end)`` to their latest offsets; return the end offset of the map.

    With ``txn`` (the pass's aborted transactions), the records of aborted
    transactions are not mapped (Kafka's rule: an aborted record never
    shadows a committed one); markers are followed, never mapped.  With
    ``evidence`` (a list, filled with one :class:`SegmentEvidence` per source) the
    map also notes what step 2 may skip.

    The returned offset is ``end`` when everything fitted, else one past the
    last offset mapped before the map filled (always ``> start`` when the
    range holds a keyed record: an empty map takes at least one key).
    """
    offset_map.clear()
    seen: list[SegmentEvidence] = []
    if evidence is not None:
        evidence[:] = seen = [SegmentEvidence() for _ in sources]
        offset_map.watch_shadowed([source.base_offset for source in sources])
    end = _map_sources(
        sources,
        start,
        end,
        offset_map,
        seen=seen,
        stats=stats,
        abort=abort,
        throttle=throttle,
        txn=txn,
    )
    if evidence is not None:
        for source, facts, shadowed in zip(sources, seen, offset_map.shadowed(), strict=True):
            facts.mapped = source.base_offset >= start and source.next_base_offset <= end
            facts.shadowed = shadowed
    return end


def _map_sources(
    sources: Sequence[SourceSegment],
    start: int,
    end: int,
    offset_map: OffsetMap,
    *,
    seen: list[SegmentEvidence],
    stats: CleanerStats,
    abort: Callable[[], bool],
    throttle: Callable[[int], None] | None,
    txn: CleanedTransactionMetadata | None,
) -> int:
    """The loop of :func:`build_offset_map` (``seen``: per-source evidence, or empty)."""
    for index, source in enumerate(sources):
        if source.next_base_offset <= start:
            continue
        if source.base_offset >= end:
            break
        reader = source.reader
        facts = seen[index] if seen else SegmentEvidence()
        for position, header, raw in reader.batches():
            if header.next_offset <= start:
                continue
            if header.base_offset >= end:
                break
            check_abort(stats.log_name, abort)
            if throttle is not None:
                throttle(len(raw))
            stats.map_bytes_read += len(raw)
            facts.records += header.records_count
            facts.bytes += len(raw)
            if header.is_control or header.is_transactional or not header.records_count:
                facts.special = True
            if header.is_control:
                if txn is not None:
                    txn.on_control_batch(header, batch_marker(header, raw, reader.path, position))
                offset_map.update_latest_offset(min(header.last_offset, end - 1))
                continue
            if txn is not None and txn.on_data_batch(header):  # aborted: never mapped
                offset_map.update_latest_offset(min(header.last_offset, end - 1))
                continue
            entries = decode_key_values(raw, path=reader.path, position=position, validate=False)
            if header.base_offset < start or header.last_offset >= end:  # straddles a bound
                entries = [entry for entry in entries if start <= entry[0] < end]
            keys = list(map(_KEY, entries))
            offsets = list(map(_OFFSET, entries))
            if not facts.special and (None in keys or None in map(_VALUE, entries)):
                facts.special = True  # a record without a key, or a tombstone
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


# ----------------------------------------------------------------- step 3: the swap


def _swap(log: Any, old: Sequence[LogSegment], new: Sequence[LogSegment], end_offset: int) -> None:
    """Replace ``old`` by ``new`` in one ``Log.replace_segments`` (under ``log.lock``).

    One swap per pass, so a crash leaves the pass exactly old or exactly new.
    Before the swap (its step S1b) the swap checkpoint is raised to the
    pass's end offset, which is above every rewritten group's base offset: so
    a hole a cleaned segment leaves (an emptied last batch dropped) is
    explained by a durable checkpoint before it exists (:mod:`changelog.log.replace`).
    ``replace_segments`` raises :class:`CleanerAbortedError` (and deletes
    ``new``) if a segment of ``old`` left the log meanwhile (retention,
    truncation).
    """
    log.replace_segments(
        list(new),
        list(old),
        before_swap=functools.partial(advance_swap_checkpoint, log, end_offset),
    )


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
    evidence: list[SegmentEvidence] = []
    end = build_offset_map(
        sources,
        inputs.first_dirty_offset,
        inputs.first_uncleanable_offset,
        offset_map,
        stats=stats,
        abort=abort,
        throttle=throttle,
        txn=_txn_metadata(inputs),
        evidence=evidence,
    )
    ttl_ms = inputs.log_config.record_ttl_ms
    if ttl_ms:  # every batch may expire: step 2 reads them all (Filter, "Expiry")
        for seen in evidence:
            seen.special = True
    known = {source.base_offset: facts for source, facts in zip(sources, evidence, strict=True)}
    stats.end_offset = end
    stats.buffer_utilization = offset_map.utilization
    stats.map_duration_s = time.monotonic() - started
    flt = Filter(
        offset_map,
        end_offset=end,
        upper_bound_offset=inputs.first_uncleanable_offset,
        now_ms=inputs.now_ms,
        delete_retention_ms=inputs.log_config.delete_retention_ms,
        barrier=inputs.barrier,
        stats=stats,
        txn=_txn_metadata(inputs),
        expiry_cutoff_ms=inputs.now_ms - ttl_ms if ttl_ms else None,
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
            # An empty segment among others merges into them (Kafka rewrites every group).
            merges = len(group) > 1 and any(source.size_bytes == 0 for source in group)
            facts = [known[source.base_offset] for source in group]
            if not merges and all(f.mapped and not (f.special or f.shadowed) for f in facts):
                # Proven while mapping: every batch stays byte for byte (SegmentEvidence).
                stats.segments_untouched += len(group)
                stats.segments_skipped += len(group)
                records = sum(f.records for f in facts)
                size = sum(f.bytes for f in facts)
                stats.records_read += records
                stats.records_kept += records
                stats.bytes_read += size
                stats.bytes_kept += size
                continue
            before_scan = flt.txn.copy()
            if any(f.mapped and f.shadowed for f in facts):
                changed, group_pending = True, None  # a record of it goes: no need to scan
            else:
                changed, group_pending, records, size = scan_group(
                    inputs.name, readers, flt, abort, throttle
                )
            if not changed and not merges:
                stats.segments_untouched += len(group)
                stats.records_read += records
                stats.records_kept += records
                stats.bytes_read += size
                stats.bytes_kept += size
                pending = min_or_none(pending, group_pending)
                continue
            flt.txn = before_scan  # the scan stopped at the first change: rewrite from the start
            cleaned = LogSegment.create(
                Path(inputs.directory),
                group[0].base_offset,
                config=inputs.log_config,
                file_suffix=CLEANED_SUFFIX,
            )
            cleaned_segments.append(cleaned)
            group_pending = rewrite_group(
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
            pending = min_or_none(pending, group_pending)
            stats.segments_rewritten += len(group)
            stats.groups_swapped += 1
        check_abort(inputs.name, abort)
        if cleaned_segments:
            write_cleaned_txn_indexes(groups, cleaned_segments, replaced)
    except Exception:
        for segment in cleaned_segments:  # an abort or a failure: the .cleaned files go
            segment.delete()
        raise
    stats.pending_delete_horizon_ms = pending
    stats.duration_s = time.monotonic() - started
    return Compacted(stats=stats, cleaned=cleaned_segments, replaced=replaced)


def commit(
    log: Any, segments: Sequence[LogSegment], compacted: Compacted, started: float
) -> CleanerStats:
    """Steps 3 and 4: swap the cleaned segments in, then advance the checkpoint.

    ``segments`` are the snapshot's segment objects (matched to
    ``compacted.replaced`` by base offset).  Every rewritten group is swapped
    in one ``replace_segments`` call, adjacent or not (loader pass L4 deletes
    per ``.swap`` file only the segments inside its own offset range), so a
    crash leaves the whole pass exactly old or exactly new.  Raises
    :class:`CleanerAbortedError` (the cleaned files deleted) if a segment
    left the log meanwhile.
    """
    stats = compacted.stats
    if compacted.cleaned:
        by_base = {segment.base_offset: segment for segment in segments}
        old = [by_base[base] for bases in compacted.replaced for base in bases]
        _swap(log, old, compacted.cleaned, stats.end_offset)  # deleted if it refuses (S0-S1b)
    write_cleaner_checkpoint(log, stats.end_offset)
    record_pending_delete_horizon(log, stats.pending_delete_horizon_ms)
    stats.duration_s = time.monotonic() - started
    _summary_log.info("%s %s", _prefix(log), stats.summary())
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
