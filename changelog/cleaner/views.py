"""What the cleaner reads from a log and its segments: the Protocols its passes are written against.

Kept apart from :mod:`changelog.cleaner.manager` so that the due logic, the
delete-horizon memo and the pass can all name them without importing each other.
``Log`` and ``LogSegment`` satisfy them; tests pass light fakes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from changelog.config import LogConfig
from changelog.segment.view import SegmentView

__all__ = ["CleanableLog", "CleanableSegment"]


class CleanableSegment(SegmentView, Protocol):
    """What the due logic reads from a segment (a subset of ``LogSegment``)."""

    @property
    def log_path(self) -> Path:
        """The ``.log`` file (for error messages)."""

    def first_batch_timestamp_ms(self) -> int | None:
        """The first batch's max timestamp (maximum compaction lag measures from it)."""

    def open_reader(self) -> Any:
        """A private reader of the segment (called under the log's lock)."""


class CleanableLog(Protocol):
    """What the due logic reads from a log (a subset of ``Log``)."""

    @property
    def dir(self) -> Path:
        """The partition directory (identifies the log)."""

    @property
    def topic(self) -> str:
        """Topic name (checkpoint key and log prefix)."""

    @property
    def partition(self) -> int:
        """Partition number (checkpoint key and log prefix)."""

    @property
    def config(self) -> LogConfig:
        """The log's settings."""

    @property
    def lock(self) -> Any:
        """The log's lock (held to open readers)."""

    @property
    def segments(self) -> Sequence[Any]:
        """Segments in offset order, the active one last."""

    @property
    def active_segment(self) -> Any:
        """The segment appends go to (never cleaned)."""

    @property
    def log_start_offset(self) -> int:
        """First readable offset."""

    @property
    def log_end_offset(self) -> int:
        """Offset the next append gets."""

    @property
    def last_stable_offset(self) -> int:
        """First offset of the earliest open transaction, else the log end offset."""

    @property
    def cleaning_barrier_offset(self) -> int | None:
        """No tombstone at or above this offset may be removed (``None``: no barrier)."""
