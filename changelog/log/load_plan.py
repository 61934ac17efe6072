"""Recovery at open, decided read-only: every change the loader will make, or the error it raises.

:func:`plan_load` reads a partition directory and decides, pass by pass (the
passes L1-L10 of :mod:`changelog.log.loader`), what recovery must do, without
changing a byte.  :func:`changelog.log.loader.load_log` then carries the plan out,
and ``statestore verify`` prints it.  So a refused open has changed nothing
on disk (not even an index), and verify's verdict is open's verdict.

Recovery trusts nothing it can check.  The only data it ever removes is a
*torn tail*: bytes at the end of the active segment, after an unclean
shutdown, at or above the recovery point, that are shaped like a write cut
short (a batch header or body that runs past the end of the file, or bytes
that are all zero, or a batch with a whole zero-filled 4 KiB page, or a batch
whose bytes stop at a 512-byte sector boundary with zeros from there to the end
of the file) and followed by no valid batch.  Zeros are what a preallocated
active segment (``LogConfig.preallocate``) holds past its last batch: a crash
leaves them, and a write cut short inside them leaves the sectors it did not
reach zero.  Everything else is a typed error naming the
file, the position and the offsets:

=====================================================  ===================================
found                                                  error
=====================================================  ===================================
damage in a closed segment (CRC, framing, offsets)     :class:`CorruptRecordError`
damage in the active segment below the recovery point  :class:`CorruptRecordError`
damage followed by a valid batch                       :class:`CorruptRecordError`
damage not shaped like a torn write                    :class:`CorruptRecordError`
a damaged ``.swap`` segment of an interrupted replace  :class:`CorruptRecordError`
a hole or an overlap between two segments              :class:`LogInconsistencyError`
an index file whose ``.log`` is gone, mid-log          :class:`LogInconsistencyError`
a checkpoint that cannot be parsed                     :class:`CorruptCheckpointError`
a checkpoint that disagrees with the segments          :class:`CheckpointMismatchError`
a recovery point above the log end (its tail is gone)  :class:`LogInconsistencyError`
=====================================================  ===================================

The cross-checks behind the last two rows, each an invariant of the writers
(``changelog/log/log.py``): the log start offset only moves to the first segment's
base offset (retention, D3), so ``log-start-offset-checkpoint`` is never above
the first base offset, and equals it after a clean shutdown (C3); the
recovery point is never above the durable log end offset (R4 after R3, C2 after
C1, T0 before T1), and equals the log end offset after a clean shutdown (C2).
Segments are contiguous: each one's next offset is the next one's base offset
(rolls start at the log end offset, truncation and retention remove whole
suffixes and prefixes), except after a segment the cleaner rewrote: it drops
a group's emptied last batch (Kafka's rule), and raises
``cleaner-swap-offset-checkpoint`` above the rewritten segments' base offsets
before it swaps them in (S1b).  So a hole after a segment whose base offset is
below that checkpoint is compaction's, and every other hole is refused.  A
directory that carries no file of ours (no checkpoint, no marker: a copy of a
Kafka broker's directory, whose cleaner leaves holes) is exempt: a hole there
is a warning, and the open records the end of the last one in the swap
checkpoint (L9), so later opens accept those holes and refuse new ones.

Indexes are derived data: one that is missing, unreadable, or disagrees with
its ``.log`` is rebuilt (the segment is then CRC-checked in full first, so the
rebuild cannot cut anything).  A closed segment that is trusted (below the
recovery point, or any segment after a clean shutdown) is not CRC-checked at
open, which would read the whole log at every start: its first batch header,
and the batch headers from its last offset index entry to the end of the file,
must frame exactly, and its next offset must be the next segment's base.  A
flipped bit inside it is found by the CRC when it is read
(:class:`CorruptRecordError` with path and position), never returned.

Thread-safety: pure function of the directory; the caller holds the
directory lock (open) or accepts a racing writer (verify next to a service).
"""

from __future__ import annotations

import array
import functools
import itertools
import logging
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Literal

import attrs

from changelog.config import LogConfig
from changelog.errors import (
    CheckpointMismatchError,
    CorruptIndexError,
    CorruptRecordError,
    LogInconsistencyError,
    LogStorageError,
    UnsupportedFormatError,
)
from changelog.fs import files
from changelog.fs.checkpoint import (
    CLEANER_CHECKPOINT,
    CLEANER_SWAP_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
)
from changelog.fs.files import CLEAN_SHUTDOWN_FILE
from changelog.log.producer_state import ProducerState, replay_segment
from changelog.record.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    declared_size,
    decode_header,
)
from changelog.record.header import field_offset
from changelog.segment.mapped import MappedFile, batch_candidates
from changelog.segment.offset_index import OffsetIndex
from changelog.segment.reader import SegmentReader
from changelog.segment.time_index import TimeIndex

__all__ = [
    "LoadPlan",
    "PlannedSegment",
    "PlannedStep",
    "plan_load",
]

_logger = logging.getLogger(__name__)

