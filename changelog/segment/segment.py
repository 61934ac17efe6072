"""One log segment: a ``.log`` file of record batches with its ``.index`` and ``.timeindex``.

Files (names from :func:`changelog.fs.files.segment_file_name`, plus an optional
protocol suffix ``.cleaned``/``.swap`` while the segment-replace protocol runs):

    file                        | content                                 | after a crash
    ----------------------------+-----------------------------------------+------------------------
    <base offset>.log           | record batches v2, back to back; the    | trusted batch by batch
                                | active segment's may end in zeros       | (CRC) past the recovery
                                | (preallocated space, ``preallocate``)   | point; a torn or zero
                                |                                         | tail is cut
    <base offset>.index         | sparse (relative offset, position)      | rebuilt from the .log
    <base offset>.timeindex     | sparse (max timestamp so far, offset)   | rebuilt from the .log

The indexes, and Kafka's rule for filling them batch by batch, are in
:mod:`changelog.segment.indexes`; the shared ``.log`` descriptor and the
lock-free readers in :mod:`changelog.segment.reader` (``SegmentReader`` is
imported back here for its users).  An offset is looked up in the offset index,
then batch headers are scanned from the entry found.

Preallocation (``LogConfig.preallocate``, asked for by the log for its active
segment on each append): when an append does not fit in the space the ``.log``
already has, a second write puts ``preallocate_extent_bytes`` of zeros after the
batch, so the next appends overwrite allocated, zero-filled blocks and their
flush (:meth:`LogSegment.flush_log`, :meth:`LogSegment.flush_pinned`) is an
``fdatasync`` that commits no metadata.  The zeros past ``size_bytes`` are not
part of the segment: :meth:`LogSegment.on_become_inactive` (a roll, a clean
close) cuts them before the segment's final fsync, and after a crash the loader
cuts them as the end of the log (``changelog.log.load_plan``).

Descriptors: a segment that is not active holds none (:meth:`LogSegment.release_descriptors`,
called by the loader for every segment but the last, by a roll for the old active
segment and by the cleaner's swap for the cleaned ones); its files are opened while
they are used.

Thread-safety: a :class:`LogSegment` is not thread-safe: the owning ``Log``
serialises every mutation and :meth:`open_reader` call under ``Log.lock``.
"""

from __future__ import annotations

import errno
import functools
import logging
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from changelog.config import LogConfig
from changelog.errors import (
    ChangelogError,
    LogStorageError,
    SegmentChangedError,
    SegmentOperationError,
)
from changelog.fs import files
from changelog.limits import INT32_MAX
from changelog.record.batch import LOG_OVERHEAD, BatchHeader, declared_size
from changelog.segment.indexes import SegmentIndexes, write_extents
from changelog.segment.offset_index import OffsetIndex, OffsetPosition
from changelog.segment.reader import SegmentReader, SharedLogFile
from changelog.segment.time_index import TimeIndex
from changelog.segment.txn_index import TransactionIndex

__all__ = ["LARGE_APPEND_BYTES", "LogSegment", "SegmentReader", "roll_jitter_ms"]

logger = logging.getLogger(__name__)

LARGE_APPEND_BYTES: Final = 64 * 1024
"""An append of this size or more that does not fit in the preallocated space grows the
file without writing zeros after it: zeros double the bytes a bulk writer sends to the
disk (measured: 1,000-record commits 0.75-0.87x as fast with them), and its own size
makes the metadata a growing file's flush commits cheap beside it."""

_ZERO_PIECE_BYTES: Final = 64 * 1024
"""The zeros go to the page cache in writes of at most this size: one large write makes the
kernel cache the extent in large folios, and every small append into such a folio then costs
more (a 130-byte ``pwrite`` into zeros written 1 MiB at once: 1.5 us; 64 KiB at a time: 0.5 us)."""

_NO_ROOM: Final = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
"""Errors of a preallocation write that leave the append without preallocation."""


@functools.lru_cache(maxsize=4)
def _zeros(size: int) -> bytes:
    """``size`` zero bytes, kept: a preallocation writes the same extent again and again
    (allocating and faulting in 1 MiB per extent cost bulk commits measurably)."""
    return bytes(size)


