"""One log segment: a ``.log`` file of record batches with its ``.index`` and ``.timeindex``.

Files (names from :func:`changelog.files.segment_file_name`, plus an optional
protocol suffix ``.cleaned``/``.swap`` while the segment-replace protocol runs):

    file                        | content                                 | after a crash
    ----------------------------+-----------------------------------------+------------------------
    <base offset>.log           | record batches v2, back to back         | trusted batch by batch
                                |                                         | (CRC) past the recovery
                                |                                         | point; a torn tail is cut
    <base offset>.index         | sparse (relative offset, position)      | rebuilt from the .log
    <base offset>.timeindex     | sparse (max timestamp so far, offset)   | rebuilt from the .log

Every ``index_interval_bytes`` of appended batches the segment adds one offset
index entry (the batch's last offset and its start position, as Kafka's
``LogSegment.append`` does) and one time index entry (the largest timestamp
seen so far).  Lookups of an offset go through the offset index and then scan
batch headers from the entry found.

Reading while the segment changes: :meth:`LogSegment.open_reader` pins the
segment's descriptor and remembers the size at that moment.  A reader
therefore sees a fixed prefix of the file and keeps reading it even if the
segment is renamed, replaced or deleted (on Linux an unlinked file stays
readable through an open descriptor) or closed by its owner: closing a
pinned segment defers closing the descriptor until its last reader is done.
Readers use ``pread`` only, so they share the descriptor, not a file position.

Thread-safety: a :class:`LogSegment` is not thread-safe.  The owning ``Log``
serialises every mutation and every :meth:`open_reader` call under
``Log.lock``; a :class:`SegmentReader`, once made, is owned by one reader
and needs no lock.
"""

from __future__ import annotations

import logging
import os
import random
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TypeVar

from changelog import files
from changelog.config import LogConfig
from changelog.errors import (
    ChangelogError,
    CorruptIndexError,
    CorruptRecordError,
    LogClosedError,
    LogStorageError,
    UnsupportedFormatError,
)
from changelog.offset_index import OffsetIndex
from changelog.record_batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    decode_header,
    decode_records,
    iter_batches,
)
from changelog.time_index import TimeIndex

__all__ = ["INT32_MAX", "LogSegment", "SegmentReader", "roll_jitter_ms"]

INT32_MAX: Final = 2**31 - 1
"""Largest relative offset (offset - base offset) an index entry can hold."""

NO_TIMESTAMP: Final = -1

_READ_CHUNK_BYTES: Final = 1 << 20
_PREFIX: Final = struct.Struct(">qi")  # base_offset, batch_length: what frames a batch

logger = logging.getLogger(__name__)


def roll_jitter_ms(config: LogConfig) -> int:
    """A random jitter in ``[0, min(segment_jitter_ms, segment_ms))``, as Kafka draws per segment."""
    if config.segment_jitter_ms == 0:
        return 0
    return random.randrange(min(config.segment_jitter_ms, config.segment_ms))  # noqa: S311 - not crypto


# --------------------------------------------------------------------------- reading