_TMP_SUFFIX: Final = ".tmp"
_INDEX_SUFFIXES: Final = (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)
_DERIVED_SUFFIXES: Final = (*_INDEX_SUFFIXES, files.TXN_INDEX_SUFFIX)
"""Files derived from a ``.log``: an orphan of any of them is handled by pass L6."""
_KINDS: Final = (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)
_MAGIC_POSITION: Final = field_offset("magic")
_LAST_OFFSET_DELTA_AT: Final = field_offset("last_offset_delta")
_BASE_OFFSET: Final = struct.Struct(">q")
_DELTA: Final = struct.Struct(">i")
_PAGE: Final = 4096
_SECTOR: Final = 512
"""The unit a disk writes atomically: a write into preallocated zeros cut short by a
power cut leaves whole sectors of it unwritten (zero)."""

Action = Literal[
    "delete", "rename", "truncate", "rebuild-indexes", "create-segment", "write-checkpoint"
]


@attrs.frozen
class PlannedStep:
    """One file operation recovery will do: which pass, what, on which file, and why."""

    pass_name: str
    action: Action
    path: Path
    reason: str
    target: Path | None = None
    position: int | None = None
    offset: int | None = None
    """The offset a ``write-checkpoint`` step writes."""

    def render(self) -> str:
        """``L8 truncate 000...0.log at position 1234: reason`` (one line)."""
        where = f" at position {self.position}" if self.position is not None else ""
        to = f" to {self.target.name}" if self.target is not None else ""
        value = f" = {self.offset}" if self.offset is not None else ""
        return f"{self.pass_name} {self.action} {self.path.name}{value}{to}{where}: {self.reason}"


@attrs.frozen
class PlannedSegment:
    """A segment as it will be once the plan has run (its files may still carry ``.swap`` now)."""

    base_offset: int
    log_path: Path
    """Where its ``.log`` is now."""
    size_bytes: int
    """The ``.log``'s size now."""
    valid_bytes: int
    """Its size after recovery (smaller only for a torn tail of the active segment)."""
    next_offset: int
    revalidated: bool
    """Whether every batch is CRC-checked and both indexes rebuilt (after an unclean shutdown)."""
    rebuild_reasons: tuple[str, ...]
    """Why the indexes of a trusted segment are rebuilt (empty: used as found)."""
    zero_tail: bool = False
    """Whether everything past ``valid_bytes`` is zeros (preallocated space, no torn write)."""

    @property
    def recover(self) -> bool:
        """Whether the loader re-reads the segment and rebuilds its indexes."""
        return self.revalidated or bool(self.rebuild_reasons)


@attrs.frozen
class LoadPlan:
    """What opening the directory will do, and the log it will produce."""

    directory: Path
    had_clean_shutdown: bool
    recovery_point_checkpoint: int | None
    steps: tuple[PlannedStep, ...]
    segments: tuple[PlannedSegment, ...]
    """Empty only when the plan creates the first segment (a new directory)."""
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    warnings: tuple[str, ...]

    @property
    def changes(self) -> bool:
        """Whether opening changes any file (besides deleting the clean-shutdown marker)."""
        return bool(self.steps)


# --------------------------------------------------------------------------- the directory


@attrs.frozen
class _File:
    path: Path
    base: int
    suffix: str
    protocol: str


def _listing(directory: Path) -> list[_File]:
    try:
        children = sorted(directory.iterdir())
    except OSError as exc:
        raise LogStorageError(directory, "list", exc) from exc
    found = []
    for path in children:
        parsed = files.parse_base_offset(path.name)
        if parsed is not None and path.is_file():
            found.append(_File(path, *parsed))
    return found


def _checkpoint(path: Path, topic: str, partition: int) -> int | None:
    """The offset in a checkpoint file of this partition directory; ``None`` if absent.

    The file lives inside the partition directory and our writers put exactly
    one entry in it, so that entry is this partition's even when the
    directory was renamed (an entry of another name is logged at debug level).
    More entries raise :class:`CheckpointMismatchError`; a file that cannot be
    parsed raises :class:`CorruptCheckpointError` (it is written atomically,
    so damage is not a crash's doing).
    """
    entries = read_checkpoint(path)
    if not entries:
        return None
    if len(entries) != 1:
        raise CheckpointMismatchError(
            path,
            None,
            f"holds {len(entries)} entries; this partition directory's checkpoint holds one",
            expected=f"{topic} {partition} <offset>",
            actual=sorted(entries),
        )
    (((name, number), offset),) = entries.items()
    if (name, number) != (topic, partition):
        _logger.debug("%s names %s-%s: the directory was renamed", path, name, number)
    return offset


