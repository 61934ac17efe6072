"""What code above the segment layer may read of a segment: the one segment Protocol.

Retention, the cleaner's due logic and its grouping each read a few properties
of a segment without depending on :class:`~changelog.segment.segment.LogSegment`
itself (tests pass light fakes).  :class:`SegmentView` is the part they share;
the cleaner's views extend it with what only they read.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SegmentView"]


class SegmentView(Protocol):
    """A segment's offsets, size and time: a subset of ``LogSegment``."""

    @property
    def base_offset(self) -> int:
        """The segment's base offset."""

    @property
    def size_bytes(self) -> int:
        """The ``.log`` file's size."""

    @property
    def largest_timestamp_ms(self) -> int:
        """The largest record timestamp (retention and compaction lags compare it with now)."""
