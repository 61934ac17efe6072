"""``statestore verify``: the loader's recovery run read-only, then every byte CRC-checked.

For every partition directory (a directory holding ``<20-digit offset>.log``
files) found under the given path, two things, neither of which writes a byte
or takes a lock (verify works next to a running service):

1. **What the next open will do.**  :func:`changelog.log.load_plan.plan_load` is
   the very function ``Log.open`` runs before it changes anything: the same
   passes (L1-L10), the same checks, the same verdict.  If it raises, the next
   open is refused with that error (reported as an *error*, with the file,
   the position and the offset).  Otherwise every step it plans is reported:
   a torn tail it will cut, indexes it will rebuild (*warnings*: repairs
   that lose nothing acknowledged), leftovers of an interrupted replace it
   will finish (*info*).
2. **What reads will find.**  For a partition the open refuses, every segment
   is still read past damage (:func:`changelog.repair.scan.walk`): each damaged
   range the refusal does not name is an *error* of its own.  Otherwise:
   the loader does not re-read segments that were
   flushed (below the recovery point, or everything after a clean shutdown).
   verify reads every batch of them: a batch that fails its CRC-32C or
   framing is an *error* (the next open succeeds, but reading that batch
   raises ``CorruptRecordError``), and so is a batch whose CRC checks out but
   whose records do not decompress or parse (verify decodes every batch, as the
   store's restore does), as is an unparsable
   ``cleaner-offset-checkpoint`` (the loader does not read it).

verify plans with the changelog settings recorded in the store's metadata
file beside the partition directory (``<store>.metadata.json``: the flush
policy and the cleanup policy matter), as the open does; a damaged metadata
file is an error (the open refuses it too).  A partition directory without
one (given alone, or from before the file existed) is planned with
:class:`~changelog.config.LogConfig`'s defaults (one fsync per append,
cleanup policy ``compact``): a log written with another flush policy or
with retention may then be judged more strictly than its own open judges it.

3. **What the store open will say about its partitions.**  For every store
   metadata file in a state directory that is verified, the partition
   directories the file records must all be there and no other: a missing
   ``<store>-changelog-<p>`` directory (deleted by hand, lost) is an *error*,
   exactly as the store's open refuses it (``StoreLayoutError``); it is
   reported as a partition row of its own.  So is a transaction coordinator's
   log (``__transaction_state-0``) that is missing or holds no record while a
   changelog holds transactional batches: the open refuses that too
   (``TransactionStateMissingError``).

``verify`` exits 1 on errors (and on warnings with ``--strict``).  The JSON
output carries the open verdict on its own (``open.refused``, ``open.error``,
``open.steps``), which a test holds equal to what ``Log.open`` then does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Literal

import attrs

from changelog.errors import (
    ChangelogError,
    CorruptDataError,
    CorruptRecordError,
    UnsupportedFormatError,
)
from changelog.fs.checkpoint import (
    CLEANER_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
)
from changelog.fs.files import LOG_SUFFIX, parse_base_offset
from changelog.log.load_plan import LoadPlan, PlannedSegment, plan_load
from changelog.log.log_dir import parse_topic_partition
from changelog.record.batch import decode_header, decode_key_values
from statestore.cli.errors import UsageError
from statestore.cli.progress import Progress
from statestore.cli.statedir import mapped, recorded_log_config
from statestore.errors import CorruptStoreMetadataError
from statestore.stores.metadata import METADATA_SUFFIX, partitions_on_disk, read_metadata
from statestore.stores.spec import changelog_dir
from statestore.txn.coordinator import lost_transaction_state

__all__ = [
    "CHECKPOINT_FILES",
    "OpenVerdict",
    "PartitionReport",
    "Problem",
    "verify_partition",
    "verify_store_layouts",
]

Severity = Literal["error", "warning", "info"]

CHECKPOINT_FILES: Final = (
    RECOVERY_POINT_CHECKPOINT,
    CLEANER_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
)


_TRUSTED_REBUILD_PASS: Final = "L7"  # noqa: S105 - a pass name, not a password
"""Index rebuilds of flushed segments are warnings; L8's after a crash are routine (info)."""


@attrs.frozen
class Problem:
    """One finding: its severity, the file, the byte position (if any) and what is wrong."""

    severity: Severity
    path: Path
    position: int | None
    message: str
    offset: int | None = None
    """The first offset the problem affects, when known (``verify --json`` carries it)."""

    def doc(self) -> dict[str, object]:
        """The problem as a JSON object."""
        return {
            "severity": self.severity,
            "path": str(self.path),
            "position": self.position,
            "offset": self.offset,
            "message": self.message,
        }

    def render(self) -> str:
        """``ERROR path at position N: message`` (one line)."""
        where = (
            str(self.path) if self.position is None else f"{self.path} at position {self.position}"
        )
        return f"{self.severity.upper()} {where}: {self.message}"