class _Planner:
    """Passes L1-L6 on a view of the directory: ``view`` maps each ordinary file name that
    will exist after L5 to the path it has now."""

    def __init__(self, directory: Path, *, retention: bool) -> None:
        self.directory = directory
        self.retention = retention
        self.steps: list[PlannedStep] = []
        self.warnings: list[str] = []
        self.view: dict[str, Path] = {}

    def step(self, pass_name: str, action: Action, path: Path, reason: str, **kw: object) -> None:
        self.steps.append(PlannedStep(pass_name, action, path, reason, **kw))  # type: ignore[arg-type]

    def protocol_passes(self, recovery_point: int) -> set[int]:
        """L1-L6; fills ``view``; returns the base offsets that had protocol files."""
        listing = _listing(self.directory)
        try:
            names = sorted(p.name for p in self.directory.iterdir())
        except OSError as exc:
            raise LogStorageError(self.directory, "list", exc) from exc
        for name in names:  # L1
            if name.endswith(_TMP_SUFFIX) and (self.directory / name).is_file():
                self.step("L1", "delete", self.directory / name, "stray temporary file")
        explained = {f.base for f in listing if f.protocol}
        alive: list[_File] = []
        cleaned: list[_File] = []
        swaps: list[_File] = []
        for f in listing:
            if f.protocol == files.DELETED_SUFFIX:  # L2
                self.step("L2", "delete", f.path, "left by a segment deletion")
            elif f.protocol == files.CLEANED_SUFFIX:
                cleaned.append(f)
            elif f.protocol == files.SWAP_SUFFIX:
                swaps.append(f)
            else:
                alive.append(f)
        if cleaned:  # L3
            lowest = min(f.base for f in cleaned)
            kept_swaps = []
            for f in swaps:
                if f.base >= lowest:
                    self.step("L3", "delete", f.path, "its replace did not finish S2")
                else:
                    kept_swaps.append(f)
            swaps = kept_swaps
            for f in cleaned:
                self.step("L3", "delete", f.path, "left by an unfinished clean")
        ranges: list[tuple[int, int]] = []
        for f in swaps:
            if f.suffix == files.LOG_SUFFIX:
                next_offset = _swap_next_offset(f.path, f.base)
                ranges.append((f.base, next_offset))
        if ranges:  # L4
            remaining = []
            for f in alive:
                if any(low <= f.base < high for low, high in ranges):
                    self.step("L4", "delete", f.path, "replaced by the swap being completed")
                else:
                    remaining.append(f)
            alive = remaining
        for f in alive:
            self.view[f.path.name] = f.path
        for f in swaps:  # L5
            name = f.path.name[: -len(files.SWAP_SUFFIX)]
            target = self.directory / name
            self.step("L5", "rename", f.path, "completing an interrupted replace", target=target)
            self.view[name] = f.path
        self._orphans(explained, recovery_point)  # L6
        return explained

    def _orphans(self, explained: set[int], recovery_point: int) -> None:
        logs = sorted(
            files.parse_base_offset(name)[0]  # type: ignore[index]
            for name in self.view
            if name.endswith(files.LOG_SUFFIX)
        )
        lowest, highest = (logs[0], logs[-1]) if logs else (0, -1)
        for name in sorted(self.view):
            parsed = files.parse_base_offset(name)
            assert parsed is not None
            base, suffix, _ = parsed
            if suffix not in _DERIVED_SUFFIXES:
                continue
            if files.segment_file_name(base, files.LOG_SUFFIX) in self.view:
                continue
            log_path = self.directory / files.segment_file_name(base, files.LOG_SUFFIX)
            if base > highest and base <= recovery_point and base not in explained:
                entries = _index_columns(
                    OffsetIndex if suffix == files.INDEX_SUFFIX else TimeIndex,
                    self.view[name],
                )
                if isinstance(entries, tuple) and len(entries[0]):
                    raise LogInconsistencyError(
                        log_path,
                        None,
                        f"the active segment's .log is missing: {name} is here and indexes"
                        f" {len(entries[0])} entries from offset {base} on, and the recovery"
                        f" point {recovery_point} says the log had rolled to it (a roll's"
                        " new files are durable before anything is appended, so only an empty"
                        " index may be left by a crash); restore the file, or delete the"
                        " index files to accept the loss",
                        offset=base,
                    )
            if base < lowest and not self.retention and base not in explained:
                raise LogInconsistencyError(
                    log_path,
                    None,
                    f"the first segment's .log is missing: {name} is here, and a log whose"
                    " cleanup policy has no 'delete' never deletes its oldest segment"
                    " (retention is what leaves such an index behind); restore the file,"
                    " or delete the index files to accept the loss",
                    offset=base,
                )
            if lowest < base < highest and base not in explained:
                raise LogInconsistencyError(
                    log_path,
                    None,
                    f"segment file missing: {name} is here but the .log is gone, so the records"
                    f" from offset {base} up to the next segment are lost; restore the file, or"
                    " delete its index files to accept the gap and open the log",
                    offset=base,
                )
            self.step("L6", "delete", self.view.pop(name), f"orphan index (no {log_path.name})")


def _open_read_only(path: Path, base: int) -> SegmentReader:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise LogStorageError(path, "open", exc) from exc
    try:
        size = os.fstat(fd).st_size
    except OSError as exc:
        os.close(fd)
        raise LogStorageError(path, "stat", exc) from exc
    return SegmentReader(fd, path, base, size, lambda: os.close(fd))


