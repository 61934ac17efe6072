"""The segment list of one log and the segments on their way out (Kafka's ``LogSegments``).

The list is ordered by base offset; its last segment is the *active segment*.
Segments leave it in three ways, each a numbered step of a crash protocol
(``changelog/log/log.py``): truncation drops a suffix, newest first (T1);
retention drops a prefix, oldest first (D1); the cleaner's swap replaces a run
(S4, :mod:`changelog.log.replace`).  Either way the segment's files are renamed to
``.deleted`` at once and removed ``file_delete_delay_ms`` later (D2), or at
close (C4); readers that pinned a descriptor keep reading the deleted file.
After a crash the loader deletes leftover ``.deleted`` files (pass L2).

Thread-safety: not thread-safe; the owning ``Log`` calls it under ``Log.lock``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from pathlib import Path

from changelog.config import LogConfig
from changelog.fs import files
from changelog.log.retention import segments_to_delete
from changelog.segment.segment import LogSegment

__all__ = ["LogSegments"]


class LogSegments:
    """The segments of one log in offset order, and those scheduled for deletion.

    Invariants: ``items`` is non-empty, sorted by base offset with distinct
    base offsets, and ``bases`` holds exactly their base offsets; every
    pending segment is closed and its files carry the ``.deleted`` suffix.

    Thread-safety: not thread-safe (module docstring).
    """

    def __init__(
        self,
        directory: Path,
        segments: list[LogSegment],
        *,
        config: LogConfig,
        clock: Callable[[], int],
    ) -> None:
        """Own ``segments`` (opened by the loader)."""
        self._dir = directory
        self._config = config
        self._clock = clock
        self.items = segments
        """The segments, oldest first (the active one last)."""
        self.bases = [segment.base_offset for segment in segments]
        """Their base offsets, for bisection."""
        self._pending: list[tuple[int, LogSegment]] = []
        self._inactive_bytes: int | None = None  # cache: None after any change of the list

    def inactive_bytes(self) -> int:
        """Bytes of every segment but the active one (their sizes never change)."""
        if self._inactive_bytes is None:
            self._inactive_bytes = sum(segment.size_bytes for segment in self.items[:-1])
        return self._inactive_bytes

    def __iter__(self) -> Iterator[LogSegment]:
        """The segments, oldest first."""
        return iter(self.items)

    def __len__(self) -> int:
        """How many segments the log has."""
        return len(self.items)

    @property
    def active(self) -> LogSegment:
        """The segment appends go to."""
        return self.items[-1]

    def floor(self, offset: int) -> int:
        """Index of the last segment whose base offset is ``<= offset`` (0 if none is)."""
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

    def add(self, segment: LogSegment) -> None:
        """Append a new active segment (its base offset is above every other)."""
        self.items.append(segment)
        self.bases.append(segment.base_offset)
        self._inactive_bytes = None

    def roll(self, base_offset: int) -> LogSegment:
        """R2-R3: create the new active segment's files at ``base_offset``, fsync the directory."""
        segment = LogSegment.create(
            self._dir, base_offset, config=self._config, created_ms=self._clock()
        )
        self.add(segment)
        files.fsync_dir(self._dir, "roll.fsync_dir")
        return segment

    def truncate_to(self, offset: int) -> int:
        """T1-T2: drop the segments above ``offset`` (newest first, so a crash leaves a prefix),
        truncate the active one there and fsync it; returns the new log end offset."""
        self.delete_after(offset)
        self.active.truncate_to(offset, now_ms=self._clock())
        self.active.flush()
        return self.active.read_next_offset()

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Offset of the first record with a timestamp ``>= timestamp_ms`` (Kafka's
        ``fetchOffsetByTimestamp``: the first segment that reaches it, then its time index)."""
        for segment in self.items:
            if segment.max_timestamp_so_far_ms >= timestamp_ms:
                found = segment.find_offset_by_timestamp(timestamp_ms)
                if found is not None:
                    return found
        return None

    def install(self, segments: list[LogSegment]) -> None:
        """Make ``segments`` the list (the cleaner's swap, S3)."""
        self.items[:] = segments
        self.bases[:] = [segment.base_offset for segment in segments]
        self._inactive_bytes = None

    def delete_after(self, offset: int) -> None:
        """T1: delete the segments wholly above ``offset``, newest first (a crash leaves a prefix)."""
        keep = max(1, bisect.bisect_right(self.bases, offset))
        for segment in reversed(self.items[keep:]):
            self.schedule_delete(segment)
        del self.items[keep:]
        del self.bases[keep:]
        self._inactive_bytes = None

    def apply_retention(self, log_start_offset: int) -> int:
        """D1: delete, oldest first, what :func:`segments_to_delete` says; returns how many."""
        count = segments_to_delete(
            self.items, config=self._config, log_start_offset=log_start_offset, now_ms=self._clock()
        )
        self.delete_oldest(count)
        return count

    def delete_oldest(self, count: int) -> None:
        """D1: delete the ``count`` oldest segments, oldest first."""
        for segment in self.items[:count]:
            self.schedule_delete(segment)
            del self.items[0]
            del self.bases[0]
            self._inactive_bytes = None

    def schedule_delete(self, segment: LogSegment) -> None:
        """Rename ``segment``'s files to ``.deleted`` and queue them for removal (D1/T1/S4)."""
        segment.change_file_suffixes(segment.file_suffix, files.DELETED_SUFFIX)
        segment.close()
        self._pending.append((self._clock() + self._config.file_delete_delay_ms, segment))
        if self._config.file_delete_delay_ms == 0:
            self.delete_expired()

    def delete_expired(self, *, everything: bool = False) -> None:
        """D2 (C4 with ``everything``): remove the ``.deleted`` files whose delay has passed."""
        now = self._clock()
        keep: list[tuple[int, LogSegment]] = []
        for deadline, segment in self._pending:
            if everything or deadline <= now:
                segment.delete()
            else:
                keep.append((deadline, segment))
        self._pending = keep

    def close(self, *, keep_pending_files: bool = False) -> None:
        """Close every segment; ``keep_pending_files`` (a simulated crash) forgets the queue,
        leaving its ``.deleted`` files for the loader (pass L2)."""
        if keep_pending_files:
            self._pending.clear()
        for segment in self.items:
            segment.close()
        for _, segment in self._pending:
            segment.close()
