"""``Log``: one partition directory of segments, as Kafka's ``LocalLog``/``UnifiedLog`` keep it.

A log is an ordered list of segments; the last one is the *active segment*,
the only one appended to.  Offsets are assigned densely by :meth:`Log.append`
(one record batch per call) and never change; compaction may leave gaps.

Crash protocols (the loader pass that finishes or undoes each step is in
brackets; ``docs/recovery.md`` tells the whole story):

* append: A1 write the batch with one ``write`` [L8 cuts a torn tail];
  A2 fsync the ``.log`` when the flush policy says so.
* roll: R1 flush the old active segment (``.log`` and indexes);
  R2 create the new segment's files [L7 loads them, empty]; R3 fsync the
  directory; R4 write the recovery-point checkpoint.
* truncate: T1 delete the later segments, newest first (rename to
  ``.deleted``) [L2, L6], so a crash leaves a prefix of the log, never a hole;
  T2 truncate the active segment and fsync it [L8]; T3 write the
  recovery-point checkpoint.
* retention: D1 rename each deleted segment's files to ``.deleted``, oldest
  first [L2, L6]; D2 remove them after ``file_delete_delay_ms`` [L2]; D3 the log
  start offset moves to the first remaining segment [L9].
* replace (Kafka's ``replaceSegments``): S1 flush the new segments;
  S2 rename them ``.cleaned`` -> ``.swap``, highest first [L3];
  S3 swap them into the segment list (memory only); S4 rename the old
  segments to ``.deleted`` [L4, L2]; S5 rename the new ones ``.swap`` -> ordinary
  [L5]; S6 fsync the directory.
* close: C1 flush the active segment; C2 write the recovery-point checkpoint;
  C3 write the log-start-offset checkpoint; C4 remove pending ``.deleted``
  files [L2]; C5 write the clean-shutdown marker [L10 deletes it; its absence
  makes L8 run].

Thread-safety: ``Log`` is thread-safe.  ``Log.lock`` (an ``RLock``) guards the
segment list, the active segment, the log start/end offsets, the recovery
point and the flush bookkeeping.  Appends, rolls, truncation, retention and
the cleaner's swap take it; readers take it only to snapshot the segment list
(pinning each segment's descriptor) and then read without it.  The cleaner
reads segments through readers and holds the lock only in
:meth:`Log.replace_segments`.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final

import attrs

from changelog import files
from changelog.config import LogConfig
from changelog.errors import (
    CleanerAbortedError,
    InvalidConfigError,
    LogClosedError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from changelog.loader import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    load_log,
    write_offset_checkpoint,
)
from changelog.lock import DirectoryLock
from changelog.record_batch import BatchHeader, Record, decode_records, encode_batch
from changelog.retention import segments_to_delete
from changelog.segment import LogSegment, SegmentReader

if TYPE_CHECKING:
    from changelog.cleaner import CleanerStats

__all__ = ["AppendInfo", "Clock", "Log", "parse_topic_partition", "wall_clock_ms"]

Clock = Callable[[], int]
"""A callable returning the current time in milliseconds."""

_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names
_PARTITION: Final = re.compile(r"[0-9]{1,10}")
_INT32_MAX: Final = 2**31 - 1
_BASE_OFFSET: Final = struct.Struct(">q")  # the first 8 bytes of a batch, outside its CRC

logger = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    """The default clock: wall-clock time in milliseconds."""
    return time.time_ns() // 1_000_000


def parse_topic_partition(directory: Path) -> tuple[str, int]:
    """``("orders", 3)`` for a directory named ``orders-3``; a typed error otherwise.

    The topic must be a legal Kafka topic name (1-249 of ``[a-zA-Z0-9._-]``)
    and the partition a non-negative int32.
    """
    topic, sep, number = directory.name.rpartition("-")
    if (
        not sep
        or not _TOPIC.fullmatch(topic)
        or not _PARTITION.fullmatch(number)
        or int(number) > _INT32_MAX
    ):
        raise InvalidConfigError(
            "directory", str(directory), "a partition directory must be named <topic>-<partition>"
        )
    return topic, int(number)


@attrs.frozen(kw_only=True)
class AppendInfo:
    """Where one :meth:`Log.append` put its batch."""

    first_offset: int
    """Offset of the first record."""
    last_offset: int
    """Offset of the last record (``first_offset + len(records) - 1``)."""
    timestamp_ms: int
    """The CreateTime every record got."""
    size_bytes: int
    """Size of the batch in the ``.log`` file."""
    segment_base_offset: int
    """Base offset of the segment that holds it."""
    flushed: bool
    """Whether the append was fsynced before returning (the flush policy decides)."""


class Log:
    """One partition log in one directory: append, read, roll, flush, truncate, retention, replace.

    Open with :meth:`Log.open` (which locks the directory and runs recovery)
    and close with :meth:`close` (or use it as a context manager).

    Invariants: ``segments`` is non-empty and sorted by base offset with
    distinct base offsets; the last one is the active segment;
    ``log_start_offset <= log_end_offset``; ``recovery_point <= log_end_offset``;
    the log end offset only moves back through :meth:`truncate_to`; the active
    segment is never deleted by retention nor replaced by the cleaner.

    Thread-safety: thread-safe; see the module docstring for what ``lock`` guards.
    """

    def __init__(
        self,
        directory: Path,
        *,
        config: LogConfig,
        clock: Clock,
        topic: str,
        partition: int,
        dir_lock: DirectoryLock,
        segments: list[LogSegment],
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
    ) -> None:
        """Assemble an opened log; use :meth:`Log.open`."""
        self._dir = directory
        self._config = config
        self._clock = clock
        self._topic = topic
        self._partition = partition
        self._dir_lock = dir_lock
        self.lock = threading.RLock()
        """Guards the segment list, the active segment, the offsets and flush bookkeeping."""
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self._log_start_offset = log_start_offset
        self._log_end_offset = log_end_offset
        self._recovery_point = recovery_point
        self._unflushed_records = 0
        self._last_flush_ms = clock()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._closed = False
        self._failure: LogStorageError | None = None
        self.cleaning_barrier_offset: int | None = None
        """Set by the store: the cleaner must not clean at or above this offset (``None``: no limit)."""
        self._prefix = f"[Log partition={topic}-{partition}, dir={directory}] "

    # ----------------------------------------------------------------- opening

    @classmethod
    def open(
        cls, directory: Path | str, config: LogConfig | None = None, clock: Clock | None = None
    ) -> Log:
        """Open (creating if needed) the partition directory ``<topic>-<partition>``.

        Locks it (a second owner gets :class:`~changelog.errors.LogLockedError`),
        runs the loader's recovery passes and returns the ready log.
        """
        directory = Path(directory)
        topic, partition = parse_topic_partition(directory)
        config = config if config is not None else LogConfig()
        clock = clock if clock is not None else wall_clock_ms
        if not directory.exists():
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LogStorageError(directory, "mkdir", exc) from exc
            files.fsync_dir(directory.parent, "open.fsync_parent")
        dir_lock = DirectoryLock(directory)
        dir_lock.acquire()
        try:
            loaded = load_log(
                directory, config=config, topic=topic, partition=partition, now_ms=clock()
            )
        except BaseException:
            dir_lock.release()
            raise
        return cls(
            directory,
            config=config,
            clock=clock,
            topic=topic,
            partition=partition,
            dir_lock=dir_lock,
            segments=loaded.segments,
            log_start_offset=loaded.log_start_offset,
            log_end_offset=loaded.log_end_offset,
            recovery_point=loaded.recovery_point,
        )

    def __enter__(self) -> Log:
        """Use the log as a context manager; it is closed cleanly on exit."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the log (cleanly, unless a simulated crash is unwinding)."""
        if exc_type is not None and issubclass(exc_type, files.SimulatedCrash):
            self._abandon()
        else:
            self.close()

    # ----------------------------------------------------------------- properties

    @property
    def dir(self) -> Path:
        """The partition directory."""
        return self._dir

    @property
    def config(self) -> LogConfig:
        """The log's configuration."""
        return self._config

    @property
    def clock(self) -> Clock:
        """The clock (milliseconds) used for timestamps, rolling and retention."""
        return self._clock

    @property
    def topic(self) -> str:
        """Topic name (the directory name before the last ``-``)."""
        return self._topic

    @property
    def partition(self) -> int:
        """Partition number (the directory name after the last ``-``)."""
        return self._partition

    @property
    def segments(self) -> list[LogSegment]:
        """A snapshot of the segments in offset order (the active one last)."""
        with self.lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        """The segment appends go to."""
        with self.lock:
            return self._segments[-1]

    @property
    def log_start_offset(self) -> int:
        """The first offset that may be read."""
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Offsets below this have been fsynced."""
        return self._recovery_point

    @property
    def closed(self) -> bool:
        """Whether the log was closed (or abandoned)."""
        return self._closed

    @property
    def size_bytes(self) -> int:
        """Total size of the segments' ``.log`` files."""
        with self.lock:
            return sum(segment.size_bytes for segment in self._segments)

    def _check_open(self) -> None:
        if self._failure is not None:
            raise LogClosedError(
                f"{self._prefix}the log failed ({self._failure}); reopen it to recover"
            ) from self._failure
        if self._closed:
            raise LogClosedError(f"{self._prefix}the log is closed")

    @contextlib.contextmanager
    def _fatal_on_storage_error(self) -> Iterator[None]:
        """A failed fsync leaves the page cache in an unknown state (what was written may
        never reach the disk, and a retry may report success): abandon the log, as Kafka
        takes a log directory offline.  Reopening runs recovery."""
        try:
            yield
        except LogStorageError as exc:
            logger.exception("%sfsync failed, the log is abandoned", self._prefix)
            self._failure = exc
            self._abandon()
            raise

    def __repr__(self) -> str:
        """Directory and offsets, for logs."""
        return (
            f"Log({str(self._dir)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._log_end_offset}, segments={len(self._segments)})"
        )

    # ----------------------------------------------------------------- appending

    def append(
        self, records: Sequence[tuple[bytes | None, bytes | None]], timestamp_ms: int | None = None
    ) -> AppendInfo:
        """Append ``records`` (``(key, value)`` pairs; ``None`` value = tombstone) as one batch.

        Every record gets ``timestamp_ms`` (default: the clock) as its
        CreateTime.  Bad records raise :class:`~changelog.errors.InvalidRecordError`
        and a batch over ``max_message_bytes`` raises
        :class:`~changelog.errors.RecordTooLargeError`; in both cases nothing is
        written.  Rolls first if the active segment is due.  With the default
        flush policy the batch is fsynced before this returns.
        """
        self._check_open()
        stamp = self._clock() if timestamp_ms is None else timestamp_ms
        batch = bytearray(encode_batch(0, records, timestamp_ms=stamp))  # offsets patched below
        size = len(batch)
        if size > self._config.max_message_bytes:
            raise RecordTooLargeError(size, self._config.max_message_bytes)
        count = len(records)
        with self.lock:
            self._check_open()
            first = self._log_end_offset
            last = first + count - 1
            _BASE_OFFSET.pack_into(batch, 0, first)
            segment = self._segments[-1]
            if segment.should_roll(
                messages_size=size, max_timestamp_ms=stamp, max_offset=last, now_ms=self._clock()
            ):
                segment = self._roll_locked()
            segment.append(
                batch,
                largest_offset=last,
                largest_timestamp_ms=stamp,
                offset_of_max_timestamp=last,
            )
            self._log_end_offset = last + 1
            self._unflushed_records += count
            flushed = False
            if (
                self._unflushed_records >= self._config.flush_messages
                or self._clock() - self._last_flush_ms >= self._config.flush_ms
            ):
                with self._fatal_on_storage_error():
                    segment.flush_log()
                self._mark_flushed()
                flushed = True
            return AppendInfo(
                first_offset=first,
                last_offset=last,
                timestamp_ms=stamp,
                size_bytes=size,
                segment_base_offset=segment.base_offset,
                flushed=flushed,
            )

    def _mark_flushed(self) -> None:
        self._unflushed_records = 0
        self._last_flush_ms = self._clock()
        self._recovery_point = self._log_end_offset

    # ----------------------------------------------------------------- rolling and flushing

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self.lock:
            self._check_open()
            return self._roll_locked()

    def _roll_locked(self) -> LogSegment:
        active = self._segments[-1]
        if active.size_bytes == 0 and active.base_offset == self._log_end_offset:
            return active
        with self._fatal_on_storage_error():
            active.on_become_inactive()
            active.flush()  # R1
        segment = LogSegment.create(
            self._dir, self._log_end_offset, config=self._config, created_ms=self._clock()
        )  # R2
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        files.fsync_dir(self._dir, "roll.fsync_dir")  # R3
        self._unflushed_records = 0
        self._last_flush_ms = self._clock()
        self._recovery_point = segment.base_offset
        self._write_recovery_point("roll.checkpoint")  # R4
        logger.info("%srolled new segment at offset %s", self._prefix, segment.base_offset)
        self._delete_expired_files()
        return segment

    def flush(self) -> None:
        """fsync the active segment (``.log`` and indexes); the recovery point becomes the end."""
        with self.lock:
            self._check_open()
            with self._fatal_on_storage_error():
                self._segments[-1].flush()
            self._mark_flushed()

    def _write_recovery_point(self, step: str) -> None:
        write_offset_checkpoint(
            self._dir / RECOVERY_POINT_CHECKPOINT,
            self._topic,
            self._partition,
            self._recovery_point,
        )
        logger.debug("%s%s: recovery point %s", self._prefix, step, self._recovery_point)

    # ----------------------------------------------------------------- reading

    def read_batches(
        self, start_offset: int = 0, *, max_offset: int | None = None
    ) -> Iterator[tuple[BatchHeader, bytes]]:
        """Yield ``(header, batch bytes)`` of every batch holding offsets ``>= start_offset``.

        Stops before the first batch whose base offset is ``>= max_offset``
        (exclusive).  The batches are CRC-checked; the first batch may start
        before ``start_offset`` (batches are never split).  Reads a snapshot:
        the segments and sizes as they were when iteration started,
        unaffected by later appends, swaps or deletions.  The bulk path of
        restore and dump: no per-record work.  The snapshot keeps the
        segments' descriptors open until the iterator is exhausted or closed.
        """
        for _path, _position, header, data in self._located_batches(start_offset, max_offset):
            yield header, data

    def _located_batches(
        self, start_offset: int, max_offset: int | None
    ) -> Iterator[tuple[Path, int, BatchHeader, bytes]]:
        """:meth:`read_batches` with each batch's file and position (for error messages)."""
        readers, start_position = self._snapshot(start_offset)
        try:
            for index, reader in enumerate(readers):
                for position, header, data in reader.batches(start_position if index == 0 else 0):
                    if max_offset is not None and header.base_offset >= max_offset:
                        return
                    if header.last_offset >= start_offset:
                        yield reader.path, position, header, data
        finally:
            for reader in readers:
                reader.close()

    def read(self, start_offset: int = 0, *, max_offset: int | None = None) -> Iterator[Record]:
        """Yield the records with offsets in ``[start_offset, max_offset)`` in offset order.

        From inside a gap left by compaction it yields the next record.  Raises
        :class:`~changelog.errors.OffsetOutOfRangeError` outside
        ``[log_start_offset, log_end_offset]`` and
        :class:`~changelog.errors.CorruptRecordError` (path and position) for
        a batch that fails its CRC or framing.  Control batches are skipped.
        """
        for path, position, header, data in self._located_batches(start_offset, max_offset):
            if header.is_control:
                continue
            records = decode_records(data, path=path, position=position, validate=False)
            if header.base_offset >= start_offset and (
                max_offset is None or header.last_offset < max_offset
            ):
                yield from records
                continue
            for record in records:
                if record.offset >= start_offset and (
                    max_offset is None or record.offset < max_offset
                ):
                    yield record

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Offset of the first record with a timestamp ``>= timestamp_ms``, or ``None``.

        Kafka's ``fetchOffsetByTimestamp`` (ListOffsets): the first segment whose
        largest timestamp reaches the target, then that segment's time index.
        """
        with self.lock:
            self._check_open()
            for segment in self._segments:
                if segment.max_timestamp_so_far_ms >= timestamp_ms:
                    found = segment.find_offset_by_timestamp(timestamp_ms)
                    if found is not None:
                        return max(found, self._log_start_offset)
            return None

    def _snapshot(self, start_offset: int) -> tuple[list[SegmentReader], int]:
        """Readers over the segments from the one holding ``start_offset``, and the start position."""
        with self.lock:
            self._check_open()
            if not self._log_start_offset <= start_offset <= self._log_end_offset:
                raise OffsetOutOfRangeError(
                    start_offset, self._log_start_offset, self._log_end_offset
                )
            first = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
            segments = self._segments[first:]
            start_position = segments[0].translate_offset(start_offset)
            if start_position is None:  # past the first segment's data: start at the next
                segments = segments[1:]
                start_position = 0
            readers: list[SegmentReader] = []
            try:
                for segment in segments:
                    readers.append(segment.open_reader())
            except BaseException:
                for reader in readers:
                    reader.close()
                raise
            return readers, start_position

    # ----------------------------------------------------------------- truncation

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset ``>= offset``; returns the new log end offset.

        Batches are never split: if ``offset`` falls inside one, the whole
        batch goes and the log ends at its base offset.  Raises
        :class:`~changelog.errors.OffsetOutOfRangeError` outside
        ``[log_start_offset, log_end_offset]``.
        """
        with self.lock:
            self._check_open()
            if not self._log_start_offset <= offset <= self._log_end_offset:
                raise OffsetOutOfRangeError(offset, self._log_start_offset, self._log_end_offset)
            if offset == self._log_end_offset:
                return offset
            keep = max(1, bisect.bisect_right(self._bases, offset))
            doomed = self._segments[keep:]
            for segment in reversed(doomed):  # T1, newest first: a crash leaves a prefix
                self._schedule_delete(segment)
            del self._segments[keep:]
            del self._bases[keep:]
            active = self._segments[-1]
            active.truncate_to(offset, now_ms=self._clock())  # T2
            active.flush()
            self._log_end_offset = active.read_next_offset()
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._unflushed_records = 0
            self._write_recovery_point("truncate.checkpoint")  # T3
            logger.info(
                "%struncated to offset %s (log end offset now %s)",
                self._prefix,
                offset,
                self._log_end_offset,
            )
            return self._log_end_offset

    # ----------------------------------------------------------------- retention

    def delete_old_segments(self) -> int:
        """Apply retention (see :mod:`changelog.retention`); returns the number of segments deleted."""
        with self.lock:
            self._check_open()
            count = segments_to_delete(
                self._segments,
                config=self._config,
                log_start_offset=self._log_start_offset,
                now_ms=self._clock(),
            )
            doomed = self._segments[:count]
            for segment in doomed:  # D1 (oldest first)
                self._schedule_delete(segment)
                del self._segments[0]
                del self._bases[0]
            if doomed:
                self._log_start_offset = max(self._log_start_offset, self._bases[0])  # D3
                logger.info(
                    "%sretention deleted %s segment(s); log start offset now %s",
                    self._prefix,
                    len(doomed),
                    self._log_start_offset,
                )
            self._delete_expired_files()  # D2
            return len(doomed)

    def _schedule_delete(self, segment: LogSegment) -> None:
        """Rename ``segment``'s files to ``.deleted`` and queue them for removal (D1/T1/S4)."""
        segment.change_file_suffixes(segment.file_suffix, files.DELETED_SUFFIX)
        segment.close()
        self._pending_deletes.append((self._clock() + self._config.file_delete_delay_ms, segment))
        if self._config.file_delete_delay_ms == 0:
            self._delete_expired_files()

    def _delete_expired_files(self, *, everything: bool = False) -> None:
        now = self._clock()
        keep: list[tuple[int, LogSegment]] = []
        for deadline, segment in self._pending_deletes:
            if everything or deadline <= now:
                segment.delete()
            else:
                keep.append((deadline, segment))
        self._pending_deletes = keep

    # ----------------------------------------------------------------- cleaning

    def clean(self, force: bool = False) -> CleanerStats | None:
        """Run one cleaning pass if the log is due (delegates to ``changelog.cleaner.clean_log``).

        Returns the pass's statistics, or ``None`` when nothing was due.
        """
        from changelog.cleaner import clean_log  # noqa: PLC0415 - the cleaner imports this module

        return clean_log(self, force=force)

    def replace_segments(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> None:
        """Swap ``new_segments`` (files suffixed ``.cleaned``) in for ``old_segments``.

        Kafka's ``LocalLog.replaceSegments``, steps S1-S6 (module docstring).
        Each rename is a fault point followed by an fsync of the directory, so
        a crash at any step leaves either the old or the new segments after
        the loader has run.  Raises :class:`~changelog.errors.CleanerAbortedError`
        (having deleted ``new_segments``) if an old segment is no longer in the
        log or is the active segment; nothing else has changed then.
        """
        new = sorted(new_segments, key=lambda segment: segment.base_offset)
        old = sorted(old_segments, key=lambda segment: segment.base_offset)
        with self.lock:
            self._check_open()
            current = {id(segment) for segment in self._segments[:-1]}
            if not new or any(id(segment) not in current for segment in old):
                for segment in new:
                    segment.delete()
                raise CleanerAbortedError(
                    f"{self._prefix}the segments to replace are no longer in the log (or one "
                    "is the active segment); the cleaned segments were deleted"
                )
            for segment in new:  # S1
                segment.flush()
            for segment in reversed(new):  # S2
                segment.change_file_suffixes(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
            old_ids = {id(segment) for segment in old}  # S3
            merged = [segment for segment in self._segments if id(segment) not in old_ids]
            merged.extend(new)
            merged.sort(key=lambda segment: segment.base_offset)
            self._segments[:] = merged
            self._bases[:] = [segment.base_offset for segment in merged]
            for segment in old:  # S4
                self._schedule_delete(segment)
            for segment in new:  # S5
                segment.change_file_suffixes(files.SWAP_SUFFIX, "")
            files.fsync_dir(self._dir, "replace.fsync_dir")  # S6
            logger.info(
                "%sreplaced segment(s) %s with %s",
                self._prefix,
                [segment.base_offset for segment in old],
                [segment.base_offset for segment in new],
            )

    # ----------------------------------------------------------------- closing

    def close(self) -> None:
        """Flush, write both checkpoints and the clean-shutdown marker, release the lock.

        Idempotent.  Steps C1-C5 (module docstring); the marker is written
        last, so a crash before it makes the next open run recovery.
        """
        with self.lock:
            if self._closed:
                return
            active = self._segments[-1]
            with self._fatal_on_storage_error():
                active.on_become_inactive()
                active.flush()  # C1
            self._mark_flushed()
            self._write_recovery_point("close.checkpoint")  # C2
            write_offset_checkpoint(
                self._dir / LOG_START_OFFSET_CHECKPOINT,
                self._topic,
                self._partition,
                self._log_start_offset,
            )  # C3
            self._delete_expired_files(everything=True)  # C4
            files.atomic_write(self._dir / CLEAN_SHUTDOWN_FILE, b"", "close.marker")  # C5
            self._release()
            logger.info("%sclosed at log end offset %s", self._prefix, self._log_end_offset)

    def _abandon(self) -> None:
        """Drop the log as a crash would: close descriptors and the lock, write nothing.

        For tests that simulate ``kill -9`` in-process: whatever was not
        fsynced stays in the page cache (the next open sees it, as after a
        process crash), no checkpoint or marker is written, so the next open
        recovers.  Pending ``.deleted`` files stay for the loader (pass L2).
        """
        with self.lock:
            if self._closed:
                return
            self._pending_deletes.clear()
            self._release()

    def _release(self) -> None:
        self._closed = True
        try:
            for segment in self._segments:
                segment.close()
            for _, segment in self._pending_deletes:
                segment.close()
        finally:
            self._dir_lock.release()