def _swap_next_offset(path: Path, base: int) -> int:
    """The next offset of a ``.swap`` segment (flushed at S1: any damage is an error)."""
    next_offset = base
    with _open_read_only(path, base) as reader:
        for _position, header, _data in reader.batches():
            next_offset = header.next_offset
    return next_offset


# --------------------------------------------------------------------------- segments


def _index_columns(
    kind: type[OffsetIndex] | type[TimeIndex], path: Path | None
) -> tuple[array.array[int], array.array[int]] | str:
    """The entries of an index file, or why it cannot be used (it is then rebuilt)."""
    if path is None:
        suffix = files.INDEX_SUFFIX if kind is OffsetIndex else files.TIME_INDEX_SUFFIX
        return f"its {suffix} file is missing"
    try:
        return kind.read_entries(path)
    except CorruptIndexError as exc:
        return str(exc)


def _whole_batches(reader: SegmentReader, upper: int | None) -> Iterator[BatchHeader]:
    for _position, header, _data in reader.batches(upper_bound=upper):
        yield header


class _SegmentCheck:
    """What one segment's ``.log`` and indexes say."""

    def __init__(self, base: int, paths: dict[str, Path | None]) -> None:
        self.base = base
        log_path = paths[files.LOG_SUFFIX]
        assert log_path is not None
        self.log_path = log_path
        self.paths = paths

    def trusted(self, upper: int | None, is_last: bool) -> PlannedSegment:
        """A segment that was flushed: frame its ends, check its indexes against it."""
        reasons: list[str] = []
        offsets = _index_columns(OffsetIndex, self.paths[files.INDEX_SUFFIX])
        times = _index_columns(TimeIndex, self.paths[files.TIME_INDEX_SUFFIX])
        with _open_read_only(self.log_path, self.base) as reader:
            size = reader.end_position
            start = 0
            if isinstance(offsets, str):
                reasons.append(offsets)
            elif len(offsets[0]):
                entry_offset = self.base + offsets[0][-1]
                entry_position = offsets[1][-1]
                if entry_position >= size:
                    reasons.append(
                        f"its last offset index entry (offset {entry_offset}, position"
                        f" {entry_position}) points past the end of the {size}-byte .log"
                    )
                elif _last_offset_at(reader, entry_position) != entry_offset:
                    reasons.append(
                        f"its last offset index entry (offset {entry_offset}, position"
                        f" {entry_position}) is not the batch ending at that offset"
                    )
                else:
                    start = entry_position
            if isinstance(times, str):
                reasons.append(times)
            if reasons:
                next_offset = self._scan_all(reader, upper, trusted=True, is_last=is_last)
            else:
                next_offset = self._frame(reader, start, is_last=is_last)
                if isinstance(times, tuple) and len(times[1]):
                    last_time_offset = self.base + times[1][-1]
                    if last_time_offset >= next_offset:
                        reasons.append(
                            f"its time index names offset {last_time_offset}, past the"
                            f" segment's last offset {next_offset - 1}"
                        )
                        next_offset = self._scan_all(reader, upper, trusted=True, is_last=is_last)
        return PlannedSegment(
            base_offset=self.base,
            log_path=self.log_path,
            size_bytes=size,
            valid_bytes=size,
            next_offset=next_offset,
            revalidated=False,
            rebuild_reasons=tuple(reasons),
        )

    def _frame(self, reader: SegmentReader, start: int, *, is_last: bool) -> int:
        """Headers of the first batch and from ``start`` to the end must frame exactly.

        On a framing error the same range is read again with CRCs, which names
        the first damaged batch (a flipped length field, outside the CRC as in
        Kafka, would otherwise be reported where the scan lands).
        """
        next_offset = self.base
        try:
            if start > 0:
                next(iter(reader.headers(0)))
            for _position, header in reader.headers(start):
                next_offset = header.next_offset
        except CorruptRecordError as exc:
            first = exc
            next_offset = self.base
            try:
                for _position, header, _data in reader.batches(0 if start == 0 else start):
                    next_offset = header.next_offset
            except CorruptRecordError as precise:
                first = precise
            raise self._closed_damage(first, next_offset, is_last=is_last) from exc
        return next_offset

    def _scan_all(
        self, reader: SegmentReader, upper: int | None, *, trusted: bool, is_last: bool
    ) -> int:
        next_offset = self.base
        try:
            for header in _whole_batches(reader, upper):
                next_offset = header.next_offset
        except CorruptRecordError as exc:
            raise self._closed_damage(exc, next_offset, trusted=trusted, is_last=is_last) from exc
        return next_offset

    def _closed_damage(
        self,
        exc: CorruptRecordError,
        next_offset: int,
        *,
        trusted: bool = True,
        is_last: bool = False,
    ) -> CorruptRecordError:
        if is_last and trusted:
            why = "the log was closed cleanly, so nothing in it may be cut"
        elif trusted:
            why = "the segment is below the recovery point: it was flushed, so nothing in it may be cut"
        else:
            why = "the segment is closed (flushed when the log rolled past it), so nothing in it may be cut"
        return CorruptRecordError(
            exc.path,
            exc.position,
            f"{exc.reason}; damage after offset {next_offset - 1} ({why})",
            expected=exc.expected,
            actual=exc.actual,
            offset=next_offset,
        )

    def revalidated(
        self, upper: int | None, *, is_last: bool, recovery_point: int, strict: bool
    ) -> PlannedSegment:
        """After an unclean shutdown: every batch CRC-checked; only a torn tail may go."""
        with _open_read_only(self.log_path, self.base) as reader:
            size = reader.end_position
            next_offset = self.base
            valid = 0
            try:
                for header in _whole_batches(reader, upper):
                    next_offset = header.next_offset
                    valid += header.size_in_bytes
            except CorruptRecordError as exc:
                position = exc.position if exc.position is not None else valid
                if not is_last:
                    raise self._closed_damage(exc, next_offset, trusted=False) from exc
                valid, next_offset = self._torn_tail(
                    exc, position, next_offset, recovery_point, strict=strict
                )
            else:
                if is_last and strict:
                    with MappedFile(self.log_path) as data:
                        problem = self._indexed_beyond(data, valid, next_offset)
                    if problem is not None:
                        raise LogInconsistencyError(
                            self.log_path,
                            valid,
                            f"the active segment ends at offset {next_offset - 1}, but {problem}",
                            offset=next_offset,
                        )
        zero_tail = valid < size and _all_zero(self.log_path, valid, size)
        return PlannedSegment(
            base_offset=self.base,
            log_path=self.log_path,
            size_bytes=size,
            valid_bytes=valid,
            zero_tail=zero_tail,
            next_offset=next_offset,
            revalidated=True,
            rebuild_reasons=(),
        )

    def _torn_tail(
        self,
        exc: CorruptRecordError,
        position: int,
        next_offset: int,
        recovery_point: int,
        *,
        strict: bool,
    ) -> tuple[int, int]:
        """``(valid bytes, next offset)`` if the damage at ``position`` is a torn tail; else raise.

        Not ``strict`` (a flush policy looser than one fsync per append): any
        damage above the recovery point is cut, with what follows it (Kafka's
        rule), since unflushed appends may have reached the disk in any order.
        """
        with MappedFile(self.log_path) as data:
            problem = None
            zeros = data[position:].count(0) == len(data) - position
            if zeros:
                # The end of the log (preallocated space), whatever the recovery point
                # says: a recovery point above it is refused by the checkpoint cross-check.
                problem = self._indexed_beyond(data, position, next_offset)
            elif next_offset < recovery_point:
                problem = (
                    f"it lies below the recovery point {recovery_point} (those offsets were"
                    " flushed)"
                )
            elif not strict:
                pass
            else:
                after = _valid_batch_after(data, position, self.log_path)
                if after is not None:
                    problem = (
                        f"a valid batch follows at position {after[0]} (offsets"
                        f" {after[1].base_offset}..{after[1].last_offset}), so this is not a torn"
                        " tail"
                    )
                elif not _torn_shaped(data, position):
                    problem = (
                        "it is not shaped like an interrupted write (a whole batch with a bad"
                        " checksum or framing, not cut off by the end of the file nor"
                        " zero-filled)"
                    )
                else:
                    problem = self._indexed_beyond(data, position, next_offset)
        if problem is None:
            return position, next_offset
        raise CorruptRecordError(
            exc.path,
            position,
            f"{exc.reason}; damage in the active segment after offset {next_offset - 1} that"
            f" recovery may not cut: {problem}",
            expected=exc.expected,
            actual=exc.actual,
            offset=next_offset,
        )

    def _indexed_beyond(
        self, data: bytes | mmap.mmap, position: int, next_offset: int
    ) -> str | None:
        """Why the indexes prove batches beyond ``position`` existed and were acknowledged.

        An index entry is written right after its batch (``LogSegment.append``),
        so the batch an entry names was written whole; every batch *before* it
        was acknowledged (fsynced) before it was appended.  So an offset index
        entry at a position past the valid end, or a time index entry naming an
        offset past the torn batch, means the file lost acknowledged batches
        (it was cut), not a write cut short.  Only the batch the last entry names
        may legitimately be torn (its own fsync may not have happened).
        """
        offsets = _index_columns(OffsetIndex, self.paths[files.INDEX_SUFFIX])
        if isinstance(offsets, tuple) and len(offsets[0]) and offsets[1][-1] > position:
            return (
                f"its offset index names a batch at position {offsets[1][-1]} (ending at offset"
                f" {self.base + offsets[0][-1]}), past the valid end {position}: acknowledged"
                " batches before that one are gone (the file was cut), not a torn write"
            )
        times = _index_columns(TimeIndex, self.paths[files.TIME_INDEX_SUFFIX])
        if isinstance(times, tuple) and len(times[1]):
            named = self.base + times[1][-1]
            torn_last = _torn_last_offset(data, position)
            if named >= next_offset and torn_last is not None and named > torn_last:
                return (
                    f"its time index names offset {named}, which is neither before the damage"
                    f" nor in the torn batch: acknowledged batches are gone (the file was cut)"
                )
        return None


