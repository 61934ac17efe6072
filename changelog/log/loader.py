"""Recovery at open: carry out the plan of :mod:`changelog.log.load_plan`, pass by pass.

This is Kafka's ``LogLoader``, split in two.  :func:`changelog.log.load_plan.plan_load`
reads the directory and decides every pass without changing a byte (and
raises the typed error a damaged directory gets, so a refused open changes
nothing); :func:`load_log` then runs the decided steps.  Each pass undoes or
completes one step of a protocol that may have been cut short by a crash; the
steps are numbered in ``docs/recovery.md`` and in the code that runs them
(``Log.roll``, ``Log.close``, ``Log.truncate_to``, ``Log.delete_old_segments``,
:func:`changelog.log.replace.replace_segments`, :func:`changelog.files.atomic_write`):

====  ===============================================================  ======================
pass  what it does                                                     finishes or undoes
====  ===============================================================  ======================
L1    delete stray ``*.tmp`` files; fsync the directory                atomic_write W1-W2
L2    delete ``*.deleted`` files; fsync                                D1-D2, S4, T1
L3    delete ``.swap`` files at or above the lowest ``.cleaned``       S1-S2
      base offset, then every ``.cleaned`` file; fsync
L4    for each ``.log.swap``: delete the ordinary segment files in     S4
      ``[swap base offset, swap next offset)`` it replaces; fsync
L5    rename every ``.swap`` file to its ordinary name (an fsync of    S5
      the directory after each rename)
L6    delete index files whose ``.log`` is missing at either end of    S2, S4, S5, D1, T1
      the log; fsync (mid-log: an error, nothing deleted)
L7    open every segment; rebuild (and fsync) the indexes of a         any
      trusted segment that are missing, unreadable or disagree with
      its ``.log``
L8    no clean-shutdown marker: from the segment holding the recovery  A1-A2, R2, T2
      point on, re-validate every batch, rebuild and fsync the
      indexes, cut the active segment's torn tail (and fsync it)
L9    log start offset = max(checkpoint, first base offset); no        D3, C2, C3
      segment at all (a new directory): create one at offset 0; a
      Kafka broker's directory with holes: record them in the swap
      checkpoint
L10   rebuild the producer state from every segment's batch headers   M1-M2, T2
      and make each ``.txnindex`` hold exactly the aborted
      transactions its markers close (rewritten if it differs)
L11   delete the clean-shutdown marker and fsync the directory         C5
====  ===============================================================  ======================

Every delete or rename is made durable (directory fsync) before the next pass
relies on it: a power cut during open leaves a directory the next open
handles the same way.

Thread-safety: :func:`load_log` runs before the ``Log`` exists, under the
directory lock; nothing else touches the directory meanwhile.
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs

from changelog.config import LogConfig
from changelog.fs import files
from changelog.fs.checkpoint import write_offset_checkpoint
from changelog.fs.files import CLEAN_SHUTDOWN_FILE
from changelog.log.load_plan import LoadPlan, plan_load
from changelog.log.producer_state import ProducerState, rebuild_producer_state
from changelog.segment.segment import LogSegment

__all__ = [
    "LoadedLog",
    "load_log",
]

logger = logging.getLogger(__name__)


@attrs.define(kw_only=True)
class LoadedLog:
    """What :func:`load_log` hands to ``Log``: open segments and the offsets derived from them.

    Invariants: ``segments`` is non-empty, sorted by base offset, all with an
    empty file suffix; ``log_start_offset <= log_end_offset``;
    ``recovery_point <= log_end_offset``.
    """

    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    had_clean_shutdown: bool
    producer_state: ProducerState = attrs.field(factory=ProducerState)
    """Open transactions and producer sequences, rebuilt from the segments (pass L10)."""


def _run_file_steps(plan: LoadPlan, directory: Path, prefix: str) -> None:
    """Passes L1-L6: the deletes and renames of the plan, each pass made durable."""
    dirty = False
    current = None
    for step in plan.steps:
        if step.action not in ("delete", "rename"):
            continue
        if step.pass_name != current and dirty:
            files.fsync_dir(directory, f"load.{current}.fsync_dir")
            dirty = False
        current = step.pass_name
        logger.info("%s%s", prefix, step.render())
        if step.action == "delete":
            files.delete_file(step.path, f"load.{step.pass_name}.delete")
            dirty = True
        else:
            assert step.target is not None
            files.rename_file(step.path, step.target, f"load.{step.pass_name}.rename")
    if dirty:
        files.fsync_dir(directory, f"load.{current}.fsync_dir")


def _open_segments(
    plan: LoadPlan, directory: Path, config: LogConfig, now_ms: int, prefix: str
) -> list[LogSegment]:
    """Passes L7-L8: open every segment, recover those the plan says, fsync what changed."""
    segments: list[LogSegment] = []
    try:
        for planned in plan.segments:
            segment = LogSegment.open(
                directory, planned.base_offset, config=config, created_ms=now_ms
            )
            segments.append(segment)
            if not planned.recover:
                if planned is not plan.segments[-1]:
                    segment.release_descriptors()  # opened again while used
                continue
            for reason in planned.rebuild_reasons:
                logger.warning(
                    "%ssegment %s: rebuilding its indexes (%s)", prefix, planned.base_offset, reason
                )
            # raises if it disagrees with the plan
            segment.recover(expected_valid_bytes=planned.valid_bytes, zero_tail=planned.zero_tail)
            segment.flush()
            if planned is not plan.segments[-1]:
                segment.release_descriptors()
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments


def load_log(
    directory: Path,
    *,
    config: LogConfig,
    topic: str,
    partition: int,
    now_ms: int,
) -> LoadedLog:
    """Plan passes L1-L11 over ``directory`` (raising, unchanged, if it is damaged), run them,
    and return its segments, opened and consistent."""
    prefix = f"[{topic}-{partition}] "
    plan = plan_load(directory, topic=topic, partition=partition, config=config)
    for warning in plan.warnings:
        logger.warning("%s%s", prefix, warning)
    if not plan.had_clean_shutdown:
        logger.info(
            "%sunclean shutdown: re-validating %s segment(s) from the recovery point %s",
            prefix,
            sum(1 for s in plan.segments if s.revalidated),
            plan.recovery_point_checkpoint or 0,
        )
    _run_file_steps(plan, directory, prefix)  # L1-L6
    segments = _open_segments(plan, directory, config, now_ms, prefix)  # L7-L8
    try:
        if not segments:  # L9
            segments.append(LogSegment.create(directory, 0, config=config, created_ms=now_ms))
            files.fsync_dir(directory, "load.L9.fsync_dir")
        for step in plan.steps:  # L9: a foreign directory's holes, recorded as compaction's
            if step.action == "write-checkpoint":
                assert step.offset is not None
                logger.info("%s%s", prefix, step.render())
                write_offset_checkpoint(step.path, topic, partition, step.offset)
        producer_state = rebuild_producer_state(segments, prefix)  # L10
        for segment in segments[:-1]:
            segment.release_descriptors()  # L10 may have written a .txnindex
        if plan.had_clean_shutdown:  # L11
            files.delete_file(directory / CLEAN_SHUTDOWN_FILE, "load.L11.delete_marker")
            files.fsync_dir(directory, "load.L11.fsync_dir")
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    logger.info(
        "%sloaded %s segment(s): log start offset %s, log end offset %s, recovery point %s%s",
        prefix,
        len(segments),
        plan.log_start_offset,
        plan.log_end_offset,
        plan.recovery_point,
        "" if plan.had_clean_shutdown else " (after recovery)",
    )
    return LoadedLog(
        segments=segments,
        log_start_offset=plan.log_start_offset,
        log_end_offset=plan.log_end_offset,
        recovery_point=plan.recovery_point,
        had_clean_shutdown=plan.had_clean_shutdown,
        producer_state=producer_state,
    )