@attrs.frozen
class OpenVerdict:
    """What the next ``Log.open`` does: refuse (``error`` names the type), or run ``steps``."""

    refused: bool
    error: str | None
    path: Path | None
    position: int | None
    steps: tuple[str, ...]
    log_end_offset: int | None
    offset: int | None = None
    """The first offset the refusal names (the error's ``offset``), when known."""


@attrs.define
class PartitionReport:
    """What verify found in one partition directory."""

    directory: Path
    segments: int = 0
    batches: int = 0
    records: int = 0
    size_bytes: int = 0
    problems: list[Problem] = attrs.field(factory=list)
    verdict: OpenVerdict | None = None

    @property
    def errors(self) -> int:
        """Number of errors."""
        return sum(1 for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> int:
        """Number of warnings."""
        return sum(1 for p in self.problems if p.severity == "warning")


def _plan(directory: Path, report: PartitionReport) -> LoadPlan | None:
    """Step 1 of the module docstring: the loader's plan, or its refusal, as problems."""
    try:
        topic, partition = parse_topic_partition(directory)
        plan = plan_load(
            directory, topic=topic, partition=partition, config=recorded_log_config(directory)
        )
    except CorruptStoreMetadataError as exc:
        report.verdict = OpenVerdict(
            refused=True,
            error=type(exc).__name__,
            path=exc.path,
            position=exc.position,
            steps=(),
            log_end_offset=None,
        )
        report.problems.append(
            Problem(
                "error",
                exc.path,
                exc.position,
                f"the next open of this store refuses it ({type(exc).__name__}): {exc.reason}",
            )
        )
        return None
    except ChangelogError as exc:
        path = getattr(exc, "path", directory)
        position = getattr(exc, "position", None)
        offset = getattr(exc, "offset", None)
        report.verdict = OpenVerdict(
            refused=True,
            error=type(exc).__name__,
            path=path,
            position=position,
            steps=(),
            log_end_offset=None,
            offset=offset,
        )
        reason = getattr(exc, "reason", None) or str(exc)
        report.problems.append(
            Problem(
                "error",
                path,
                position,
                f"the next open refuses this partition ({type(exc).__name__}): {reason};"
                " nothing is changed (docs/recovery.md lists the remedies)",
                offset=offset,
            )
        )
        return None
    report.verdict = OpenVerdict(
        refused=False,
        error=None,
        path=None,
        position=None,
        steps=tuple(step.render() for step in plan.steps),
        log_end_offset=plan.log_end_offset,
    )
    zeros = {segment.log_path for segment in plan.segments if segment.zero_tail}
    for step in plan.steps:
        repair = (step.action == "truncate" and step.path not in zeros) or (
            step.action == "rebuild-indexes" and step.pass_name == _TRUSTED_REBUILD_PASS
        )  # a preallocated segment's zeros (a running owner's, a crash's) are no damage
        report.problems.append(
            Problem(
                "warning" if repair else "info",
                step.path,
                step.position,
                f"the next open will {step.action.replace('-', ' ')}"
                f"{' to ' + step.target.name if step.target else ''} (pass {step.pass_name}):"
                f" {step.reason}",
            )
        )
    for warning in plan.warnings:
        report.problems.append(Problem("warning", directory, None, warning))
    return plan


def _read_segment(
    planned: PlannedSegment, report: PartitionReport, progress: Progress, *, check: bool
) -> None:
    """Step 2: every batch of a segment the loader does not re-read (``check``), else count."""
    path = planned.log_path
    try:
        with mapped(path) as data:
            report.size_bytes += len(data)
            position = 0
            next_offset = planned.base_offset
            end = planned.valid_bytes if planned.valid_bytes <= len(data) else len(data)
            while position < end:
                try:
                    header = decode_header(data, position, path=path, validate=check, end=end)
                except (CorruptRecordError, UnsupportedFormatError) as exc:
                    report.problems.append(
                        Problem(
                            "error",
                            path,
                            position,
                            f"{getattr(exc, 'reason', exc)}; the loader does not re-read this"
                            " flushed segment, so the next open succeeds but reading offsets"
                            f" from {next_offset} on fails"
                            " (docs/recovery.md lists the remedies)",
                            offset=next_offset,
                        )
                    )
                    break
                undecodable = _undecodable(data, position, header.size_in_bytes, path)
                if undecodable is not None:
                    report.problems.append(
                        Problem(
                            "error",
                            path,
                            position,
                            f"{undecodable}; its CRC checks out, but the store's restore decodes"
                            f" every record, so reading offsets from {header.base_offset} on"
                            " fails (docs/recovery.md lists the remedies)",
                        )
                    )
                    break
                next_offset = header.next_offset
                report.batches += 1
                report.records += header.records_count
                position += header.size_in_bytes
                progress.advance(header.size_in_bytes)
            progress.advance(len(data) - position)
    except UsageError as exc:
        severity: Severity = "error" if path.exists() else "warning"
        message = (
            str(exc)
            if severity == "error"
            else "vanished while verify ran (the cleaner replaced it); run verify again"
        )
        report.problems.append(Problem(severity, path, None, message))


def _undecodable(data: bytes, position: int, size: int, path: Path) -> str | None:
    """Why the records of the batch at ``position`` do not decode (decompress, then parse,
    as restore does), or ``None``."""
    try:
        decode_key_values(
            bytes(data[position : position + size]), path=path, position=position, validate=False
        )
    except CorruptRecordError as exc:
        return exc.reason
    return None


def _check_cleaner_checkpoint(directory: Path, report: PartitionReport) -> None:
    path = directory / CLEANER_CHECKPOINT
    if not path.exists():
        return
    try:
        read_checkpoint(path)
    except CorruptDataError as exc:
        report.problems.append(
            Problem(
                "error",
                path,
                exc.position,
                f"{exc.reason} (Kafka checkpoint format); the cleaner cannot resume from it",
            )
        )


def verify_partition(directory: Path, progress: Progress) -> PartitionReport:
    """Check one partition directory (see the module docstring); never raises on bad data."""
    report = PartitionReport(directory)
    plan = _plan(directory, report)
    if plan is not None:
        report.segments = len(plan.segments)
        for planned in plan.segments:
            _read_segment(planned, report, progress, check=not planned.recover)
    else:
        report.segments = sum(1 for _ in _iter_logs(directory))
        _scan_refused(directory, report, progress)
    _check_cleaner_checkpoint(directory, report)
    return report


def _scan_refused(directory: Path, report: PartitionReport, progress: Progress) -> None:
    """Step 2 for a partition the open refuses: every segment read past damage.

    The refusal names the first problem the loader meets; the partition may hold
    more (a second damaged segment).  Each damaged range found by reading every
    batch (:func:`changelog.repair.scan.walk`, resynchronizing on the next valid
    batch) that the refusal does not already name is an error of its own, with
    the first offset it makes unreadable; the counts are of the valid batches.
    """
    from changelog.repair.scan import Batch, segment_files, walk  # noqa: PLC0415

    named = {(p.path, p.position) for p in report.problems}
    try:
        segments = segment_files(directory)
    except ChangelogError:
        return
    for segment in segments:
        next_offset = segment.base_offset
        try:
            items = list(walk(segment.path))
        except (ChangelogError, OSError):
            continue
        report.size_bytes += segment.size_bytes
        progress.advance(segment.size_bytes)
        for item in items:
            if isinstance(item, Batch):
                report.batches += 1
                report.records += item.header.records_count
                next_offset = item.header.next_offset
                continue
            if (item.path, item.position) in named:
                continue
            report.problems.append(
                Problem(
                    "error",
                    item.path,
                    item.position,
                    f"{item.reason}; offsets from {next_offset} on in this segment cannot be"
                    f" read up to the next valid batch ({item.size_bytes} bytes later)"
                    " (`statestore repair salvage` keeps the valid batches around it)",
                    offset=next_offset,
                )
            )


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


def verify_store_layouts(state_dirs: list[Path]) -> list[PartitionReport]:
    """Step 3 of the module docstring: one report per recorded partition directory that is missing.

    (Extra directories need no report here: they are partitions of their own,
    verified as such, and the store's open refuses them with the same error;
    a damaged metadata file is reported by step 1 of its partitions.)
    """
    reports: list[PartitionReport] = []
    for state_dir in state_dirs:
        lost = lost_transaction_state(state_dir)
        if lost is not None:
            report = PartitionReport(lost.path)
            report.problems.append(
                Problem("error", lost.path, None, f"{lost} (TransactionStateMissingError)")
            )
            report.verdict = OpenVerdict(
                refused=True,
                error="TransactionStateMissingError",
                path=lost.path,
                position=None,
                steps=(),
                log_end_offset=None,
            )
            reports.append(report)
        for meta_file in sorted(state_dir.glob(f"*{METADATA_SUFFIX}")):
            store = meta_file.name[: -len(METADATA_SUFFIX)]
            try:
                meta = read_metadata(state_dir, store)
            except CorruptStoreMetadataError:
                continue
            if meta is None:
                continue
            on_disk = set(partitions_on_disk(state_dir, store))
            for partition in range(meta.partitions):
                if partition in on_disk:
                    continue
                missing = changelog_dir(state_dir, store, partition)
                message = (
                    f"store {store!r}: its metadata ({meta_file.name}) records "
                    f"{meta.partitions} partitions, but this changelog directory is missing; "
                    "the store's open refuses it (StoreLayoutError)"
                )
                report = PartitionReport(missing)
                report.problems.append(Problem("error", missing, None, message))
                report.verdict = OpenVerdict(
                    refused=True,
                    error="StoreLayoutError",
                    path=missing,
                    position=None,
                    steps=(),
                    log_end_offset=None,
                )
                reports.append(report)
    return reports