def _written_end(data: bytes | mmap.mmap, position: int) -> int:
    """The position after the last byte that is not zero (``position`` if none is): past it,
    preallocated zeros that no write reached."""
    return position + len(bytes(data[position:]).rstrip(b"\0"))


def _torn_last_offset(data: bytes | mmap.mmap, position: int) -> int | None:
    """The last offset the torn batch at ``position`` declares, if its header got that far."""
    if min(len(data), _written_end(data, position)) - position < _LAST_OFFSET_DELTA_AT + 4:
        return None
    base: int = _BASE_OFFSET.unpack_from(data, position)[0]
    delta: int = _DELTA.unpack_from(data, position + _LAST_OFFSET_DELTA_AT)[0]
    return base + delta


def _last_offset_at(reader: SegmentReader, position: int) -> int | None:
    """The last offset of the batch whose header is at ``position``, ``None`` if there is none."""
    try:
        for _position, header in reader.headers(position):
            return header.last_offset
    except (CorruptRecordError, UnsupportedFormatError):
        return None
    return None


def _all_zero(path: Path, start: int, end: int) -> bool:
    """Whether ``path`` holds only zeros in ``[start, end)``."""
    with MappedFile(path) as data:
        return data[start:end].count(0) == end - start


def _torn_shaped(data: bytes | mmap.mmap, position: int) -> bool:
    """Whether the bytes from ``position`` look like a write cut short (see the module docstring)."""
    remaining = len(data) - position
    if remaining < LOG_OVERHEAD:
        return True
    written = _written_end(data, position)  # zeros from there on (preallocated)
    if written == position:
        return True
    zeros_from = -(-written // _SECTOR) * _SECTOR  # a write cut short stops at a sector
    if zeros_from < min(len(data), position + BATCH_HEADER_SIZE):
        return True  # the header itself cut short inside preallocated zeros
    size = declared_size(data, position)
    if size < BATCH_HEADER_SIZE:
        return False  # no batch of a real write declares that
    if remaining > _MAGIC_POSITION and data[position + _MAGIC_POSITION] != MAGIC:
        return False
    if size > remaining:
        return True
    if zeros_from < min(len(data), position + size):
        return True  # cut at a sector boundary inside preallocated zeros
    end = position + size if size >= BATCH_HEADER_SIZE else len(data)
    page = -(-position // _PAGE) * _PAGE
    zero = bytes(_PAGE)
    while page + _PAGE <= end:
        if data[page : page + _PAGE] == zero:
            return True
        page += _PAGE
    return False


def _valid_batch_after(
    data: bytes | mmap.mmap, position: int, path: Path
) -> tuple[int, BatchHeader] | None:
    """The first position after ``position`` where a whole, CRC-valid batch starts."""
    for candidate in batch_candidates(data, position):
        try:
            header = decode_header(data, candidate, path=path, validate=True)
        except UnsupportedFormatError:
            return candidate, decode_header(data, candidate, path=path)
        except CorruptRecordError:
            continue
        return candidate, header
    return None


# --------------------------------------------------------------------------- the plan


def plan_load(
    directory: Path, *, topic: str, partition: int, config: LogConfig | None = None
) -> LoadPlan:
    """Decide passes L1-L10 for ``directory`` (read-only); raise the error open would raise.

    Two settings of ``config`` (default: :class:`LogConfig`'s defaults, which
    is what ``statestore verify`` assumes) matter.  ``flush_messages == 1``
    says the log was written with the default flush policy
    (``flush_messages=1``: every acknowledged append fsynced), which is what
    makes "only a torn last batch" the only crash damage; with a looser policy
    the active segment's damage above the recovery point is cut (see
    :meth:`_SegmentCheck._torn_tail`).  A ``cleanup_policy`` with ``delete``
    allows retention (only then may the oldest segments go, so only then is an
    index file below the first ``.log`` a leftover rather than a lost segment).
    """
    config = config if config is not None else LogConfig()
    flush_per_append = config.flush_messages == 1
    retention = "delete" in config.cleanup_policy
    planner = _Planner(directory, retention=retention)
    marker = directory / CLEAN_SHUTDOWN_FILE
    had_clean_shutdown = marker.exists()
    rp_path = directory / RECOVERY_POINT_CHECKPOINT
    ls_path = directory / LOG_START_OFFSET_CHECKPOINT
    checkpointed_rp = _checkpoint(rp_path, topic, partition)
    checkpointed_start = _checkpoint(ls_path, topic, partition)
    if had_clean_shutdown:
        for path, value in ((rp_path, checkpointed_rp), (ls_path, checkpointed_start)):
            if value is None:
                raise CheckpointMismatchError(
                    path,
                    None,
                    f"missing, yet {CLEAN_SHUTDOWN_FILE} says the log was closed cleanly"
                    " (a clean close writes it before the marker)",
                )
    planner.protocol_passes(checkpointed_rp or 0)  # L1-L6
    segments = _plan_segments(
        planner, had_clean_shutdown, checkpointed_rp, strict=flush_per_append
    )  # L7-L8
    foreign = (
        checkpointed_rp is None
        and checkpointed_start is None
        and not had_clean_shutdown
        and not (directory / CLEANER_CHECKPOINT).exists()
        and not (directory / CLEANER_SWAP_CHECKPOINT).exists()
    )
    adopted = _check_contiguous(segments, directory, foreign=foreign, warnings=planner.warnings)
    # L9
    if adopted is not None:
        planner.step(
            "L9",
            "write-checkpoint",
            directory / CLEANER_SWAP_CHECKPOINT,
            "a directory without our checkpoints (a Kafka broker's) whose cleaner left holes"
            " between segments: they are recorded as compaction's, so later opens accept them",
            offset=adopted,
        )
    if not segments:
        for path, value in ((rp_path, checkpointed_rp), (ls_path, checkpointed_start)):
            if value:
                raise LogInconsistencyError(
                    directory,
                    None,
                    f"no segment file, yet {path.name} holds offset {value}: every segment of"
                    " the log is missing",
                    offset=0,
                )
        planner.step(
            "L9",
            "create-segment",
            directory / files.segment_file_name(0, files.LOG_SUFFIX),
            "a new log",
        )
        first_base, log_end = 0, 0
    else:
        first_base, log_end = segments[0].base_offset, segments[-1].next_offset
    if checkpointed_start is not None and checkpointed_start > first_base:
        raise CheckpointMismatchError(
            ls_path,
            None,
            f"log start offset {checkpointed_start} is above the first segment's base offset"
            f" {first_base}; the log start offset only moves to a segment's base offset, so"
            " the checkpoint is damaged (or segment files were added)",
            expected=f"<= {first_base}",
            actual=checkpointed_start,
        )
    if had_clean_shutdown and checkpointed_start is not None and checkpointed_start < first_base:
        raise LogInconsistencyError(
            directory / files.segment_file_name(first_base, files.LOG_SUFFIX),
            None,
            f"the log was closed cleanly with log start offset {checkpointed_start}, but the"
            f" first segment starts at {first_base}: the segments holding offsets"
            f" [{checkpointed_start}, {first_base}) are missing",
            offset=checkpointed_start,
        )
    if checkpointed_rp is not None:
        if checkpointed_rp > log_end:
            raise LogInconsistencyError(
                directory,
                None,
                f"the log ends at offset {log_end}, below the recovery point {checkpointed_rp}"
                f" in {rp_path.name}: flushed offsets [{log_end}, {checkpointed_rp}) are"
                " missing (segment files at the end of the log are gone), or the checkpoint"
                " is damaged",
                expected=f"recovery point <= {log_end}",
                actual=checkpointed_rp,
                offset=log_end,
            )
        if had_clean_shutdown and checkpointed_rp != log_end:
            raise CheckpointMismatchError(
                rp_path,
                None,
                f"recovery point {checkpointed_rp} is not the log end offset {log_end}, yet the"
                " log was closed cleanly (a clean close checkpoints its log end offset)",
                expected=log_end,
                actual=checkpointed_rp,
            )
    _check_producer_state(segments)  # L10's reads, so a batch it would refuse is refused here
    log_start = max(checkpointed_start or 0, first_base)
    recovery_point = log_end if had_clean_shutdown else min(checkpointed_rp or 0, log_end)
    return LoadPlan(
        directory=directory,
        had_clean_shutdown=had_clean_shutdown,
        recovery_point_checkpoint=checkpointed_rp,
        steps=tuple(planner.steps),
        segments=tuple(segments),
        log_start_offset=log_start,
        log_end_offset=log_end,
        recovery_point=recovery_point,
        warnings=tuple(planner.warnings),
    )


def _plan_segments(
    planner: _Planner, had_clean_shutdown: bool, checkpointed_rp: int | None, *, strict: bool
) -> list[PlannedSegment]:
    """Passes L7 (trusted segments) and L8 (re-validated ones), read-only."""
    bases = sorted(
        files.parse_base_offset(name)[0]  # type: ignore[index]
        for name in planner.view
        if name.endswith(files.LOG_SUFFIX)
    )
    recovery_point = checkpointed_rp or 0
    first_revalidated = len(bases)
    if not had_clean_shutdown and bases:
        first_revalidated = max(
            (i for i, base in enumerate(bases) if base <= recovery_point), default=0
        )
    planned: list[PlannedSegment] = []
    for i, base in enumerate(bases):
        paths = {kind: planner.view.get(files.segment_file_name(base, kind)) for kind in _KINDS}
        check = _SegmentCheck(base, paths)
        upper = bases[i + 1] if i + 1 < len(bases) else None
        is_last = upper is None
        if i >= first_revalidated:
            segment = check.revalidated(
                upper, is_last=is_last, recovery_point=recovery_point, strict=strict
            )
            if segment.valid_bytes < segment.size_bytes:
                planner.step(
                    "L8",
                    "truncate",
                    planner.directory / files.segment_file_name(base, files.LOG_SUFFIX),
                    (
                        f"zero-filled tail of {segment.size_bytes - segment.valid_bytes} bytes"
                        f" after offset {segment.next_offset - 1} (preallocated space past the"
                        " last batch)"
                    )
                    if segment.zero_tail
                    else f"torn tail of {segment.size_bytes - segment.valid_bytes} bytes after"
                    f" offset {segment.next_offset - 1} (a write cut short by the crash)",
                    position=segment.valid_bytes,
                )
            planner.step(
                "L8",
                "rebuild-indexes",
                planner.directory / files.segment_file_name(base, files.LOG_SUFFIX),
                "re-validated after an unclean shutdown",
            )
        else:
            segment = check.trusted(upper, is_last)
            if segment.rebuild_reasons:
                planner.step(
                    "L7",
                    "rebuild-indexes",
                    planner.directory / files.segment_file_name(base, files.LOG_SUFFIX),
                    "; ".join(segment.rebuild_reasons),
                )
        planned.append(segment)
    return planned


def _check_producer_state(segments: list[PlannedSegment]) -> None:
    """Pass L10, read-only: replay every batch header (and CRC-check each control batch) of
    the segments as recovery leaves them, raising what the loader's L10 would raise."""
    state = ProducerState()
    for segment in segments:
        fd = -1
        try:
            fd = os.open(segment.log_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise LogStorageError(segment.log_path, "open", exc) from exc
        reader = SegmentReader(
            fd,
            segment.log_path,
            segment.base_offset,
            segment.valid_bytes,
            functools.partial(os.close, fd),
        )
        with reader:
            replay_segment(state, reader)


def _swap_checkpoint(directory: Path) -> int | None:
    """The offset in ``cleaner-swap-offset-checkpoint``, ``None`` if there is none.

    A file that cannot be parsed raises :class:`CorruptCheckpointError` (it is
    written atomically: damage is not a crash's doing); only a log with a hole
    between segments reads it, so its damage never refuses a log without one."""
    entries = read_checkpoint(directory / CLEANER_SWAP_CHECKPOINT)
    return max(entries.values(), default=None)


def _check_contiguous(
    segments: list[PlannedSegment], directory: Path, *, foreign: bool, warnings: list[str]
) -> int | None:
    """Each segment's next offset is the next one's base offset, except where compaction made
    a hole; raise :class:`LogInconsistencyError` for any other hole or an overlap.

    The cleaner drops a group's emptied last batch (Kafka's rule), so a cleaned segment may
    end before the next one begins; before its swap it raises the swap checkpoint above the
    base offset of every segment it rewrote (step S1b of :mod:`changelog.log.replace`).  So a
    hole after a segment whose base offset is below the swap checkpoint is compaction's, and
    any other hole is damage (a closed segment cut at a batch boundary, a middle segment lost
    with all its files).  A ``foreign`` directory (none of our checkpoints: a Kafka broker's
    partition copied in) is allowed its holes, with a warning; the offset returned is then
    the swap checkpoint the open records for them (the end of the last hole), else ``None``.
    """
    proof: int | None = None
    proof_read = False
    adopted: int | None = None
    for current, following in itertools.pairwise(segments):
        if current.next_offset == following.base_offset:
            continue
        if current.next_offset > following.base_offset:
            raise LogInconsistencyError(
                current.log_path,
                current.size_bytes,
                f"segments overlap: {current.log_path.name} ends at offset"
                f" {current.next_offset - 1}, but the next segment starts at"
                f" {following.base_offset}",
                expected=following.base_offset,
                actual=current.next_offset,
                offset=following.base_offset,
            )
        message = (
            f"hole between segments: {current.log_path.name} ends at offset"
            f" {current.next_offset - 1} (its .log is {current.size_bytes} bytes), the next"
            f" segment starts at {following.base_offset}: offsets"
            f" [{current.next_offset}, {following.base_offset}) are missing"
        )
        if foreign:
            warnings.append(
                message + " (a directory without our checkpoints: allowed, as a Kafka"
                " broker's cleaner may leave such holes)"
            )
            adopted = following.base_offset
            continue
        if not proof_read:
            proof, proof_read = _swap_checkpoint(directory), True
        if proof is not None and current.base_offset < proof:
            continue  # compacted: the cleaner made this hole (S1b made it durable first)
        why = (
            f"{CLEANER_SWAP_CHECKPOINT} is missing"
            if proof is None
            else f"{CLEANER_SWAP_CHECKPOINT} holds {proof}, not above its base offset"
            f" {current.base_offset}"
        )
        raise LogInconsistencyError(
            current.log_path,
            current.size_bytes,
            f"{message}, and compaction cannot explain it ({why}: nothing says a cleaning pass rewrote"
            " this segment): the segment was cut at a batch boundary, or the segments"
            " holding those offsets were lost; restore the files, or accept the loss"
            " explicitly (docs/recovery.md)",
            expected=following.base_offset,
            actual=current.next_offset,
            offset=current.next_offset,
        )
    return adopted
