"""A segment's two sparse indexes and the running state that fills them, as Kafka keeps it.

Beside its ``.index`` and ``.timeindex``, Kafka's ``LogSegment`` keeps the
bytes appended since the last index entry and the largest timestamp so far
with the offset that goes with it.  Every batch, appended or re-read by
recovery, goes through the same step (:meth:`SegmentIndexes.add_batch`, the
loop body of Kafka's ``LogSegment.append`` and ``LogSegment.recover``)::

    for each batch, at its position in the .log:
        if its max timestamp > the largest so far:
            largest so far = (its max timestamp, its last offset)
        if bytes since the last entry > index_interval_bytes:
            .index     += (its last offset, its position)
            .timeindex += largest so far              (only if the timestamp grew)
            bytes since the last entry = 0
        bytes since the last entry += its size

The time index names the *last offset of the batch* holding the largest
timestamp (Kafka's "shallow offset of max timestamp"), never a record's own
offset.  So the indexes depend only on the batches in the file, not on how
they were grouped into writes, and recovery rebuilds them byte for byte.

Both files are rebuilt from the ``.log`` after a crash rather than trusted
(see ``docs/recovery.md``); one that cannot even be loaded is deleted and
recreated empty at open, and its segment is then recovered.

Thread-safety: not thread-safe; the segment's owner calls it under ``Log.lock``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from changelog.config import LogConfig
from changelog.errors import (
    CorruptIndexError,
    CorruptRecordError,
    SegmentOperationError,
    UnsupportedFormatError,
)
from changelog.fs import files
from changelog.limits import INT32_MAX, NO_TIMESTAMP
from changelog.record.batch import BatchHeader, batch_extents
from changelog.segment.offset_index import OffsetIndex
from changelog.segment.time_index import TimeIndex

__all__ = ["SegmentIndexes", "write_extents"]


logger = logging.getLogger(__name__)

_Index = TypeVar("_Index", OffsetIndex, TimeIndex)


def _open_index(
    kind: type[_Index], path: Path, base_offset: int, config: LogConfig, rebuild: list[str]
) -> _Index:
    """Open an index; one that fails to load is logged, deleted and recreated empty."""
    try:
        return kind.open(path, base_offset, max_index_size=config.segment_index_bytes)
    except CorruptIndexError as exc:
        logger.warning(
            "[%s] deleting unreadable index (it will be rebuilt): %s", path.parent.name, exc
        )
        rebuild.append(str(exc))
        files.delete_file(path, "segment.delete_bad_index")
        return kind.open(path, base_offset, max_index_size=config.segment_index_bytes)


def write_extents(
    buf: bytes | bytearray, largest_offset: int, *, path: Path, prefix: str
) -> list[tuple[int, int, int]]:
    """``(size, last offset, max timestamp)`` of each batch of a multi-batch append.

    Refuses (:class:`ChangelogError`, nothing written yet) a buffer that is not
    whole batches back to back or whose last offset is not ``largest_offset``.
    """
    try:
        extents = batch_extents(buf, path=path)
    except CorruptRecordError as exc:
        raise SegmentOperationError(
            path,
            f"{prefix}cannot append: not whole batches ({exc.reason} at byte "
            f"{exc.position} of the {len(buf)}-byte buffer)",
        ) from exc
    if extents[-1][1] != largest_offset:
        raise SegmentOperationError(
            path,
            f"{prefix}cannot append: largest_offset {largest_offset} but the last "
            f"batch ends at offset {extents[-1][1]}",
        )
    return extents


class SegmentIndexes:
    """The ``.index`` and ``.timeindex`` of one segment, and the state that fills them.

    Invariants: each offset index entry is the last offset of a batch and the
    position where that batch starts; time index entries never decrease and
    name the last offset of a batch; ``max_timestamp_ms`` is the largest
    max timestamp of the batches accounted for (:data:`NO_TIMESTAMP` for none)
    and ``offset_of_max_timestamp`` the last offset of the first batch holding it.

    Thread-safety: not thread-safe (see the module docstring).
    """

    def __init__(
        self, offset_index: OffsetIndex, time_index: TimeIndex, *, config: LogConfig
    ) -> None:
        """Use two opened indexes; see :meth:`open`."""
        self.offset_index = offset_index
        self.time_index = time_index
        self._config = config
        self.bytes_since_last_entry = 0
        self.max_timestamp_ms = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.rebuild_reasons: list[str] = []
        """Why an index file was unreadable at open (it was recreated empty)."""

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, *, suffix: str, config: LogConfig
    ) -> SegmentIndexes:
        """Open (creating if missing) both indexes of the segment at ``base_offset``."""
        rebuild: list[str] = []
        offset_index = _open_index(
            OffsetIndex,
            directory / (files.segment_file_name(base_offset, files.INDEX_SUFFIX) + suffix),
            base_offset,
            config,
            rebuild,
        )
        try:
            time_index = _open_index(
                TimeIndex,
                directory
                / (files.segment_file_name(base_offset, files.TIME_INDEX_SUFFIX) + suffix),
                base_offset,
                config,
                rebuild,
            )
        except BaseException:
            offset_index.close()
            raise
        indexes = cls(offset_index, time_index, config=config)
        indexes.rebuild_reasons = rebuild
        return indexes

    # ----------------------------------------------------------------- the per-batch step

    def add_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        """Account for the batch of ``size`` bytes at ``position`` (the step in the module docstring)."""
        if max_timestamp > self.max_timestamp_ms:
            self.max_timestamp_ms = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.bytes_since_last_entry > self._config.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_ms, self.offset_of_max_timestamp)
            self.bytes_since_last_entry = 0
        self.bytes_since_last_entry += size

    def rebuild(
        self,
        batches: Iterable[tuple[int, BatchHeader, bytes]],
        *,
        base_offset: int,
        prefix: str,
        stopped: Callable[[str], None] | None = None,
    ) -> int:
        """Empty both indexes and re-add ``batches`` (a whole ``.log`` from position 0, CRC-checked).

        Kafka's ``LogSegment.recover`` loop: stops at the first batch that is
        corrupt (``batches`` raises :class:`CorruptRecordError`), goes backwards
        or lies beyond int32 of ``base_offset``; returns where the valid batches
        end.  The indexes then end as on a roll (final time entry, trimmed).
        Why it stopped before the end goes to ``stopped`` (the caller words
        it: a recovering segment knows when the rest is its preallocated
        zeros), or else is logged as a warning.
        """
        report = stopped if stopped is not None else lambda why: logger.warning("%s%s", prefix, why)
        self.reset()
        valid = 0
        expected_next = base_offset
        try:
            for position, header, _ in batches:
                if (
                    header.base_offset < expected_next
                    or header.last_offset - base_offset > INT32_MAX
                ):
                    report(
                        f"batch at position {position} has offsets [{header.base_offset}, "
                        f"{header.last_offset}] out of order or range; truncating there"
                    )
                    break
                expected_next = header.next_offset
                self.add_batch(
                    position, header.size_in_bytes, header.last_offset, header.max_timestamp
                )
                valid = position + header.size_in_bytes
        except CorruptRecordError as exc:
            report(f"invalid batch found during recovery: {exc}")
        self.append_final_time_entry()
        self.trim_to_valid_size()
        return valid

    def append_final_time_entry(self) -> None:
        """Make the time index's last entry the largest timestamp (Kafka does this on roll/close)."""
        if self.max_timestamp_ms >= 0:
            self.time_index.maybe_append(
                self.max_timestamp_ms, self.offset_of_max_timestamp, skip_full_check=True
            )

    def forget_max_timestamp(self) -> None:
        """Back to "no batch seen" for the largest timestamp (the files stay as they are)."""
        self.max_timestamp_ms = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1

    def reset(self) -> None:
        """Empty both indexes and forget everything: before :meth:`add_batch` re-reads every batch."""
        self.offset_index.reset()
        self.time_index.reset()
        self.forget_max_timestamp()
        self.bytes_since_last_entry = 0

    def load_max_timestamp(self) -> bool:
        """Take the largest timestamp from the time index's last entry; False if it has none."""
        self.forget_max_timestamp()
        entry = self.time_index.last_entry()
        if entry.timestamp_ms < 0:
            return False
        self.max_timestamp_ms = entry.timestamp_ms
        self.offset_of_max_timestamp = entry.offset
        return True

    def scan_max_timestamp(self, headers: Iterable[tuple[int, BatchHeader]], prefix: str) -> None:
        """Find the largest timestamp by reading every batch header (a rare path: after truncation).

        A torn tail (or a preallocated segment's zeros) stops the scan, logged
        at DEBUG only: after a crash ``recover`` cuts it and says what it cut;
        anywhere else the read that reaches it reports the corruption.
        """
        self.forget_max_timestamp()
        try:
            for _, header in headers:
                if header.max_timestamp > self.max_timestamp_ms:
                    self.max_timestamp_ms = header.max_timestamp
                    self.offset_of_max_timestamp = header.last_offset
        except (CorruptRecordError, UnsupportedFormatError) as exc:
            logger.debug("%sthe scan for the largest timestamp stops: %s", prefix, exc)

    # ----------------------------------------------------------------- whole-file operations

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets ``>= offset`` and give both files their full size back."""
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.offset_index.resize(self._config.segment_index_bytes)
        self.time_index.resize(self._config.segment_index_bytes)
        self.bytes_since_last_entry = 0

    def trim_to_valid_size(self) -> None:
        """Cut both files to their entries (an inactive segment's indexes stop growing)."""
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def is_full(self) -> bool:
        """Whether either index is full (the segment must roll)."""
        return self.offset_index.is_full() or self.time_index.is_full()

    def appends_before_full(self) -> int:
        """How many more batches :meth:`add_batch` can take before :meth:`is_full` may hold
        (each adds at most one entry to each index)."""
        return max(
            0,
            min(
                self.offset_index.max_entries - len(self.offset_index),
                self.time_index.max_entries - 1 - len(self.time_index),
            ),
        )

    def sanity_check(self, log_size: int) -> None:
        """Each index's own checks, and the last offset entry must point inside the ``.log``.

        Raises :class:`~changelog.errors.CorruptIndexError` naming the file and the values.
        """
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        last = self.offset_index.last_entry()
        if last.position > log_size or (log_size == 0 and len(self.offset_index) > 0):
            raise CorruptIndexError(
                self.offset_index.path,
                None,
                "index entry points past the end of the log",
                expected=log_size,
                actual=last.position,
            )

    def flush(self) -> None:
        """fsync both files."""
        self.offset_index.flush()
        self.time_index.flush()

    def release(self) -> None:
        """Close both descriptors; the next write opens them again."""
        try:
            self.offset_index.release()
        finally:
            self.time_index.release()

    def close(self) -> None:
        """Close both files (the time index even if closing the offset index fails)."""
        try:
            self.offset_index.close()
        finally:
            self.time_index.close()

    def set_paths(self, offset_index_path: Path, time_index_path: Path) -> None:
        """Record where the files were renamed to (the descriptors stay valid)."""
        self.offset_index.path = offset_index_path
        self.time_index.path = time_index_path
