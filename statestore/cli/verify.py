"""``statestore verify``: check every byte of a state directory's changelogs, read-only.

For every partition directory (a directory holding ``<20-digit offset>.log``
files) found under the given path:

1. every batch of every ``.log`` file: framing (length, magic), CRC-32C over
   attributes..end, offsets increasing within and across segments;
2. the ``.index`` and ``.timeindex`` of every segment: whole entries, offsets
   (and positions, timestamps) increasing, each offset index entry pointing at
   the start of a batch that holds its offset, nothing past the log's end;
3. the checkpoint files (``recovery-point-offset-checkpoint``,
   ``cleaner-offset-checkpoint``, ``log-start-offset-checkpoint``): Kafka's
   text format (version ``0``, a count, ``topic partition offset`` lines);
4. leftovers of an interrupted segment replace (``.cleaned``, ``.swap``,
   ``.deleted`` files), which the next open recovers.

Severity follows what the next open would do (the loader's passes in
:mod:`changelog.loader`).  An *error* is data that is not what was written
and that the next open does not simply repair: a CRC mismatch or a broken
frame (each message says whether the next open truncates the log there, in
a segment it re-validates after an unclean shutdown, or whether reads will
fail), an unparsable checkpoint, a bad index of a segment the loader will
use as found, a torn tail in a partition marked as cleanly closed;
``verify`` then exits 1.  A *warning* is a state the next open repairs by
itself without losing anything acknowledged: a torn tail after an unclean
shutdown (an incomplete last batch left by a crash mid-append: truncated),
a bad or missing index of a segment that will be re-validated (rebuilt).
``--strict`` makes warnings fail too.

Nothing is opened for writing and no lock is taken: verify works next to a
running service (its active segment may then show a torn tail in progress).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Literal

import attrs

from changelog.errors import CorruptRecordError, UnsupportedFormatError
from changelog.fs.checkpoint import (
    CLEANER_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)
from changelog.fs.files import (
    CLEAN_SHUTDOWN_FILE,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    parse_base_offset,
    segment_file_name,
)
from changelog.record.batch import BatchHeader, decode_header, validate_batch
from statestore.cli.dump import read_index_entries, read_time_index_entries
from statestore.cli.errors import UsageError
from statestore.cli.progress import Progress
from statestore.cli.statedir import mapped

__all__ = [
    "CHECKPOINT_FILES",
    "PartitionReport",
    "Problem",
    "verify_partition",
]

Severity = Literal["error", "warning", "info"]

CHECKPOINT_FILES: Final = (
    RECOVERY_POINT_CHECKPOINT,
    CLEANER_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
)
_MAGIC_POSITION: Final = 16
_LENGTH: Final = struct.Struct(">q i")


@attrs.frozen
class Problem:
    """One finding: its severity, the file, the byte position (if any) and what is wrong."""

    severity: Severity
    path: Path
    position: int | None
    message: str

    def render(self) -> str:
        """``ERROR path at position N: message`` (one line)."""
        where = (
            str(self.path) if self.position is None else f"{self.path} at position {self.position}"
        )
        return f"{self.severity.upper()} {where}: {self.message}"


@attrs.define
class PartitionReport:
    """What verify found in one partition directory."""

    directory: Path
    segments: int = 0
    batches: int = 0
    records: int = 0
    size_bytes: int = 0
    problems: list[Problem] = attrs.field(factory=list)

    @property
    def errors(self) -> int:
        """Number of errors."""
        return sum(1 for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> int:
        """Number of warnings."""
        return sum(1 for p in self.problems if p.severity == "warning")


@attrs.frozen
class _Segment:
    base_offset: int
    log: Path
    index: Path
    time_index: Path


def _segments(directory: Path, report: PartitionReport) -> list[_Segment]:
    bases: set[int] = set()
    for child in directory.iterdir():
        parsed = parse_base_offset(child.name)
        if parsed is None:
            continue
        base, suffix, protocol = parsed
        if protocol:
            report.problems.append(
                Problem(
                    "info",
                    child,
                    None,
                    f"leftover {protocol} file of an interrupted segment replace "
                    "(recovered at the next open)",
                )
            )
        elif suffix == LOG_SUFFIX:
            bases.add(base)
    return [
        _Segment(
            base,
            directory / segment_file_name(base, LOG_SUFFIX),
            directory / segment_file_name(base, INDEX_SUFFIX),
            directory / segment_file_name(base, TIME_INDEX_SUFFIX),
        )
        for base in sorted(bases)
    ]


def _is_torn(data: bytes, position: int) -> bool:
    """Whether the bytes from ``position`` are the start of a batch cut off by the end of file."""
    remaining = len(data) - position
    if remaining < _LENGTH.size:
        return True
    length: int = _LENGTH.unpack_from(data, position)[1]
    if remaining <= _MAGIC_POSITION:
        return length > 0
    return data[position + _MAGIC_POSITION] == 2 and length > 0 and length + 12 > remaining


def _consequence(recovered: bool, offset: int | None) -> str:
    """What the next open does about a bad batch, as the loader (pass L8) would."""
    if recovered:
        after = "" if offset is None else f" (offsets from {offset} on)"
        return (
            f"; the next open truncates the log here and drops everything after it{after}, "
            "as Kafka's recovery does"
        )
    return "; the loader does not re-validate this segment, so reading it fails (docs/recovery.md)"


def _check_log(
    segment: _Segment,
    data: bytes,
    *,
    is_last: bool,
    recovered: bool,
    clean_shutdown: bool,
    previous_next_offset: int | None,
    report: PartitionReport,
    progress: Progress,
) -> tuple[dict[int, BatchHeader], int, int | None]:
    """Walk one ``.log``: returns its batches by position, its valid size and its next offset.

    ``recovered``: the next open re-validates this segment (no clean-shutdown
    marker, at or after the recovery point) and truncates at its first bad batch.
    """
    path = segment.log
    batches: dict[int, BatchHeader] = {}
    next_offset = previous_next_offset
    position = 0
    while position < len(data):
        try:
            header = decode_header(data, position, path=path)
        except (CorruptRecordError, UnsupportedFormatError) as exc:
            size = len(data) - position
            if is_last and recovered and _is_torn(data, position):
                report.problems.append(
                    Problem(
                        "warning",
                        path,
                        position,
                        f"torn tail: {size} bytes of an incomplete batch after the last whole "
                        "one (left by a crash mid-append: never acknowledged; the next open "
                        "truncates it)",
                    )
                )
            elif is_last and clean_shutdown and _is_torn(data, position):
                report.problems.append(
                    Problem(
                        "error",
                        path,
                        position,
                        f"torn tail: {size} bytes of an incomplete batch, yet the partition was "
                        f"closed cleanly ({CLEAN_SHUTDOWN_FILE} is present), so the next open "
                        "trusts the file and fails",
                    )
                )
            else:
                report.problems.append(
                    Problem(
                        "error",
                        path,
                        position,
                        f"{getattr(exc, 'reason', exc)}; the {size} bytes from here cannot be "
                        f"read{_consequence(recovered, next_offset)}",
                    )
                )
            break
        try:
            validate_batch(data, position, header, path=path)
        except CorruptRecordError as exc:
            report.problems.append(
                Problem(
                    "error",
                    path,
                    position,
                    f"record batch at offsets {header.base_offset}..{header.last_offset} fails "
                    f"its CRC-32C check (stored {exc.expected}, computed {exc.actual})"
                    f"{_consequence(recovered, header.base_offset)}",
                )
            )
        if header.base_offset < segment.base_offset:
            report.problems.append(
                Problem(
                    "error",
                    path,
                    position,
                    f"batch base offset {header.base_offset} is below the segment's base "
                    f"offset {segment.base_offset}",
                )
            )
        if next_offset is not None and header.base_offset < next_offset:
            report.problems.append(
                Problem(
                    "error",
                    path,
                    position,
                    f"offsets go backwards: batch starts at {header.base_offset}, "
                    f"the previous one ended before {next_offset}",
                )
            )
        batches[position] = header
        report.batches += 1
        report.records += header.records_count
        next_offset = header.next_offset
        position += header.size_in_bytes
        progress.advance(header.size_in_bytes)
    progress.advance(len(data) - position)
    return batches, position, next_offset


def _check_offset_index(
    segment: _Segment,
    batches: dict[int, BatchHeader],
    valid_size: int,
    severity: Severity,
    report: PartitionReport,
) -> None:
    path = segment.index
    if not path.exists():
        report.problems.append(
            Problem("warning", path, None, "offset index is missing (rebuilt at the next open)")
        )
        return
    data = path.read_bytes()
    if len(data) % 8:
        report.problems.append(
            Problem(severity, path, None, f"size {len(data)} is not a multiple of the 8-byte entry")
        )
    previous: tuple[int, int] | None = None
    for i, (offset, position) in enumerate(read_index_entries(data, segment.base_offset)):
        where = i * 8
        header = batches.get(position)
        if previous is not None and (offset <= previous[0] or position <= previous[1]):
            report.problems.append(
                Problem(
                    severity,
                    path,
                    where,
                    f"entry {i} (offset {offset}, position {position}) does not increase over "
                    f"entry {i - 1} (offset {previous[0]}, position {previous[1]})",
                )
            )
        elif position >= valid_size or header is None:
            report.problems.append(
                Problem(
                    severity,
                    path,
                    where,
                    f"entry {i} points at position {position}, which is not the start of a batch "
                    f"in {segment.log.name} ({valid_size} valid bytes)",
                )
            )
        elif not header.base_offset <= offset <= header.last_offset:
            report.problems.append(
                Problem(
                    severity,
                    path,
                    where,
                    f"entry {i} says offset {offset} is at position {position}, but the batch "
                    f"there holds offsets {header.base_offset}..{header.last_offset}",
                )
            )
        previous = (offset, position)


def _check_time_index(
    segment: _Segment, last_offset: int | None, severity: Severity, report: PartitionReport
) -> None:
    path = segment.time_index
    if not path.exists():
        report.problems.append(
            Problem("warning", path, None, "time index is missing (rebuilt at the next open)")
        )
        return
    data = path.read_bytes()
    if len(data) % 12:
        report.problems.append(
            Problem(
                severity, path, None, f"size {len(data)} is not a multiple of the 12-byte entry"
            )
        )
    previous: tuple[int, int] | None = None
    for i, (timestamp, offset) in enumerate(read_time_index_entries(data, segment.base_offset)):
        where = i * 12
        if previous is not None and (timestamp < previous[0] or offset < previous[1]):
            report.problems.append(
                Problem(
                    severity,
                    path,
                    where,
                    f"entry {i} (timestamp {timestamp}, offset {offset}) goes backwards from "
                    f"entry {i - 1} (timestamp {previous[0]}, offset {previous[1]})",
                )
            )
        elif last_offset is not None and offset > last_offset:
            report.problems.append(
                Problem(
                    severity,
                    path,
                    where,
                    f"entry {i} points at offset {offset}, past the segment's last offset {last_offset}",
                )
            )
        previous = (timestamp, offset)


def _checkpoint_offset(path: Path) -> int | None:
    """The offset in a one-entry checkpoint file, or ``None`` (absent or unreadable: the loader
    then uses 0)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        return int(lines[2].split(" ")[2]) if len(lines) >= 3 and lines[0] == "0" else None
    except (OSError, UnicodeDecodeError, ValueError, IndexError):
        return None


