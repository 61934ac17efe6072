"""Which segments retention deletes: a pure function of the segment list, the config and the clock.

Kafka's ``UnifiedLog.deleteOldSegments`` runs three passes, each deleting a
prefix of the segments (the oldest ones) for which a predicate holds:

1. log start offset breached: the *next* segment's base offset is at or below
   the log start offset, so nothing in this segment is readable any more
   (always, whatever the cleanup policy);
2. ``retention_bytes`` (only with ``delete`` in ``cleanup_policy``): while the
   log is larger than the limit, the oldest segments whose removal keeps it at
   or above the limit;
3. ``retention_ms`` (same condition): segments whose largest timestamp is more
   than ``retention_ms`` older than now.

Where we differ from Kafka: the active segment is never deleted (Kafka rolls a
new empty segment so that it can delete the old active one).  The log end
offset therefore never moves back and a store's latest commit always stays
on disk; a segment becomes deletable once it has been rolled.

Thread-safety: pure functions; the caller holds ``Log.lock`` while the
segment list it passes can change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from changelog.config import LogConfig
from changelog.segment.view import SegmentView

__all__ = [
    "SegmentView",
    "log_start_offset_breached",
    "retention_bytes_breached",
    "retention_ms_breached",
    "segments_to_delete",
]


Predicate = Callable[[SegmentView, SegmentView | None], bool]


def _deletable_prefix(segments: Sequence[SegmentView], predicate: Predicate) -> int:
    """Length of the longest prefix of non-active segments for which ``predicate`` holds.

    ``predicate(segment, next_segment)``; the last segment is the active one
    and is never part of the prefix.
    """
    count = 0
    for index in range(len(segments) - 1):
        if not predicate(segments[index], segments[index + 1]):
            break
        count += 1
    return count


def log_start_offset_breached(segments: Sequence[SegmentView], log_start_offset: int) -> int:
    """How many leading segments lie wholly below ``log_start_offset``."""
    return _deletable_prefix(
        segments, lambda _seg, nxt: nxt is not None and nxt.base_offset <= log_start_offset
    )


def retention_bytes_breached(segments: Sequence[SegmentView], retention_bytes: int) -> int:
    """How many leading segments to delete so the log shrinks towards ``retention_bytes``.

    Like Kafka: the excess is ``size - retention_bytes``; a segment is deleted
    while its size still fits in what remains of the excess.
    """
    if retention_bytes < 0:
        return 0
    total = sum(segment.size_bytes for segment in segments)
    if total < retention_bytes:
        return 0
    excess = total - retention_bytes

    def predicate(segment: SegmentView, _next: SegmentView | None) -> bool:
        nonlocal excess
        if excess - segment.size_bytes >= 0:
            excess -= segment.size_bytes
            return True
        return False

    return _deletable_prefix(segments, predicate)


def retention_ms_breached(segments: Sequence[SegmentView], retention_ms: int, now_ms: int) -> int:
    """How many leading segments have a largest timestamp older than ``retention_ms``."""
    if retention_ms < 0:
        return 0
    return _deletable_prefix(
        segments, lambda segment, _next: now_ms - segment.largest_timestamp_ms > retention_ms
    )


def segments_to_delete(
    segments: Sequence[SegmentView],
    *,
    config: LogConfig,
    log_start_offset: int,
    now_ms: int,
) -> int:
    """How many of the oldest ``segments`` retention deletes now (the three passes, in order).

    ``segments`` is the whole log in offset order, the active segment last.
    """
    remaining = list(segments)
    deleted = log_start_offset_breached(remaining, log_start_offset)
    remaining = remaining[deleted:]
    if config.delete:
        count = retention_bytes_breached(remaining, config.retention_bytes)
        deleted += count
        remaining = remaining[count:]
        deleted += retention_ms_breached(remaining, config.retention_ms, now_ms)
    return deleted
