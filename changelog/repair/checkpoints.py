"""Operator remedy: rewrite the checkpoint files of a partition that are damaged or wrong.

Checkpoints are written atomically (``files.atomic_write``), so a truncated or
garbled one is damage, not a crash's doing, and the loader refuses it
(``CorruptCheckpointError``, ``CheckpointMismatchError``) rather than guess.
Each one can be derived again from the segments, by giving up only a
shortcut, never data:

================================== ======================================================
file                               rewritten to
================================== ======================================================
``recovery-point-offset-checkpoint`` the first segment's base offset: the next open
                                   re-validates every batch (CRC) and rebuilds every index;
                                   ``.kafka_cleanshutdown`` is deleted, so the open does
``log-start-offset-checkpoint``    the first segment's base offset (the log start only
                                   moves to a segment's base offset)
``cleaner-offset-checkpoint``      the first segment's base offset: the next cleaning pass
                                   reads the whole log again
``cleaner-swap-offset-checkpoint`` the base offset after the last hole between segments,
                                   and every hole is listed (the checkpoint is the proof that
                                   a hole is compaction's, and the files no longer prove it);
                                   deleted when there is no hole
================================== ======================================================

A checkpoint is rewritten when it does not parse, or when it parses but
cannot be right for the segments beside it (a recovery point above the log end
offset, a log start offset above the first base offset).  A log start offset
*below* the first base offset after a clean shutdown means segments are
missing: that is not a checkpoint's fault, and this remedy does not hide it.

The protocol (each step a fault point of :mod:`changelog.fs.files`):

- **Q1** delete ``.kafka_cleanshutdown`` (when the recovery point is rewritten)
  and fsync the directory.  Alone, it changes no verdict: a damaged checkpoint
  is refused with or without it.
- **Q2** write each rewritten checkpoint atomically (temp file, fsync, rename,
  fsync of the directory); delete a swap checkpoint that nothing needs.
- **Q3** open the log (L8 re-validates from the new recovery point) and close it.

No segment is touched at any step: a crash leaves the segments as they were,
each checkpoint either old or new, and the remedy run again finishes.

Thread-safety: the caller keeps every writer out (``apply_checkpoint_rebuild``
takes the partition directory's lock for Q1-Q2; ``Log.open`` for Q3).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from changelog.config import LogConfig
from changelog.errors import CorruptDataError, RepairRefusedError
from changelog.fs import files
from changelog.fs.checkpoint import (
    CLEANER_CHECKPOINT,
    CLEANER_SWAP_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
    write_offset_checkpoint,
)
from changelog.fs.lock import DirectoryLock
from changelog.log.log import Log
from changelog.log.log_dir import parse_topic_partition
from changelog.repair.scan import Batch, protocol_leftovers, segment_files, walk

__all__ = [
    "CheckpointChange",
    "CheckpointPlan",
    "apply_checkpoint_rebuild",
    "plan_checkpoint_rebuild",
]


@attrs.frozen(kw_only=True)
class CheckpointChange:
    """One checkpoint file: what it holds, what it becomes, why."""

    name: str
    before: int | None
    """The offset it holds (``None``: missing or unreadable, see ``problem``)."""
    after: int | None
    """The offset written (``None``: the file is deleted)."""
    problem: str


@attrs.frozen(kw_only=True)
class CheckpointPlan:
    """The checkpoints to rewrite; made by :func:`plan_checkpoint_rebuild`, read-only."""

    directory: Path
    topic: str
    partition: int
    log_end_offset: int
    first_base_offset: int
    holes: tuple[tuple[int, int], ...]
    """``[first, end)`` offsets missing between segments."""
    changes: tuple[CheckpointChange, ...]
    deletes_clean_shutdown_marker: bool

    @property
    def nothing_to_do(self) -> bool:
        """Whether every checkpoint is readable and plausible."""
        return not self.changes

    def steps(self) -> list[str]:
        """The protocol steps (module docstring) this plan runs, one line each."""
        out = []
        if self.deletes_clean_shutdown_marker:
            out.append(f"Q1 delete {self.directory / files.CLEAN_SHUTDOWN_FILE}")
        for change in self.changes:
            if change.after is None:
                out.append(f"Q2 delete {self.directory / change.name}")
            else:
                out.append(
                    f"Q2 write {self.directory / change.name}:"
                    f" {'unreadable' if change.before is None else change.before} -> {change.after}"
                )
        out.append("Q3 open the log (re-validated from the recovery point) and close it cleanly")
        return out


def _read(path: Path) -> tuple[int | None, str | None]:
    """``(offset, None)``, ``(None, None)`` for a missing or empty file, or ``(None, why)``."""
    try:
        entries = read_checkpoint(path)
    except CorruptDataError as exc:
        return None, exc.reason
    return (max(entries.values()) if entries else None), None


def plan_checkpoint_rebuild(directory: Path) -> CheckpointPlan:
    """Plan rewriting the damaged or impossible checkpoints of ``directory`` (read-only).

    Raises :class:`RepairRefusedError` (nothing changed) for a directory without
    segments, or holding an unfinished cleaner swap.
    """
    directory = Path(directory)
    topic, partition = parse_topic_partition(directory)
    leftovers = protocol_leftovers(directory)
    if leftovers:
        raise RepairRefusedError(
            leftovers[0],
            "an interrupted segment replace (.swap/.cleaned files) is in the directory: the"
            " loader must finish it first",
        )
    segments = segment_files(directory)
    if not segments:
        raise RepairRefusedError(directory, "no segment (.log) files")
    first_base = segments[0].base_offset
    holes: list[tuple[int, int]] = []
    next_offset = first_base
    for index, segment in enumerate(segments):
        if index and next_offset < segment.base_offset:
            holes.append((next_offset, segment.base_offset))
        next_offset = segment.base_offset
        for item in walk(segment.path):
            if isinstance(item, Batch):
                next_offset = max(next_offset, item.header.next_offset)
    log_end = next_offset
    clean = (directory / files.CLEAN_SHUTDOWN_FILE).exists()
    changes: list[CheckpointChange] = []

    rp, why = _read(directory / RECOVERY_POINT_CHECKPOINT)
    if why is not None:
        changes.append(
            CheckpointChange(
                name=RECOVERY_POINT_CHECKPOINT,
                before=None,
                after=first_base,
                problem=f"unreadable: {why}",
            )
        )
    elif rp is not None and rp > log_end:
        changes.append(
            CheckpointChange(
                name=RECOVERY_POINT_CHECKPOINT,
                before=rp,
                after=first_base,
                problem=f"above the log end offset {log_end}",
            )
        )
    elif clean and rp != log_end:
        changes.append(
            CheckpointChange(
                name=RECOVERY_POINT_CHECKPOINT,
                before=rp,
                after=first_base,
                problem=f"after a clean shutdown it must be the log end offset {log_end}",
            )
        )
    start, why = _read(directory / LOG_START_OFFSET_CHECKPOINT)
    if why is not None:
        changes.append(
            CheckpointChange(
                name=LOG_START_OFFSET_CHECKPOINT,
                before=None,
                after=first_base,
                problem=f"unreadable: {why}",
            )
        )
    elif start is not None and start > first_base:
        changes.append(
            CheckpointChange(
                name=LOG_START_OFFSET_CHECKPOINT,
                before=start,
                after=first_base,
                problem=f"above the first segment's base offset {first_base}",
            )
        )
    cleaner, why = _read(directory / CLEANER_CHECKPOINT)
    if why is not None:
        changes.append(
            CheckpointChange(
                name=CLEANER_CHECKPOINT, before=None, after=first_base, problem=f"unreadable: {why}"
            )
        )
    elif cleaner is not None and cleaner > log_end:
        changes.append(
            CheckpointChange(
                name=CLEANER_CHECKPOINT,
                before=cleaner,
                after=first_base,
                problem=f"above the log end offset {log_end}",
            )
        )
    _swap, why = _read(directory / CLEANER_SWAP_CHECKPOINT)
    if why is not None:
        after = holes[-1][1] if holes else None
        problem = f"unreadable: {why}"
        if holes:
            problem += "; rewritten above every hole between segments (listed)"
        changes.append(
            CheckpointChange(
                name=CLEANER_SWAP_CHECKPOINT, before=None, after=after, problem=problem
            )
        )
    rewrites_rp = any(c.name == RECOVERY_POINT_CHECKPOINT for c in changes)
    return CheckpointPlan(
        directory=directory,
        topic=topic,
        partition=partition,
        log_end_offset=log_end,
        first_base_offset=first_base,
        holes=tuple(holes),
        changes=tuple(changes),
        deletes_clean_shutdown_marker=rewrites_rp and clean,
    )


def apply_checkpoint_rebuild(plan: CheckpointPlan, *, config: LogConfig | None = None) -> int:
    """Run steps Q1-Q3 (module docstring); returns the log end offset the open found."""
    directory = plan.directory
    with DirectoryLock(directory):
        marker = directory / files.CLEAN_SHUTDOWN_FILE
        if plan.deletes_clean_shutdown_marker and files.delete_file(  # Q1
            marker, "repair.Q1.delete_marker"
        ):
            files.fsync_dir(directory, "repair.Q1.fsync_dir")
        for change in plan.changes:  # Q2
            path = directory / change.name
            if change.after is None:
                if files.delete_file(path, "repair.Q2.delete"):
                    files.fsync_dir(directory, "repair.Q2.fsync_dir")
            else:
                write_offset_checkpoint(path, plan.topic, plan.partition, change.after)
    log = Log.open(directory, config=config)  # Q3
    try:
        return log.log_end_offset
    finally:
        log.close()