def _check_checkpoint(path: Path, report: PartitionReport) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        report.problems.append(Problem("error", path, None, "checkpoint file is not UTF-8 text"))
        return
    lines = text.splitlines()
    position = 0

    def bad(line_number: int, reason: str) -> None:
        report.problems.append(
            Problem(
                "error", path, position, f"line {line_number}: {reason} (Kafka checkpoint format)"
            )
        )

    if not lines or lines[0].strip() != "0":
        bad(1, f"version must be 0, found {lines[0][:20]!r}" if lines else "empty file")
        return
    position += len(lines[0]) + 1
    if len(lines) < 2 or not lines[1].strip().isdigit():
        bad(2, "missing or bad entry count")
        return
    count = int(lines[1])
    position += len(lines[1]) + 1
    entries = lines[2:]
    if len(entries) != count:
        bad(2, f"count says {count} entries, found {len(entries)}")
        return
    for number, line in enumerate(entries, start=3):
        parts = line.split(" ")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].lstrip("-").isdigit():
            bad(number, f"expected 'topic partition offset', found {line[:60]!r}")
            return
        position += len(line) + 1


def verify_partition(directory: Path, progress: Progress) -> PartitionReport:
    """Check one partition directory (see the module docstring); never raises on bad data."""
    report = PartitionReport(directory)
    clean_shutdown = (directory / CLEAN_SHUTDOWN_FILE).exists()
    recovery_point = _checkpoint_offset(directory / RECOVERY_POINT_CHECKPOINT)
    segments = _segments(directory, report)
    report.segments = len(segments)
    # Pass L8 of the loader: without a clean-shutdown marker, every segment from the one
    # holding the recovery point on is re-validated (and cut at its first bad batch).
    first_recovered = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= (recovery_point or 0):
            first_recovered = i
    next_offset: int | None = None
    for i, segment in enumerate(segments):
        is_last = i == len(segments) - 1
        recovered = not clean_shutdown and i >= first_recovered
        if next_offset is not None and segment.base_offset < next_offset:
            report.problems.append(
                Problem(
                    "error",
                    segment.log,
                    None,
                    f"segment base offset {segment.base_offset} overlaps the previous segment, "
                    f"which ends before {next_offset}",
                )
            )
        try:
            with mapped(segment.log) as data:
                report.size_bytes += len(data)
                batches, valid_size, next_offset = _check_log(
                    segment,
                    data,
                    is_last=is_last,
                    recovered=recovered,
                    clean_shutdown=clean_shutdown,
                    previous_next_offset=next_offset,
                    report=report,
                    progress=progress,
                )
        except UsageError as exc:
            if segment.log.exists():
                report.problems.append(Problem("error", segment.log, None, str(exc)))
            else:  # a running service's cleaner replaced it: not a problem of the data
                report.problems.append(
                    Problem(
                        "warning",
                        segment.log,
                        None,
                        "vanished while verify ran (the cleaner replaced it); run verify again",
                    )
                )
            continue
        # Indexes of re-validated segments are rebuilt at open; others are used as found.
        severity: Severity = "warning" if recovered else "error"
        _check_offset_index(segment, batches, valid_size, severity, report)
        last_offset = max((h.last_offset for h in batches.values()), default=None)
        _check_time_index(segment, last_offset, severity, report)
    for name in CHECKPOINT_FILES:
        path = directory / name
        if path.exists():
            _check_checkpoint(path, report)
    return report


def total_log_bytes(partitions: list[Path]) -> int:
    """Bytes of all ``.log`` files under ``partitions`` (the progress total; a file the
    cleaner deletes meanwhile counts as empty)."""
    total = 0
    for directory in partitions:
        for child in _iter_logs(directory):
            with contextlib.suppress(FileNotFoundError):
                total += child.stat().st_size
    return total


def _iter_logs(directory: Path) -> Iterator[Path]:
    for child in directory.iterdir():
        parsed = parse_base_offset(child.name)
        if parsed is not None and parsed[1] == LOG_SUFFIX and not parsed[2]:
            yield child