def roll_jitter_ms(config: LogConfig) -> int:
    """A random jitter in ``[0, min(segment_jitter_ms, max_segment_ms))``, as Kafka draws per segment."""
    if config.segment_jitter_ms == 0:
        return 0
    return random.randrange(min(config.segment_jitter_ms, config.max_segment_ms))  # noqa: S311 - not crypto


class LogSegment:
    """A ``.log`` + ``.index`` + ``.timeindex`` triple holding offsets from ``base_offset`` on.

    Invariants: ``size_bytes`` is the length of the batches in the ``.log`` file
    and ends on a batch boundary; the file is ``allocated_bytes >= size_bytes``
    long, zeros past ``size_bytes`` (only an active segment's is longer); every batch's offsets lie in ``[base_offset, base_offset +
    INT32_MAX]`` and increase through the file; the indexes hold what
    :meth:`SegmentIndexes.add_batch` made of exactly these batches;
    ``largest_timestamp_ms`` is the largest ``max_timestamp`` of any batch
    (the file's mtime while there is none).

    Thread-safety: not thread-safe; the owning ``Log`` calls it under
    ``Log.lock``.  Readers use :meth:`open_reader`, then no lock (the shared
    descriptor, :class:`SharedLogFile`, is thread-safe).
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        config: LogConfig,
        file_suffix: str,
        log: SharedLogFile,
        size: int,
        indexes: SegmentIndexes,
        created_ms: int,
        jitter_ms: int,
        txn_index: TransactionIndex | None = None,
    ) -> None:
        """Assemble a segment from opened parts; use :meth:`create` or :meth:`open`."""
        self._dir = directory
        self._base_offset = base_offset
        self._config = config
        self._suffix = file_suffix
        self._file = log
        self._size = size
        self._allocated = size
        self._preallocation_failed = False
        self._indexes = indexes
        self.txn_index = (
            txn_index
            if txn_index is not None
            else TransactionIndex.open(self._path(files.TXN_INDEX_SUFFIX), base_offset)
        )
        """The aborted transaction index (``.txnindex``, :mod:`changelog.segment.txn_index`)."""
        self._created_ms = created_ms
        self.roll_jitter_ms = jitter_ms
        """Random amount subtracted from ``segment_ms`` for this segment."""
        self._rolling_based_timestamp: int | None = None
        self._prefix = f"[{directory.name} segment {base_offset}] "

    # ----------------------------------------------------------------- construction

    @classmethod
    def create(
        cls,
        directory: Path | str,
        base_offset: int,
        *,
        config: LogConfig,
        file_suffix: str = "",
        created_ms: int | None = None,
    ) -> LogSegment:
        """Create a new, empty segment (its ``.log`` must not hold data yet)."""
        segment = cls._open_files(Path(directory), base_offset, config, file_suffix, created_ms)
        if segment.size_bytes != 0:
            path = segment.log_path
            segment.close()
            raise SegmentOperationError(
                path, "cannot create a segment: the file already holds data"
            )
        return segment

    @classmethod
    def open(
        cls,
        directory: Path | str,
        base_offset: int,
        *,
        config: LogConfig,
        file_suffix: str = "",
        created_ms: int | None = None,
    ) -> LogSegment:
        """Open an existing segment (missing files are created empty); the indexes are trusted
        as they are: call :meth:`sanity_check` and, after a crash or a failed check, :meth:`recover`."""
        segment = cls._open_files(Path(directory), base_offset, config, file_suffix, created_ms)
        segment._load_max_timestamp()
        return segment

    @classmethod
    def _open_files(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        suffix: str,
        created_ms: int | None,
    ) -> LogSegment:
        log = SharedLogFile.open(
            directory / (files.segment_file_name(base_offset, files.LOG_SUFFIX) + suffix)
        )
        try:
            size = log.size()
            indexes = SegmentIndexes.open(directory, base_offset, suffix=suffix, config=config)
        except BaseException:
            log.close()
            raise
        return cls(
            directory,
            base_offset,
            config=config,
            file_suffix=suffix,
            log=log,
            size=size,
            indexes=indexes,
            created_ms=created_ms if created_ms is not None else int(time.time() * 1000),
            jitter_ms=roll_jitter_ms(config),
        )

    # ----------------------------------------------------------------- properties

    @property
    def base_offset(self) -> int:
        """The offset this segment starts at (its file name); ``<=`` its first record's offset."""
        return self._base_offset

    @property
    def size_bytes(self) -> int:
        """Bytes of batches in the ``.log`` file."""
        return self._size

    @property
    def allocated_bytes(self) -> int:
        """The ``.log`` file's length: ``size_bytes`` plus preallocated zeros."""
        return self._allocated

    @property
    def file_suffix(self) -> str:
        """``""``, or the protocol suffix (``.cleaned``/``.swap``) the files carry now."""
        return self._suffix

    @property
    def log_path(self) -> Path:
        """The ``.log`` file's current path."""
        return self._file.path

    @property
    def offset_index(self) -> OffsetIndex:
        """The ``.index`` (for tests and the cleaner's sanity checks)."""
        return self._indexes.offset_index

    @property
    def time_index(self) -> TimeIndex:
        """The ``.timeindex``."""
        return self._indexes.time_index

    @property
    def index_rebuild_reasons(self) -> list[str]:
        """Why an index was unreadable at open (recreated empty: :meth:`recover` rebuilds it)."""
        return self._indexes.rebuild_reasons

    @property
    def largest_timestamp_ms(self) -> int:
        """Largest record timestamp in the segment; the file's mtime if it has no records.

        Retention by time compares this with the clock (Kafka's ``largestTimestamp``).
        """
        if self._indexes.max_timestamp_ms >= 0:
            return self._indexes.max_timestamp_ms
        try:
            return int(self.log_path.stat().st_mtime * 1000)
        except OSError:
            return self._created_ms

    @property
    def max_timestamp_so_far_ms(self) -> int:
        """Largest record timestamp in the segment, -1 if it has none."""
        return self._indexes.max_timestamp_ms

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` (or :meth:`delete`) has run."""
        return self._file.closed

    def _path(self, kind: str) -> Path:
        return self._dir / (files.segment_file_name(self._base_offset, kind) + self._suffix)

    def __enter__(self) -> LogSegment:
        """Use as a context manager (tools and tests); closes on exit."""
        return self

    def __exit__(self, *_exc: object) -> None:
        """Close the segment."""
        self.close()

    def __repr__(self) -> str:
        """Base offset, size and suffix, for logs."""
        return f"LogSegment(base_offset={self._base_offset}, size={self._size}, suffix={self._suffix!r})"

    # ----------------------------------------------------------------- appending

    def append(
        self,
        batch_bytes: bytes | bytearray,
        *,
        largest_offset: int,
        largest_timestamp_ms: int,
        offset_of_max_timestamp: int | None = None,
        preallocate: bool = False,
    ) -> None:
        """Append one or more whole batches (encoded and validated) with one write; no fsync.

        With ``preallocate`` (the log's active segment under ``LogConfig.preallocate``)
        an append that does not fit in the allocated space writes
        ``preallocate_extent_bytes`` of zeros after itself (a second write; module
        docstring).
        ``largest_offset`` is the last offset in ``batch_bytes`` and must fit
        int32 relative to the base offset.  The indexes are filled batch by
        batch as in Kafka (:mod:`changelog.segment.indexes`), exactly as
        :meth:`recover` rebuilds them.  One batch (the append path) is indexed
        from the arguments without reading its header (``largest_timestamp_ms``
        is its max timestamp); several (the cleaner's buffered writes) are
        framed from their headers first, and a buffer that is not whole batches
        is refused before anything is written.  ``offset_of_max_timestamp`` is
        ignored: the time index takes the batch's last offset (Kafka's
        "shallow offset of max timestamp").
        """
        del offset_of_max_timestamp  # the shallow offset is the batch's last offset: see above
        fd = self._file.require()
        if not 0 <= largest_offset - self._base_offset <= INT32_MAX:
            raise SegmentOperationError(
                self.log_path,
                f"{self._prefix}offset {largest_offset} cannot be stored relative to base "
                f"offset {self._base_offset}",
            )
        size = len(batch_bytes)
        if size == 0:
            return
        extents: list[tuple[int, int, int]] | None = None
        if size < LOG_OVERHEAD or declared_size(batch_bytes) != size:
            extents = write_extents(
                batch_bytes, largest_offset, path=self.log_path, prefix=self._prefix
            )
        position = self._size
        end = position + size
        try:
            files.pwrite_fd(fd, batch_bytes, position, self.log_path, "segment.append")
            if (
                preallocate
                and end > self._allocated
                and size < LARGE_APPEND_BYTES
                and not self._preallocation_failed
            ):
                self._preallocate(fd, end)
            if extents is None:
                self._indexes.add_batch(position, size, largest_offset, largest_timestamp_ms)
            else:
                at = position
                for batch_size, last_offset, max_timestamp in extents:
                    self._indexes.add_batch(at, batch_size, last_offset, max_timestamp)
                    at += batch_size
        except LogStorageError:
            # A short write (disk full), or an index entry that could not be written:
            # the append failed, so cut the .log back to the last whole batch (best
            # effort: the owning Log is failed now, and recovery cuts a torn tail).
            try:
                files.truncate_fd(fd, position, self.log_path, "segment.append.undo")
                self._allocated = position
            except LogStorageError:
                logger.warning("%scould not undo the failed append at %s", self._prefix, position)
            raise
        self._size = end
        self._allocated = max(self._allocated, end)
        if position == 0:
            first_max_timestamp = largest_timestamp_ms if extents is None else extents[0][2]
            self._rolling_based_timestamp = first_max_timestamp

    def _preallocate(self, fd: int, end: int) -> None:
        """Zero-fill ``[end, end + preallocate_extent_bytes)`` (capped at ``segment_bytes``).

        No room for the zeros (``ENOSPC``, ``EFBIG``, ``EDQUOT``) is not a failed append:
        the zeros written are cut again, and this segment appends without preallocation
        from then on (its batches still fit, or their own write fails).  Any other error
        fails the append (the caller undoes it).
        """
        limit = min(end + self._config.preallocate_extent_bytes, self._config.segment_bytes)
        if limit <= end:
            return
        try:
            for at in range(end, limit, _ZERO_PIECE_BYTES):
                piece = min(_ZERO_PIECE_BYTES, limit - at)
                files.pwrite_fd(
                    fd,
                    _zeros(piece),
                    at,
                    self.log_path,
                    "segment.preallocate",
                    announce=at == end,  # one step, one fault point: its first piece
                )
        except LogStorageError as exc:
            if exc.errno not in _NO_ROOM:
                raise
            files.truncate_fd(fd, end, self.log_path, "segment.preallocate.undo")
            self._preallocation_failed = True
            logger.warning(
                "%sno room to preallocate %s bytes after position %s (%s): appending without",
                self._prefix,
                limit - end,
                end,
                exc,
            )
            return
        self._allocated = limit

    # ----------------------------------------------------------------- reading

    def open_reader(self, end_position: int | None = None) -> SegmentReader:
        """A :class:`SegmentReader` of ``[0, end_position or size_bytes)`` that pins the descriptor.

        Call under ``Log.lock`` (so the size is that of whole batches); the
        reader may then be used from any one thread without the lock.
        """
        end = self._size if end_position is None else min(end_position, self._size)
        return self._file.open_reader(self._base_offset, end)

    def batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """Yield ``(position, header, batch bytes)`` from ``start_position`` (CRC-validated).

        Reads the segment as it is when iteration starts, through its own descriptor.
        """
        with self.open_reader() as reader:
            yield from reader.batches(start_position)

    def headers(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` from ``start_position`` without reading records."""
        with self.open_reader() as reader:
            yield from reader.headers(start_position)

    def translate_offset(self, offset: int, start_position: int = 0) -> int | None:
        """Position of the first batch whose last offset is ``>= offset``, or ``None``.

        Looks up the offset index (largest entry ``<= offset``) and scans batch
        headers from there, as Kafka's ``LogSegment.translateOffset``.
        """
        with self.open_reader() as reader:
            entry_position = self._checked_position(
                reader, self._indexes.offset_index.lookup(offset)
            )
            return reader.position_of(offset, max(entry_position, start_position))

    def last_batch_header(self) -> BatchHeader | None:
        """The header of the segment's last batch (``None`` when it is empty)."""
        last: BatchHeader | None = None
        with self.open_reader() as reader:
            start = self._checked_position(reader, self._indexes.offset_index.last_entry())
            for _position, header in reader.headers(start):
                last = header
        return last

    def read_next_offset(self) -> int:
        """The offset after the last batch, or ``base_offset`` when the segment is empty."""
        with self.open_reader() as reader:
            start = self._checked_position(reader, self._indexes.offset_index.last_entry())
            return reader.next_offset(start, self._base_offset)

    def _checked_position(self, reader: SegmentReader, entry: OffsetPosition) -> int:
        """``entry.position`` if the batch there ends at ``entry.offset``, else 0 (scan it all).

        An index is trusted after a clean shutdown when it passes its sanity check,
        but a plausible index can still be wrong (an entry at another batch's
        start).  Every lookup reads the header at the entry's position anyway, so
        checking it costs nothing, and a wrong entry costs a longer scan, never
        a wrong read.  (Kafka indexes a batch by its last offset.)
        """
        if entry.position == 0:
            return 0
        try:
            header = next(iter(reader.headers(entry.position)), None)
        except ChangelogError:  # not even a batch boundary
            header = None
        if header is not None and header[1].last_offset == entry.offset:
            return entry.position
        logger.warning(
            "%soffset index entry (%s, %s) does not point at the batch ending at that offset;"
            " scanning the segment instead (delete the .index file to have it rebuilt at the next open)",
            self._prefix,
            entry.offset,
            entry.position,
        )
        return 0

    def find_offset_by_timestamp(self, timestamp_ms: int) -> int | None:
        """Offset of the first record whose timestamp is ``>= timestamp_ms``, or ``None``.

        Kafka's ``findOffsetByTimestamp``: the time index gives the last entry at
        or below the target, the offset index a position at or before that
        entry's offset, and a scan of batch max timestamps finds the batch.
        """
        if self._indexes.max_timestamp_ms < timestamp_ms:
            return None
        entry = self._indexes.time_index.lookup(timestamp_ms)
        with self.open_reader() as reader:
            position = self._indexes.offset_index.lookup(entry.offset).position
            return reader.offset_for_timestamp(timestamp_ms, position)

    def first_batch_timestamp_ms(self) -> int | None:
        """The first batch's max timestamp (what rolling by time measures from), or ``None``."""
        if self._rolling_based_timestamp is None and self._size > 0:
            for _, header in self.headers():
                self._rolling_based_timestamp = header.max_timestamp
                break
        return self._rolling_based_timestamp

    # ----------------------------------------------------------------- rolling

    def should_roll(
        self,
        *,
        messages_size: int,
        max_timestamp_ms: int,
        max_offset: int,
        now_ms: int,
    ) -> bool:
        """Whether to roll before appending ``messages_size`` bytes ending at ``max_offset``.

        True when the segment would exceed ``segment_bytes``; when it is not
        empty and its first batch is ``max_segment_ms - jitter`` older than the
        incoming batch (or, without timestamps, the segment is that old); when
        either index is full; or when ``max_offset`` cannot be stored relative
        to the base offset.  An empty segment only rolls for offset overflow.
        """
        if not 0 <= max_offset - self._base_offset <= INT32_MAX:
            return True
        if self._size == 0:
            return False
        if self._size > self._config.segment_bytes - messages_size:
            return True
        if self._indexes.is_full():
            return True
        first = self.first_batch_timestamp_ms()
        waited = (
            max_timestamp_ms - first
            if first is not None and first >= 0
            else now_ms - self._created_ms
        )
        return waited > self._config.max_segment_ms - self.roll_jitter_ms

    def roll_headroom(self) -> tuple[int, int, int, int, int] | None:
        """Bounds within which :meth:`should_roll` stays ``False``, for the log to check cheaply.

        ``(size now, largest size after an append, largest last offset, largest max
        timestamp, appends)``: while the segment is at least its size now (no truncation
        since), an append that ends within the three bounds, among the next ``appends``
        (each adds at most one entry to either index), needs no roll.  ``None`` when the
        answer depends on the clock (an empty segment, or one without timestamps).
        """
        first = self.first_batch_timestamp_ms()
        if self._size == 0 or first is None or first < 0:
            return None
        config = self._config
        return (
            self._size,
            config.segment_bytes,
            self._base_offset + INT32_MAX,
            first + config.max_segment_ms - self.roll_jitter_ms,
            self._indexes.appends_before_full(),
        )

    def on_become_inactive(self) -> None:
        """The log rolls past this segment or closes: final time index entry, both indexes
        trimmed, the ``.log``'s preallocated zeros cut (the caller's :meth:`flush` makes
        the cut durable before a new segment or the clean-shutdown marker can follow)."""
        self._indexes.append_final_time_entry()
        self._indexes.trim_to_valid_size()
        self.trim()

    def trim(self) -> None:
        """Cut the ``.log``'s preallocated zeros (no fsync; Kafka's ``FileRecords.trim``)."""
        if self._allocated > self._size:
            files.truncate_fd(self._file.require(), self._size, self.log_path, "segment.trim")
            self._allocated = self._size

    # ----------------------------------------------------------------- recovery and truncation

    def recover(self, *, expected_valid_bytes: int | None = None, zero_tail: bool = False) -> int:
        """Re-validate the ``.log`` batch by batch, rebuild both indexes, cut an invalid tail.

        Returns the bytes truncated: everything from the first batch that is torn,
        fails its CRC, or has offsets outside this segment or going backwards.
        Data Kafka can read but we cannot (old magic, compression) raises
        :class:`~changelog.errors.UnsupportedFormatError` and truncates nothing.
        With ``expected_valid_bytes`` (the loader's plan) a valid prefix of any
        other length raises :class:`~changelog.errors.ChangelogError` before
        anything is cut.  ``zero_tail`` (the plan's finding: only zeros past
        those bytes, a preallocated segment's unused space) logs the cut at INFO;
        any other cut is a warning, with the reason the re-validation stopped.
        """
        fd = self._file.require()
        file_size = self._file.size()
        self._rolling_based_timestamp = None  # read again from the first batch when needed
        stops: list[str] = []
        with self.open_reader() as reader:
            reader.end_position = file_size
            valid = self._indexes.rebuild(
                reader.batches(),
                base_offset=self._base_offset,
                prefix=self._prefix,
                stopped=stops.append,
            )
        if expected_valid_bytes is not None and valid != expected_valid_bytes:
            raise SegmentChangedError(self.log_path, expected=expected_valid_bytes, actual=valid)
        truncated = file_size - valid
        if truncated > 0:
            where = f"position {valid} of {self.log_path}"
            if zero_tail:
                # The unused end of a preallocated active segment (or zeros a power cut
                # left where an unacknowledged write was going): the log's normal end.
                logger.info(
                    "%scutting %s zero bytes after the last batch, at %s (unused preallocated "
                    "space)",
                    self._prefix,
                    truncated,
                    where,
                )
            else:
                for why in stops:
                    logger.warning("%s%s", self._prefix, why)
                logger.warning(
                    "%struncating %s invalid bytes at %s", self._prefix, truncated, where
                )
            files.truncate_fd(fd, valid, self.log_path, "segment.recover.truncate")
        self._size = valid
        self._allocated = valid
        return truncated

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> int:
        """Remove every batch whose last offset is ``>= offset``; returns bytes removed.

        A batch is never split: if ``offset`` falls inside one, the whole
        batch goes, so the segment ends at that batch's base offset.
        """
        fd = self._file.require()
        position = self.translate_offset(offset)
        self._indexes.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = 0
        if position is not None:
            removed = self._size - position
            files.truncate_fd(fd, position, self.log_path, "segment.truncate")
            self._size = position
            self._allocated = position
        if self._size == 0:
            self._created_ms = now_ms if now_ms is not None else int(time.time() * 1000)
            self._rolling_based_timestamp = None
            self._indexes.forget_max_timestamp()
        elif removed:
            self._load_max_timestamp(scan=True)
        return removed

    def _load_max_timestamp(self, *, scan: bool = False) -> None:
        """Largest timestamp from the time index's last entry, or by scanning headers."""
        self._indexes.forget_max_timestamp()
        if self._size > 0 and (scan or not self._indexes.load_max_timestamp()):
            with self.open_reader() as reader:
                self._indexes.scan_max_timestamp(reader.headers(), self._prefix)

    def sanity_check(self) -> None:
        """Check both indexes (:meth:`SegmentIndexes.sanity_check`); ``CorruptIndexError`` if bad."""
        self._indexes.sanity_check(self._size)

    # ----------------------------------------------------------------- durability and lifecycle

    def flush(self) -> None:
        """fsync the ``.log``, both indexes and the ``.txnindex`` (if it exists)."""
        files.fsync_fd(self._file.require(), self.log_path, "segment.flush")
        self._indexes.flush()
        self.txn_index.flush()

    def flush_log(self) -> None:
        """fdatasync the ``.log`` only (the append path: indexes are rebuilt after a crash;
        :func:`changelog.fs.files.fdatasync_fd` flushes the size too when it changed)."""
        files.fdatasync_fd(self._file.require(), self.log_path, "segment.flush")

    def pin_log(self) -> int:
        """Pin the ``.log`` descriptor for :meth:`flush_pinned` (call under ``Log.lock``)."""
        return self._file.pin()

    def flush_pinned(self, fd: int) -> None:
        """fdatasync the ``.log`` through ``fd`` from :meth:`pin_log` (as :meth:`flush_log`),
        then unpin it.

        The one method of a segment called without ``Log.lock`` (the group
        commit's fsync, :mod:`changelog.log.group_commit`): the pin keeps the
        descriptor open if the segment is closed, rolled or replaced meanwhile.
        """
        try:
            files.fdatasync_fd(fd, self.log_path, "segment.flush")
        finally:
            self._file.unpin()

    def release_descriptors(self) -> None:
        """The segment is not active: close its descriptors (``.log``, indexes, ``.txnindex``).

        It stays usable: a read opens the ``.log`` for as long as it reads (readers pin
        the file, not a descriptor), a write or fsync opens what it needs again.  So a
        log of thousands of segments holds descriptors only for its active segment and
        the segments being read (as Kafka opens its indexes lazily).  Readers reading
        now keep their descriptor until they are done.
        """
        try:
            self._indexes.release()
            self.txn_index.close()  # it reopens its file when written
        finally:
            self._file.release()

    def close(self) -> None:
        """Close the files; open readers keep the ``.log`` descriptor until they close. Idempotent."""
        if self._file.closed:
            return
        try:
            self._indexes.close()
            self.txn_index.close()
        finally:
            self._file.close()

    def delete(self) -> None:
        """Close the segment and delete its files (missing files are fine)."""
        self.close()
        for kind in files.SEGMENT_SUFFIXES:
            files.delete_file(self._path(kind), "segment.delete")

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the files (``.log``, indexes, ``.txnindex`` if there is one) from
        ``<name><old_suffix>`` to ``<name><new_suffix>``.

        Each rename is a :mod:`changelog.fs.files` fault point and is followed by
        an fsync of the directory.  The open descriptors stay valid.
        """
        if self._suffix != old_suffix:
            raise SegmentOperationError(
                self.log_path,
                f"{self._prefix}suffix is {self._suffix!r}, cannot rename from {old_suffix!r}",
            )
        self._file.hold_for_readers()  # a pinned reader keeps the file it started on
        for kind in files.SEGMENT_SUFFIXES:
            base = self._dir / files.segment_file_name(self._base_offset, kind)
            src = base.with_name(base.name + old_suffix)
            dst = base.with_name(base.name + new_suffix)
            if src.exists():
                files.rename_file(src, dst, "segment.rename")
        self._suffix = new_suffix
        self._file.path = self._path(files.LOG_SUFFIX)
        self._indexes.set_paths(self._path(files.INDEX_SUFFIX), self._path(files.TIME_INDEX_SUFFIX))
        self.txn_index.set_path(self._path(files.TXN_INDEX_SUFFIX))
