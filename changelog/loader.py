"""Recovery at open: turn whatever a partition directory holds into a consistent list of segments.

This is Kafka's ``LogLoader``, pass by pass.  Each pass undoes or completes
one step of a protocol that may have been cut short by a crash; the steps are
numbered in ``docs/recovery.md`` and in the code that runs them (``Log.roll``,
``Log.close``, ``Log.delete_old_segments``, :func:`changelog.replace.replace_segments`,
:func:`changelog.fs.files.atomic_write`):

====  ===============================================================  ======================
pass  what it does                                                     finishes or undoes
====  ===============================================================  ======================
L1    delete stray ``*.tmp`` files                                     atomic_write W1-W2
L2    delete ``*.deleted`` files                                       D1-D2, S4, T1
L3    delete ``.swap`` files at or above the lowest ``.cleaned``       S1-S2
      base offset, then every ``.cleaned`` file
L4    for each ``.log.swap``: delete the ordinary segment files in     S4
      ``[swap base offset, swap next offset)`` it replaces
L5    rename every ``.swap`` file to its ordinary name                 S5
L6    delete index files whose ``.log`` is missing (orphans) at an     S2, S4, S5, D1, T1: a
      end of the log; an orphan between two segments is a lost        cut between the three
      ``.log``: ``CorruptDataError``, nothing deleted                  renames of one segment
L7    open every segment; rebuild an index that is missing,            any
      unreadable, fails its sanity check or points past its ``.log``
      (even after a clean shutdown)
L8    no clean-shutdown marker: recover every segment from the one     A1-A2, R2, T2
      holding the recovery point: CRC batch by batch, rebuild indexes,
      cut a torn tail and delete every later segment
L9    log start offset = max(checkpoint, first base offset); a         D3, C2
      checkpoint past the log end is ignored with a warning, the data
      kept (not Kafka's rule: see docs/recovery.md); no segment left:
      create an empty one at the log start offset
L10   rebuild the producer state from every segment's batch headers   M1-M2, T2
      and make each ``.txnindex`` hold exactly the aborted
      transactions its markers close (rewritten if it differs)
L11   delete the clean-shutdown marker (and fsync the directory)       C5
====  ===============================================================  ======================

Segments below the recovery point are not re-read: a batch corrupted in the
middle of such a segment is found when it is read, and raises
:class:`~changelog.errors.CorruptRecordError` with path and position; it is
never repaired into other data (``docs/recovery.md`` lists the operator's options).

Thread-safety: :func:`load_log` runs before the ``Log`` exists, under the
directory lock; nothing else touches the directory meanwhile.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

import attrs

from changelog.config import LogConfig
from changelog.errors import CorruptDataError, CorruptIndexError
from changelog.fs import files
from changelog.fs.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_offset_checkpoint,
)
from changelog.fs.files import CLEAN_SHUTDOWN_FILE
from changelog.producer_state import ProducerState, rebuild_producer_state
from changelog.segment.segment import LogSegment

__all__ = [
    "LoadedLog",
    "load_log",
]


_TMP_SUFFIX: Final = ".tmp"
_INDEX_SUFFIXES: Final = (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)
_DERIVED_SUFFIXES: Final = (*_INDEX_SUFFIXES, files.TXN_INDEX_SUFFIX)
"""Files derived from a ``.log``: an orphan of any of them is handled by pass L6."""

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


# --------------------------------------------------------------------------- checkpoints


# --------------------------------------------------------------------------- the passes


def _segment_files(directory: Path) -> list[tuple[Path, int, str, str]]:
    """``(path, base offset, suffix, protocol suffix)`` of every segment-named file."""
    found = []
    for path in directory.iterdir():
        parsed = files.parse_base_offset(path.name)
        if parsed is not None and path.is_file():
            found.append((path, *parsed))
    return found


def _remove_stray_files(directory: Path, prefix: str) -> None:
    """Passes L1-L3: ``.tmp``, ``.deleted``, ``.cleaned`` and swaps of an unfinished clean."""
    for path in directory.iterdir():
        if path.name.endswith(_TMP_SUFFIX) and path.is_file():  # L1
            logger.info("%sdeleting stray temporary file %s", prefix, path.name)
            files.delete_file(path, "load.delete_tmp")
    cleaned: list[tuple[Path, int]] = []
    swaps: list[tuple[Path, int]] = []
    for path, base, _suffix, protocol in _segment_files(directory):
        if protocol == files.DELETED_SUFFIX:  # L2
            logger.info("%sdeleting %s left by a segment deletion", prefix, path.name)
            files.delete_file(path, "load.delete_deleted")
        elif protocol == files.CLEANED_SUFFIX:
            cleaned.append((path, base))
        elif protocol == files.SWAP_SUFFIX:
            swaps.append((path, base))
    if cleaned:  # L3
        min_cleaned = min(base for _, base in cleaned)
        for path, base in swaps:
            if base >= min_cleaned:
                logger.info(
                    "%sdeleting %s: its replace did not finish renaming .cleaned to .swap",
                    prefix,
                    path.name,
                )
                files.delete_file(path, "load.delete_swap")
        for path, _ in cleaned:
            logger.info("%sdeleting %s left by an unfinished clean", prefix, path.name)
            files.delete_file(path, "load.delete_cleaned")


def _complete_swaps(directory: Path, config: LogConfig, prefix: str) -> None:
    """Passes L4-L5: finish a replace that had renamed its new segments to ``.swap``.

    L4 works swap file by swap file, as Kafka's ``LogLoader`` does: a ``.swap``
    segment replaces exactly the ordinary segments whose base offsets lie in
    its own range ``[swap base offset, swap next offset)``.  So one replace may
    swap non-adjacent groups at once: a segment left untouched between two of
    them lies in no swap's range and stays.
    """
    ranges: list[tuple[int, int]] = []
    for path, base, suffix, protocol in _segment_files(directory):
        if protocol != files.SWAP_SUFFIX or suffix != files.LOG_SUFFIX:
            continue
        segment = LogSegment.open(directory, base, config=config, file_suffix=files.SWAP_SUFFIX)
        try:
            next_offset = base
            with segment.open_reader() as reader:
                for _, header in reader.headers():
                    next_offset = header.next_offset
        finally:
            segment.close()
        logger.info(
            "%sfound %s from an interrupted replace covering [%s, %s)",
            prefix,
            path.name,
            base,
            next_offset,
        )
        ranges.append((base, next_offset))
    if ranges:  # L4
        for path, base, _suffix, protocol in _segment_files(directory):
            if protocol == "" and any(low <= base < high for low, high in ranges):
                logger.info(
                    "%sdeleting %s: replaced by the swap being completed", prefix, path.name
                )
                files.delete_file(path, "load.delete_replaced")
    renamed = False
    for path, _base, _suffix, protocol in _segment_files(directory):  # L5
        if protocol == files.SWAP_SUFFIX:
            target = path.with_name(path.name[: -len(files.SWAP_SUFFIX)])
            logger.info("%srenaming %s to %s", prefix, path.name, target.name)
            files.rename_file(path, target, "load.rename_swap", sync_dir=False)
            renamed = True
    if renamed:
        files.fsync_dir(directory, "load.fsync_dir")


def _delete_orphan_indexes(directory: Path, prefix: str, explained: set[int]) -> None:
    """Pass L6: index files whose ``.log`` is gone.

    An orphan at either end of the log is what a crash during a roll (the newest
    segment) or a retention deletion (the oldest) can leave: it is deleted, as
    Kafka does.  An orphan *between* two segments, with no ``.deleted``,
    ``.cleaned`` or ``.swap`` file of its base offset at open (``explained``),
    means the ``.log`` itself was lost: that is acknowledged data gone, so it is
    reported as :class:`CorruptDataError` and nothing is deleted.
    """
    entries = list(_segment_files(directory))
    log_bases = [b for _p, b, suffix, proto in entries if suffix == files.LOG_SUFFIX and not proto]
    lowest, highest = (min(log_bases), max(log_bases)) if log_bases else (0, -1)
    for path, base, suffix, protocol in entries:
        if protocol or suffix not in _DERIVED_SUFFIXES:
            continue
        log_path = directory / files.segment_file_name(base, files.LOG_SUFFIX)
        if log_path.exists():
            continue
        if lowest < base < highest and base not in explained:
            raise CorruptDataError(
                log_path,
                None,
                f"segment file missing: {path.name} is here but the .log is gone, so the"
                f" records from offset {base} up to the next segment are lost; restore the"
                " file, or delete its index files to accept the gap and open the log",
            )
        logger.warning("%sdeleting orphan index %s (no %s)", prefix, path.name, log_path.name)
        files.delete_file(path, "load.delete_orphan")


def _open_segments(
    directory: Path, config: LogConfig, now_ms: int, trusted_below: int | None, prefix: str
) -> list[LogSegment]:
    """Pass L7: open each ``.log`` and rebuild indexes that are missing or fail their check.

    Segments at or above ``trusted_below`` (the recovery point after an
    unclean shutdown) are about to be recovered by L8, so they are not checked.
    """
    bases = sorted(
        base
        for _path, base, suffix, protocol in _segment_files(directory)
        if suffix == files.LOG_SUFFIX and not protocol
    )
    segments: list[LogSegment] = []
    try:
        for position, base in enumerate(bases):
            recovered_next = trusted_below is not None and (
                position + 1 == len(bases) or bases[position + 1] > trusted_below
            )
            missing = [
                kind
                for kind in _INDEX_SUFFIXES
                if not (directory / files.segment_file_name(base, kind)).exists()
            ]
            segment = LogSegment.open(directory, base, config=config, created_ms=now_ms)
            segments.append(segment)
            if recovered_next:
                continue
            if missing or segment.index_rebuild_reasons:
                logger.warning(
                    "%ssegment %s: rebuilding its indexes (%s)",
                    prefix,
                    base,
                    "; ".join(
                        [f"no {kind} file" for kind in missing] + segment.index_rebuild_reasons
                    ),
                )
                segment.recover()
                continue
            try:
                segment.sanity_check()
            except CorruptIndexError as exc:
                logger.warning("%srebuilding the indexes of segment %s: %s", prefix, base, exc)
                segment.recover()
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments


def _recover_segments(segments: list[LogSegment], recovery_point: int, prefix: str) -> None:
    """Pass L8: re-validate every segment from the one holding the recovery point on."""
    start = 0
    for index, segment in enumerate(segments):
        if segment.base_offset <= recovery_point:
            start = index
    logger.info(
        "%sunclean shutdown: recovering %s segment(s) from offset %s",
        prefix,
        len(segments) - start,
        segments[start].base_offset,
    )
    for index in range(start, len(segments)):
        segment = segments[index]
        truncated = segment.recover()
        if truncated > 0:
            later = segments[index + 1 :]
            logger.warning(
                "%scorruption in segment %s: truncated %s bytes (now ends at offset %s); "
                "deleting %s later segment(s)",
                prefix,
                segment.base_offset,
                truncated,
                segment.read_next_offset(),
                len(later),
            )
            for dropped in later:
                dropped.delete()
            del segments[index + 1 :]
            return


def _check_no_missing_tail(directory: Path, log_end: int, checkpointed_rp: int | None) -> None:
    """After a clean shutdown the recovery point checkpoint is the log end offset (C2)."""
    if checkpointed_rp is not None and checkpointed_rp > log_end:
        raise CorruptDataError(
            directory,
            None,
            f"log end offset {log_end} is below the recovery point {checkpointed_rp}"
            " checkpointed at the last clean shutdown: segment files at the end of the"
            " log are missing",
        )


def load_log(
    directory: Path,
    *,
    config: LogConfig,
    topic: str,
    partition: int,
    now_ms: int,
) -> LoadedLog:
    """Run passes L1-L11 over ``directory`` and return its segments, opened and consistent."""
    prefix = f"[{topic}-{partition}] "
    marker = directory / CLEAN_SHUTDOWN_FILE
    had_clean_shutdown = marker.exists()
    checkpointed_rp = read_offset_checkpoint(
        directory / RECOVERY_POINT_CHECKPOINT, topic, partition
    )
    recovery_point = checkpointed_rp if checkpointed_rp is not None else 0
    in_protocol = {base for _path, base, _suffix, protocol in _segment_files(directory) if protocol}
    _remove_stray_files(directory, prefix)  # L1-L3
    _complete_swaps(directory, config, prefix)  # L4-L5
    _delete_orphan_indexes(directory, prefix, in_protocol)  # L6
    segments = _open_segments(
        directory, config, now_ms, None if had_clean_shutdown else recovery_point, prefix
    )  # L7
    try:
        if not had_clean_shutdown and segments:
            _recover_segments(segments, recovery_point, prefix)  # L8
        checkpointed_start = read_offset_checkpoint(
            directory / LOG_START_OFFSET_CHECKPOINT, topic, partition
        )
        log_start = max(checkpointed_start or 0, segments[0].base_offset if segments else 0)
        log_end = segments[-1].read_next_offset() if segments else log_start
        if segments and log_start > log_end:  # L9
            # Kafka deletes every segment here (DeleteRecords can move the log start past a
            # replica's end).  Nothing here moves the log start past the log end, so such a
            # checkpoint is damaged: keep the data, ignore the checkpoint.
            logger.warning(
                "%signoring log-start-offset-checkpoint: log start offset %s is past the log"
                " end offset %s",
                prefix,
                log_start,
                log_end,
            )
            log_start = segments[0].base_offset
        if had_clean_shutdown:
            _check_no_missing_tail(directory, log_end, checkpointed_rp)
        if not segments:  # L9
            segments.append(
                LogSegment.create(directory, log_start, config=config, created_ms=now_ms)
            )
            files.fsync_dir(directory, "load.fsync_dir")
        producer_state = rebuild_producer_state(segments, prefix)  # L10
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    rp = log_end if had_clean_shutdown else min(recovery_point, log_end)
    if had_clean_shutdown:  # L11
        files.delete_file(marker, "load.delete_marker")
        files.fsync_dir(directory, "load.fsync_dir")
    logger.info(
        "%sloaded %s segment(s): log start offset %s, log end offset %s, recovery point %s%s",
        prefix,
        len(segments),
        log_start,
        log_end,
        rp,
        "" if had_clean_shutdown else " (after recovery)",
    )
    return LoadedLog(
        segments=segments,
        log_start_offset=log_start,
        log_end_offset=log_end,
        recovery_point=rp,
        had_clean_shutdown=had_clean_shutdown,
        producer_state=producer_state,
    )
