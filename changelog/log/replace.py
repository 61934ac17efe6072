"""Swapping cleaned segments in for old ones: Kafka's ``LocalLog.replaceSegments``, steps S0-S6.

The cleaner writes the new segments with the file suffix ``.cleaned`` and then
calls ``Log.replace_segments``, which holds ``Log.lock`` and runs
:func:`replace_segments`.  Each step, and the loader pass that finishes or
undoes it after a crash (:mod:`changelog.log.loader`, ``docs/recovery.md``):

====  ===================================================================  ==================
step  what it does                                                         after a crash
====  ===================================================================  ==================
S0    every old segment is still in the log and none is the active one;    (nothing changed)
      otherwise delete the new segments and raise ``CleanerAbortedError``
S1    flush the new segments                                               L3: old segments
S1b   the caller's durable step before the swap (the cleaner writes its    L3: old segments
      checkpoint: every hole the new segments leave lies below it)
S2    rename the new segments ``.cleaned`` -> ``.swap``, highest base      L3: old segments
      offset first (each rename is followed by an fsync of the directory)
S3    swap the new segments into the segment list (memory only)            L4, L5: new ones
S4    rename the old segments' files to ``.deleted`` (removed as in D2)    L2, L4, L5: new
S5    rename the new segments ``.swap`` -> ordinary names                  L2, L4, L5: new
S6    fsync the directory                                                  new segments
====  ===================================================================  ==================

S0, S1 and S1b change nothing the log reads (:func:`prepare_replace`): a
failure there deletes the new segments and the log goes on; an I/O error
from S2 on fails the log (:func:`replace_segments`).

S1b is why a hole between segments can be told from damage.  The cleaner
drops a group's emptied last batch (Kafka's rule), so a cleaned segment may
end before the next one begins.  At S1b it raises
``cleaner-swap-offset-checkpoint`` (atomically, fsynced) to the pass's end
offset, which is above every rewritten group's base offset, *before* any
of its segments can replace an old one: so every hole the cleaner ever made
lies after a segment whose base offset is below that durable checkpoint,
and the loader refuses every other hole.  A swap checkpoint ahead of a swap
that never happened (a crash in S2, a failure) is harmless: it only widens
which holes are taken for compaction's (below it, as below Kafka's cleaner
checkpoint, a segment cut at a batch boundary looks like compaction); no
pass reads it.  It is not the cleaner checkpoint (the next pass's first
dirty offset), which is still written after the swap, as in Kafka: written
ahead of a swap that never happened, that one would let a later pass drop a
tombstone whose older value it never deduplicated, and the deleted key
would come back.

Renaming highest first in S2 is what makes L3 correct: while S2 runs, every
``.swap`` file has a higher base offset than every remaining ``.cleaned``
file, so "a ``.swap`` at or above the lowest ``.cleaned``" identifies exactly
an unfinished S2.  Once S2 is done, L4 deletes the ordinary files that the
``.swap`` files cover and L5 renames the ``.swap`` files: the new segments win.

Thread-safety: the caller holds ``Log.lock`` for the whole call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from changelog.errors import CleanerAbortedError
from changelog.fs import files
from changelog.segment.segment import LogSegment

__all__ = ["prepare_replace", "replace_segments"]

logger = logging.getLogger(__name__)


def prepare_replace(
    existing: Sequence[LogSegment],
    new_segments: Sequence[LogSegment],
    old_segments: Sequence[LogSegment],
    *,
    before_swap: Callable[[], None] | None,
    log_prefix: str,
) -> None:
    """Steps S0, S1 and S1b: check, flush the new segments, run ``before_swap``.

    Changes nothing the log reads.  Raises
    :class:`~changelog.errors.CleanerAbortedError` if S0 fails, and whatever
    S1 or S1b raise; in every case the new segments are deleted first.
    """
    new = sorted(new_segments, key=lambda segment: segment.base_offset)
    current = {id(segment) for segment in existing[:-1]}
    if not new or any(id(segment) not in current for segment in old_segments):  # S0
        for segment in new:
            segment.delete()
        raise CleanerAbortedError(
            f"{log_prefix}the segments to replace are no longer in the log (or one "
            "is the active segment); the cleaned segments were deleted"
        )
    try:
        for segment in new:  # S1
            segment.flush()
        if before_swap is not None:  # S1b
            before_swap()
    except BaseException:
        for segment in new:
            segment.delete()
        raise


def replace_segments(
    existing: Sequence[LogSegment],
    new_segments: Sequence[LogSegment],
    old_segments: Sequence[LogSegment],
    *,
    directory: Path,
    install: Callable[[list[LogSegment]], None],
    schedule_delete: Callable[[LogSegment], None],
    log_prefix: str,
) -> None:
    """Replace ``old_segments`` of ``existing`` (the log's segments, active last) by ``new_segments``.

    Steps S2-S6 (module docstring), after :func:`prepare_replace` has run
    S0-S1b.  ``install`` receives the new segment list at S3 (it replaces
    the contents of ``existing``); ``schedule_delete`` renames one segment's
    files to ``.deleted``, closes it and queues it for removal (S4).

    A failure fails the log, whose abandon closes the segments of its list.
    Before it propagates, this closes the segments no list holds any more:
    new segments not yet swapped in (S2) and old ones taken out but not yet
    queued (S3-S4).  Their descriptors stayed open for the life of the
    process before (``tests/changelog/log/test_replace_fds.py``).
    """
    new = sorted(new_segments, key=lambda segment: segment.base_offset)
    old = sorted(old_segments, key=lambda segment: segment.base_offset)
    try:
        _swap(
            existing,
            new,
            old,
            directory=directory,
            install=install,
            schedule_delete=schedule_delete,
        )
    except BaseException:
        held = {id(segment) for segment in existing}
        for segment in (*new, *old):
            if id(segment) not in held:
                segment.close()  # idempotent: those already queued are closed
        raise
    logger.info(
        "%sreplaced segment(s) %s with %s",
        log_prefix,
        [segment.base_offset for segment in old],
        [segment.base_offset for segment in new],
    )


def _swap(
    existing: Sequence[LogSegment],
    new: list[LogSegment],
    old: list[LogSegment],
    *,
    directory: Path,
    install: Callable[[list[LogSegment]], None],
    schedule_delete: Callable[[LogSegment], None],
) -> None:
    """S2-S6 for :func:`replace_segments` (``new`` and ``old`` sorted by base offset)."""
    for segment in reversed(new):  # S2
        segment.change_file_suffixes(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
    old_ids = {id(segment) for segment in old}  # S3
    merged = [segment for segment in existing if id(segment) not in old_ids]
    merged.extend(new)
    merged.sort(key=lambda segment: segment.base_offset)
    install(merged)
    for segment in old:  # S4
        schedule_delete(segment)
    for segment in new:  # S5
        segment.change_file_suffixes(files.SWAP_SUFFIX, "")
    files.fsync_dir(directory, "replace.fsync_dir")  # S6
    for segment in new:
        segment.release_descriptors()  # never active: opened again while read