class SegmentReader:
    """A private view of a prefix of one segment's ``.log`` file.

    Made by :meth:`LogSegment.open_reader` (under ``Log.lock``); pins the
    segment's descriptor, so it is unaffected by the segment being renamed,
    deleted or closed afterwards.  Reads ``[0, end_position)`` only.

    Invariants: while open, the segment keeps the descriptor open for it;
    ``end_position`` falls on a batch boundary (the size under ``Log.lock``).

    Thread-safety: not thread-safe; one reader per thread.  Close it (or use
    it as a context manager); the generators close nothing.
    """

    def __init__(
        self,
        fd: int,
        path: Path,
        base_offset: int,
        end_position: int,
        release: Callable[[], None],
    ) -> None:
        """Read ``fd`` (kept open for us until ``release`` is called)."""
        self._fd: int | None = fd
        self._release: Callable[[], None] | None = release
        self.path = path
        self.base_offset = base_offset
        self.end_position = end_position

    def close(self) -> None:
        """Give the descriptor back (the segment closes it once no reader needs it); idempotent."""
        release, self._release, self._fd = self._release, None, None
        if release is not None:
            release()

    def __enter__(self) -> SegmentReader:
        """Use as a context manager."""
        return self

    def __exit__(self, *_exc: object) -> None:
        """Close."""
        self.close()

    def __del__(self) -> None:
        """Do not keep the descriptor of an abandoned reader pinned."""
        self.close()

    def _require_fd(self) -> int:
        if self._fd is None:
            raise LogClosedError(f"reader of {self.path} is closed")
        return self._fd

    def _pread(self, size: int, position: int) -> bytes:
        try:
            return os.pread(self._require_fd(), size, position)
        except OSError as exc:
            raise LogStorageError(self.path, "read", exc) from exc

    def headers(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` of each batch from ``start_position``, header bytes only.

        No CRC check (the records are not read): used to find positions and
        offsets.  A batch whose framing is impossible (short tail, length
        below the header size, bad magic) raises :class:`CorruptRecordError`.
        """
        position = start_position
        end = self.end_position
        while position < end:
            head = self._pread(min(BATCH_HEADER_SIZE, end - position), position)
            try:
                header = self._frame(head, position, end)
            except UnsupportedFormatError:
                # A flipped attribute bit looks like compression; only the CRC can tell.
                self._check_crc_at(position, end)
                raise
            yield position, header
            position += header.size_in_bytes

    def batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """Yield ``(position, header, batch bytes)`` from ``start_position``, CRC-validated.

        Reads in chunks of about 1 MiB.  A torn or corrupt batch raises
        :class:`CorruptRecordError` naming the file and the batch's position
        (the CRC is checked before anything else in the batch is believed).
        """
        position = start_position
        end = self.end_position
        buf = b""
        buf_start = position
        while position < end:
            offset = position - buf_start
            if offset + BATCH_HEADER_SIZE > len(buf):
                buf = self._pread(min(_READ_CHUNK_BYTES, end - position), position)
                buf_start, offset = position, 0
            size = _framed_size(buf, offset, position, end)
            if size is None:  # impossible framing: let the codec name the problem
                self._frame(buf[offset : offset + BATCH_HEADER_SIZE], position, end)
                raise CorruptRecordError(self.path, position, "impossible batch framing")
            if offset + size > len(buf):
                buf = self._pread(max(_READ_CHUNK_BYTES, size), position)
                buf_start, offset = position, 0
                if len(buf) < size:
                    raise CorruptRecordError(
                        self.path, position, "batch is cut short", expected=size, actual=len(buf)
                    )
            data = buf[offset : offset + size]
            header = _checked(data, self.path, position)
            self._check_base(header, position)
            yield position, header, data
            position += size

    def _check_crc_at(self, position: int, end: int) -> None:
        """Raise :class:`CorruptRecordError` if the batch at ``position`` fails its CRC."""
        head = self._pread(BATCH_HEADER_SIZE, position)
        size = _framed_size(head, 0, position, end)
        if size is not None:
            _checked(self._pread(size, position), self.path, position)

    def _frame(self, head: bytes, position: int, end: int) -> BatchHeader:
        """Decode the header at ``position`` and check the batch fits in ``[position, end)``."""
        try:
            header = decode_header(head, 0, path=self.path, end=end - position)
        except CorruptRecordError as exc:
            raise _at(exc, position) from exc
        except UnsupportedFormatError as exc:
            raise UnsupportedFormatError(self.path, position, exc.reason) from exc
        self._check_base(header, position)
        return header

    def _check_base(self, header: BatchHeader, position: int) -> None:
        if header.base_offset < self.base_offset:
            raise CorruptRecordError(
                self.path,
                position,
                "batch offset below the segment's base offset",
                expected=self.base_offset,
                actual=header.base_offset,
            )


def _framed_size(buf: bytes, offset: int, position: int, end: int) -> int | None:
    """Size of the batch at ``buf[offset]`` (file ``position``) if its framing is possible."""
    if len(buf) - offset < BATCH_HEADER_SIZE:
        return None
    _, batch_length = _PREFIX.unpack_from(buf, offset)
    size: int = batch_length + LOG_OVERHEAD
    if size < BATCH_HEADER_SIZE or position + size > end:
        return None
    return size


def _at(exc: CorruptRecordError, position: int) -> CorruptRecordError:
    """``exc`` (raised on a buffer starting at the batch) re-aimed at the batch's file position."""
    return CorruptRecordError(
        exc.path,
        position + (exc.position or 0),
        exc.reason,
        expected=exc.expected,
        actual=exc.actual,
    )


def _checked(data: bytes, path: Path, position: int) -> BatchHeader:
    """Header of ``data`` (exactly one batch), its CRC checked first; errors at ``position``."""
    try:
        for _, header in iter_batches(data, path=path, validate=True):
            return header
    except CorruptRecordError as exc:
        raise _at(exc, position) from exc
    except UnsupportedFormatError as exc:
        raise UnsupportedFormatError(path, position, exc.reason) from exc
    raise CorruptRecordError(path, position, "empty batch buffer")


# --------------------------------------------------------------------------- the segment


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


class LogSegment:
    """A ``.log`` + ``.index`` + ``.timeindex`` triple holding offsets from ``base_offset`` on.

    Invariants: ``size_bytes`` is the length of the ``.log`` file and ends on a
    batch boundary; every batch's offsets lie in ``[base_offset, base_offset +
    INT32_MAX]`` and increase through the file; each offset index entry points
    at the start of a batch whose last offset it records; time index entries
    never decrease; ``largest_timestamp_ms`` is the largest ``max_timestamp``
    of any batch (-1 while there is none).

    Thread-safety: not thread-safe; the owning ``Log`` calls it under
    ``Log.lock``.  Readers use :meth:`open_reader` (see the module docstring).
    ``_pin_lock`` guards ``_pins``, ``_closed`` and ``_fd``, because readers
    unpin (and may close the descriptor) from their own threads without ``Log.lock``.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        config: LogConfig,
        file_suffix: str,
        fd: int,
        size: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        created_ms: int,
        jitter_ms: int,
    ) -> None:
        """Assemble a segment from opened parts; use :meth:`create` or :meth:`open`."""
        self._dir = directory
        self._base_offset = base_offset
        self._config = config
        self._suffix = file_suffix
        self._log_path = self._path(files.LOG_SUFFIX)
        self._fd: int | None = fd
        self._closed = False
        self._pins = 0
        self._pin_lock = threading.Lock()
        self._size = size
        self._offset_index = offset_index
        self._time_index = time_index
        self._created_ms = created_ms
        self.roll_jitter_ms = jitter_ms
        """Random amount subtracted from ``segment_ms`` for this segment."""
        self._bytes_since_last_index_entry = 0
        self._max_timestamp_ms = NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        self._rolling_based_timestamp: int | None = None
        self._prefix = f"[{directory.name} segment {base_offset}] "
        self.index_rebuild_reasons: list[str] = []
        """Why an index file was unreadable at open (it was recreated empty: call
        :meth:`recover` to rebuild it); empty when both loaded."""

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
        directory = Path(directory)
        segment = cls._open_files(directory, base_offset, config, file_suffix, created_ms)
        if segment.size_bytes != 0:
            path = segment.log_path
            segment.close()
            raise ChangelogError(f"cannot create segment {path}: the file already holds data")
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
        """Open an existing segment (files that are missing are created empty).

        The indexes are trusted as they are: call :meth:`sanity_check` and,
        after a crash or a failed check, :meth:`recover`.
        """
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
        log_path = directory / (files.segment_file_name(base_offset, files.LOG_SUFFIX) + suffix)
        try:
            fd = os.open(log_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LogStorageError(log_path, "open", exc) from exc
        rebuild: list[str] = []
        try:
            size = os.fstat(fd).st_size
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
        except OSError as exc:
            os.close(fd)
            raise LogStorageError(log_path, "open", exc) from exc
        except BaseException:
            os.close(fd)
            raise
        segment = cls(
            directory,
            base_offset,
            config=config,
            file_suffix=suffix,
            fd=fd,
            size=size,
            offset_index=offset_index,
            time_index=time_index,
            created_ms=created_ms if created_ms is not None else int(time.time() * 1000),
            jitter_ms=roll_jitter_ms(config),
        )
        segment.index_rebuild_reasons = rebuild
        return segment

    # ----------------------------------------------------------------- properties

    @property
    def base_offset(self) -> int:
        """The offset this segment starts at (its file name); ``<=`` its first record's offset."""
        return self._base_offset

    @property
    def size_bytes(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    @property
    def file_suffix(self) -> str:
        """``""``, or the protocol suffix (``.cleaned``/``.swap``) the files carry now."""
        return self._suffix

    @property
    def log_path(self) -> Path:
        """The ``.log`` file's current path."""
        return self._log_path

    @property
    def offset_index(self) -> OffsetIndex:
        """The ``.index`` (for tests and the cleaner's sanity checks)."""
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        """The ``.timeindex``."""
        return self._time_index

    @property
    def largest_timestamp_ms(self) -> int:
        """Largest record timestamp in the segment; the file's mtime if it has no records.

        Retention by time compares this with the clock (Kafka's ``largestTimestamp``).
        """
        if self._max_timestamp_ms >= 0:
            return self._max_timestamp_ms
        try:
            return int(self.log_path.stat().st_mtime * 1000)
        except OSError:
            return self._created_ms

    @property
    def max_timestamp_so_far_ms(self) -> int:
        """Largest record timestamp in the segment, -1 if it has none."""
        return self._max_timestamp_ms

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` (or :meth:`delete`) has run."""
        return self._closed

    def _path(self, kind: str) -> Path:
        return self._dir / (files.segment_file_name(self._base_offset, kind) + self._suffix)

    def _require_fd(self) -> int:
        if self._closed or self._fd is None:
            raise LogClosedError(f"segment {self.log_path} is closed")
        return self._fd

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
        offset_of_max_timestamp: int,
    ) -> None:
        """Append one or more whole batches (already encoded and validated) with one write.

        ``largest_offset`` is the last offset in ``batch_bytes``; it must be
        representable relative to the base offset.  Index entries are added
        every ``index_interval_bytes``.  Nothing is fsynced here (see :meth:`flush`).
        """
        fd = self._require_fd()
        if not 0 <= largest_offset - self._base_offset <= INT32_MAX:
            raise ChangelogError(
                f"{self._prefix}offset {largest_offset} cannot be stored relative to base "
                f"offset {self._base_offset}"
            )
        position = self._size
        try:
            files.write_fd(fd, memoryview(batch_bytes), self.log_path, "segment.append")
        except LogStorageError:
            # A short write (disk full) must not leave half a batch for the next
            # append to land after: cut the file back to the last whole batch.
            files.truncate_fd(fd, position, self.log_path, "segment.append.undo")
            raise
        self._size = position + len(batch_bytes)
        if largest_timestamp_ms > self._max_timestamp_ms:
            self._max_timestamp_ms = largest_timestamp_ms
            self._offset_of_max_timestamp = offset_of_max_timestamp
        if self._rolling_based_timestamp is None and position == 0:
            self._rolling_based_timestamp = largest_timestamp_ms
        if self._bytes_since_last_index_entry > self._config.index_interval_bytes:
            self._offset_index.append(largest_offset, position)
            self._time_index.maybe_append(self._max_timestamp_ms, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += len(batch_bytes)

    # ----------------------------------------------------------------- reading

    def open_reader(self, end_position: int | None = None) -> SegmentReader:
        """A :class:`SegmentReader` of ``[0, end_position or size_bytes)`` that pins the descriptor.

        Call under ``Log.lock`` (so the size is that of whole batches); the
        reader may then be used from any one thread without the lock.
        """
        end = self._size if end_position is None else min(end_position, self._size)
        with self._pin_lock:
            fd = self._require_fd()
            self._pins += 1
        return SegmentReader(fd, self.log_path, self._base_offset, end, self._unpin)

    def _unpin(self) -> None:
        with self._pin_lock:
            self._pins -= 1
            fd = None
            if self._pins == 0 and self._closed:
                fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """Yield ``(position, header, batch bytes)`` from ``start_position`` (CRC-validated).

        Reads the segment as it is when iteration starts, through its own descriptor.
        """
        reader = self.open_reader()
        try:
            yield from reader.batches(start_position)
        finally:
            reader.close()

    def headers(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` from ``start_position`` without reading records."""
        reader = self.open_reader()
        try:
            yield from reader.headers(start_position)
        finally:
            reader.close()

    def translate_offset(self, offset: int, start_position: int = 0) -> int | None:
        """Position of the first batch whose last offset is ``>= offset``, or ``None``.

        Looks up the offset index (largest entry ``<= offset``) and scans batch
        headers from there, as Kafka's ``LogSegment.translateOffset``.
        """
        entry_position = self._offset_index.lookup(offset).position
        for position, header in self.headers(max(entry_position, start_position)):
            if header.last_offset >= offset:
                return position
        return None

    def read_next_offset(self) -> int:
        """The offset after the last batch, or ``base_offset`` when the segment is empty."""
        start = self._offset_index.last_entry().position
        next_offset = self._base_offset
        for _, header in self.headers(start):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp_ms: int) -> int | None:
        """Offset of the first record whose timestamp is ``>= timestamp_ms``, or ``None``.

        Kafka's ``findOffsetByTimestamp``: the time index gives the last entry at
        or below the target, the offset index a position at or before that
        entry's offset, and a scan of batches (max timestamps) finds the batch;
        only that batch's records are decoded.
        """
        if self._max_timestamp_ms < timestamp_ms:
            return None
        entry = self._time_index.lookup(timestamp_ms)
        position = self._offset_index.lookup(entry.offset).position
        for batch_position, header, data in self.batches(position):
            if header.max_timestamp >= timestamp_ms:
                for record in decode_records(data, path=self.log_path, position=batch_position):
                    if record.timestamp_ms >= timestamp_ms:
                        return record.offset
        return None

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
        empty and its first batch is ``segment_ms - jitter`` older than the
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
        if self._offset_index.is_full() or self._time_index.is_full():
            return True
        first = self.first_batch_timestamp_ms()
        waited = (
            max_timestamp_ms - first
            if first is not None and first >= 0
            else now_ms - self._created_ms
        )
        return waited > self._config.segment_ms - self.roll_jitter_ms

    def on_become_inactive(self) -> None:
        """Called when the log rolls past this segment: record the largest timestamp in the
        time index (so a reopened segment knows it) and trim both indexes to their entries."""
        self._append_final_time_entry()
        self._offset_index.trim_to_valid_size()
        self._time_index.trim_to_valid_size()

    def _append_final_time_entry(self) -> None:
        """Make the time index's last entry the largest timestamp (Kafka does this on roll/close)."""
        if self._max_timestamp_ms >= 0:
            self._time_index.maybe_append(
                self._max_timestamp_ms, self._offset_of_max_timestamp, skip_full_check=True
            )

    # ----------------------------------------------------------------- recovery and truncation

    def recover(self) -> int:
        """Re-validate the ``.log`` batch by batch, rebuild both indexes, cut an invalid tail.

        Returns the number of bytes truncated (0 when every batch was valid).
        Stops at the first batch that is torn, fails its CRC, has offsets
        outside this segment or going backwards; everything from there on is
        truncated.  Data Kafka can read but we cannot (old magic, compression)
        raises :class:`~changelog.errors.UnsupportedFormatError` and truncates nothing.
        """
        fd = self._require_fd()
        try:
            file_size = os.fstat(fd).st_size
        except OSError as exc:
            raise LogStorageError(self.log_path, "stat", exc) from exc
        self._offset_index.reset()
        self._time_index.reset()
        self._max_timestamp_ms = NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        self._rolling_based_timestamp = None
        valid = 0
        last_index_entry = 0
        expected_next = self._base_offset
        reader = self.open_reader()
        reader.end_position = file_size
        try:
            for position, header, _ in reader.batches():
                if (
                    header.base_offset < expected_next
                    or header.last_offset - self._base_offset > INT32_MAX
                ):
                    logger.warning(
                        "%sbatch at position %s has offsets [%s, %s] out of order or range; "
                        "truncating there",
                        self._prefix,
                        position,
                        header.base_offset,
                        header.last_offset,
                    )
                    break
                expected_next = header.next_offset
                if header.max_timestamp > self._max_timestamp_ms:
                    self._max_timestamp_ms = header.max_timestamp
                    self._offset_of_max_timestamp = header.last_offset
                if self._rolling_based_timestamp is None:
                    self._rolling_based_timestamp = header.max_timestamp
                if valid - last_index_entry > self._config.index_interval_bytes:
                    self._offset_index.append(header.last_offset, valid)
                    self._time_index.maybe_append(
                        self._max_timestamp_ms, self._offset_of_max_timestamp
                    )
                    last_index_entry = valid
                valid = position + header.size_in_bytes
        except CorruptRecordError as exc:
            logger.warning("%sinvalid batch found during recovery: %s", self._prefix, exc)
        finally:
            reader.close()
        truncated = file_size - valid
        if truncated > 0:
            logger.warning(
                "%struncating %s invalid bytes at position %s of %s",
                self._prefix,
                truncated,
                valid,
                self.log_path,
            )
            files.truncate_fd(fd, valid, self.log_path, "segment.recover.truncate")
        self._size = valid
        self._bytes_since_last_index_entry = valid - last_index_entry
        self._append_final_time_entry()
        self._offset_index.trim_to_valid_size()
        self._time_index.trim_to_valid_size()
        return truncated

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> int:
        """Remove every batch whose last offset is ``>= offset``; returns bytes removed.

        A batch is never split: if ``offset`` falls inside one, the whole
        batch goes, so the segment ends at that batch's base offset.
        """
        fd = self._require_fd()
        position = self.translate_offset(offset)
        self._offset_index.truncate_to(offset)
        self._time_index.truncate_to(offset)
        self._offset_index.resize(self._config.segment_index_bytes)
        self._time_index.resize(self._config.segment_index_bytes)
        removed = 0
        if position is not None:
            removed = self._size - position
            files.truncate_fd(fd, position, self.log_path, "segment.truncate")
            self._size = position
        self._bytes_since_last_index_entry = 0
        if self._size == 0:
            self._created_ms = now_ms if now_ms is not None else int(time.time() * 1000)
            self._rolling_based_timestamp = None
            self._max_timestamp_ms = NO_TIMESTAMP
            self._offset_of_max_timestamp = -1
        elif removed:
            self._load_max_timestamp(scan=True)
        return removed

    def _load_max_timestamp(self, *, scan: bool = False) -> None:
        """Largest timestamp from the time index's last entry, or by scanning headers."""
        self._max_timestamp_ms = NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        if self._size == 0:
            return
        if not scan:
            entry = self._time_index.last_entry()
            if entry.timestamp_ms >= 0:
                self._max_timestamp_ms = entry.timestamp_ms
                self._offset_of_max_timestamp = entry.offset
                return
        try:
            for _, header in self.headers():  # the whole file: a rare path
                if header.max_timestamp > self._max_timestamp_ms:
                    self._max_timestamp_ms = header.max_timestamp
                    self._offset_of_max_timestamp = header.last_offset
        except (CorruptRecordError, UnsupportedFormatError) as exc:
            # A torn tail after a crash: recover() cuts it and sets the timestamp.
            # Anywhere else the read that reaches it reports the corruption.
            logger.warning("%scannot scan for the largest timestamp: %s", self._prefix, exc)

    def sanity_check(self) -> None:
        """Check both indexes; raise ``CorruptIndexError`` naming the file and the values found.

        Besides each index's own invariants, the offset index's last entry must
        point inside the ``.log`` file.
        """
        self._offset_index.sanity_check()
        self._time_index.sanity_check()
        last = self._offset_index.last_entry()
        if last.position > self._size or (self._size == 0 and len(self._offset_index) > 0):
            raise CorruptIndexError(
                self._offset_index.path,
                None,
                "index entry points past the end of the log",
                expected=self._size,
                actual=last.position,
            )

    # ----------------------------------------------------------------- durability and lifecycle

    def flush(self) -> None:
        """fsync the ``.log`` and both indexes."""
        files.fsync_fd(self._require_fd(), self.log_path, "segment.flush")
        self._offset_index.flush()
        self._time_index.flush()

    def flush_log(self) -> None:
        """fsync the ``.log`` only (the append path: indexes are rebuilt after a crash)."""
        files.fsync_fd(self._require_fd(), self.log_path, "segment.flush")

    def close(self) -> None:
        """Close the files; open readers keep the ``.log`` descriptor until they close. Idempotent."""
        with self._pin_lock:
            if self._closed:
                return
            self._closed = True
            fd = None
            if self._pins == 0:
                fd, self._fd = self._fd, None
        try:
            self._offset_index.close()
            self._time_index.close()
        finally:
            if fd is not None:
                os.close(fd)

    def delete(self) -> None:
        """Close the segment and delete its three files (missing files are fine)."""
        self.close()
        for kind in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX):
            files.delete_file(self._path(kind), "segment.delete")

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the three files from ``<name><old_suffix>`` to ``<name><new_suffix>``.

        Each rename is a :mod:`changelog.files` fault point and is followed by
        an fsync of the directory.  The open descriptors stay valid.
        """
        if self._suffix != old_suffix:
            raise ChangelogError(
                f"{self._prefix}suffix is {self._suffix!r}, cannot rename from {old_suffix!r}"
            )
        for kind in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX):
            base = self._dir / files.segment_file_name(self._base_offset, kind)
            src = base.with_name(base.name + old_suffix)
            dst = base.with_name(base.name + new_suffix)
            if src.exists():
                files.rename_file(src, dst, "segment.rename")
        self._suffix = new_suffix
        self._log_path = self._path(files.LOG_SUFFIX)
        self._offset_index.path = self._path(files.INDEX_SUFFIX)
        self._time_index.path = self._path(files.TIME_INDEX_SUFFIX)
