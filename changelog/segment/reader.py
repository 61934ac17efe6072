"""Reading a segment's ``.log`` without the log's lock: pinned descriptors and readers.

Reading while the segment changes: :meth:`LogSegment.open_reader` pins the
segment's descriptor (:class:`SharedLogFile`) and remembers the size at that
moment.  A :class:`SegmentReader` therefore sees a fixed prefix of the file and
keeps reading it even if the segment is renamed, replaced or deleted (on Linux
an unlinked file stays readable through an open descriptor) or closed by its
owner: closing a pinned file defers closing the descriptor until its last
reader is done.  Readers use ``pread`` only, so they share the descriptor, not
a file position.

What a reader checks, batch by batch (the codec's order, see
:mod:`changelog.record.header`): the length fits the prefix it reads, then the
CRC-32C, then the fields under the CRC and the compression bits; then that
the batch's base offset is not below the segment's.  Header-only scans
(:meth:`SegmentReader.headers`) cannot check the CRC: they re-read the whole
batch before reporting it as compressed, so a flipped bit stays corruption.
Every error names the ``.log`` file and the batch's position in it.

Thread-safety: :class:`SharedLogFile` is thread-safe; a :class:`SegmentReader`
is owned by one thread and needs no lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from changelog.errors import (
    CorruptRecordError,
    LogClosedError,
    LogStorageError,
    UnsupportedFormatError,
)
from changelog.limits import INT32_MAX
from changelog.record.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    declared_size,
    decode_header,
    decode_records,
)

__all__ = ["SegmentReader", "SharedLogFile"]

_READ_CHUNK_BYTES: Final = 1 << 20


class SharedLogFile:
    """The ``.log`` descriptor of one segment, shared by the segment and its readers.

    The descriptor is opened when first needed, not when the segment is opened:
    a log of thousands of segments holds descriptors only for the ones in use
    (Kafka opens its indexes lazily the same way).  The owner's operations
    (:meth:`require`: append, truncate, fsync) open it and keep it until
    :meth:`release`; a segment that is no longer active is released, and its
    descriptor is then open only while a reader reads it (:meth:`open_reader`
    pins without opening; the reader opens it at its first read).

    Invariants: once closed, the descriptor is open only while a reader still
    pins it, and is closed exactly once; a pinned file that is renamed or deleted
    (:meth:`hold_for_readers`, :meth:`close`) has its descriptor open first, so
    its readers keep reading the same file.

    Thread-safety: thread-safe.  ``_lock`` guards ``_fd``, ``_pins``, ``_keep``,
    ``_closed`` and ``path``: the segment pins, renames and closes under
    ``Log.lock``, but readers open, unpin (and may close the descriptor) from
    their own threads without it.
    """

    def __init__(self, fd: int | None, path: Path) -> None:
        """Share ``fd`` (now owned by this object; ``None``: not open yet), the descriptor of ``path``."""
        self._fd: int | None = fd
        self._closed = False
        self._keep = True
        self._pins = 0
        self._lock = threading.Lock()
        self.path = path
        """The file's current path (the owner updates it when it renames the file)."""

    @classmethod
    def open(cls, path: Path) -> SharedLogFile:
        """Open ``path`` for writing and reading, creating it if missing (not ``O_APPEND``:
        the segment writes at its own size, which a preallocated file's end is not)."""
        return cls(_open_log(path), path)

    def size(self) -> int:
        """The file's size now (``fstat``)."""
        try:
            return os.fstat(self.require()).st_size
        except OSError as exc:
            raise LogStorageError(self.path, "stat", exc) from exc

    def _fd_locked(self) -> int:
        if self._fd is None:
            self._fd = _open_log(self.path, create=False)
        return self._fd

    def require(self) -> int:
        """The descriptor for the segment's own use (opened if needed, kept until
        :meth:`release`); :class:`LogClosedError` once closed."""
        with self._lock:
            if self._closed:
                raise LogClosedError(f"segment {self.path} is closed")
            self._keep = True
            return self._fd_locked()

    def release(self) -> None:
        """The segment is not active: close the descriptor now, or once the last reader
        is done (it is opened again when needed)."""
        with self._lock:
            self._keep = False
            fd = None
            if self._pins == 0:
                fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    @property
    def closed(self) -> bool:
        """Whether the segment closed it (readers may still be using the descriptor)."""
        return self._closed

    @property
    def is_open(self) -> bool:
        """Whether a descriptor is open now (for tests of descriptor use)."""
        return self._fd is not None

    def open_reader(self, base_offset: int, end_position: int) -> SegmentReader:
        """A :class:`SegmentReader` of ``[0, end_position)`` that pins the file (the reader
        opens the descriptor at its first read)."""
        with self._lock:
            if self._closed:
                raise LogClosedError(f"segment {self.path} is closed")
            self._pins += 1
            fd = self._fd
        return SegmentReader(
            fd, self.path, base_offset, end_position, self.unpin, acquire=self._acquire
        )

    def _acquire(self) -> int:
        """A pinned reader's descriptor (opened now if the file has none)."""
        with self._lock:
            return self._fd_locked()

    def pin(self) -> int:
        """Pin the descriptor for the caller's own use (an fsync without ``Log.lock``);
        :meth:`unpin` when done.  :class:`LogClosedError` once closed."""
        with self._lock:
            if self._closed:
                raise LogClosedError(f"segment {self.path} is closed")
            fd = self._fd_locked()
            self._pins += 1
        return fd

    def unpin(self) -> None:
        """A reader (or a :meth:`pin`) is done; the last one closes the descriptor once the
        segment closed or released it."""
        with self._lock:
            self._pins -= 1
            fd = None
            if self._pins == 0 and (self._closed or not self._keep):
                fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def hold_for_readers(self) -> None:
        """Before the owner renames or deletes the file: if readers pin it, open the
        descriptor now (by the current path), so they go on reading the same file."""
        with self._lock:
            if self._pins and self._fd is None:
                self._fd = _open_log(self.path, create=False)

    def close(self) -> None:
        """The segment is done with it: close now, or when the last reader unpins. Idempotent."""
        self.hold_for_readers()
        with self._lock:
            self._closed = True
            fd = None
            if self._pins == 0:
                fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _open_log(path: Path, *, create: bool = True) -> int:
    flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        raise LogStorageError(path, "open", exc) from exc


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
        fd: int | None,
        path: Path,
        base_offset: int,
        end_position: int,
        release: Callable[[], None],
        *,
        acquire: Callable[[], int] | None = None,
    ) -> None:
        """Read ``fd`` (kept open for us until ``release`` is called); with ``fd`` ``None``,
        ``acquire()`` gives it at the first read."""
        self._fd: int | None = fd
        self._acquire = acquire
        self._release: Callable[[], None] | None = release
        self.path = path
        self.base_offset = base_offset
        self.end_position = end_position

    def close(self) -> None:
        """Give the descriptor back (the segment closes it once no reader needs it); idempotent."""
        release, self._release, self._fd = self._release, None, None
        self._acquire = None
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
            if self._release is None or self._acquire is None:
                raise LogClosedError(f"reader of {self.path} is closed")
            self._fd = self._acquire()
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
                header = self._decode(head, position, end, validate=False)
            except UnsupportedFormatError:
                # Unchecked by the CRC, a flipped attribute bit looks like compression:
                # only the whole batch can tell (this raises if its CRC fails).
                if len(head) >= LOG_OVERHEAD and position + declared_size(head) <= end:
                    whole = self._pread(declared_size(head), position)
                    self._decode(whole, position, end, validate=True)
                raise
            yield position, header
            position += header.size_in_bytes

    def batches(
        self, start_position: int = 0, *, upper_bound: int | None = None
    ) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """Yield ``(position, header, batch bytes)`` from ``start_position``, CRC-validated.

        Reads in chunks of about 1 MiB.  A torn or corrupt batch raises
        :class:`CorruptRecordError` naming the file and the batch's position:
        its length is checked first, then its CRC, then anything under the CRC.

        The base offset is outside the CRC (as in Kafka), so offsets are checked
        by their order before a batch is yielded: each batch must start above
        the previous batch's last offset and end below the next batch's base
        offset and below ``upper_bound`` (the next segment's base offset, when
        there is one).  A batch is therefore held back until the next one is
        read.  When two neighbours overlap, the one inconsistent with the
        batches before it is named.
        """
        pending: tuple[int, BatchHeader, bytes] | None = None
        floor = self.base_offset - 1  # the last offset before ``pending``
        framed = self._framed_batches(start_position)
        while True:
            try:
                item = next(framed, None)
            except CorruptRecordError:
                # A torn or corrupt batch ends the valid prefix; the batch before it
                # is still good (recovery truncates right after it), so yield it first.
                if pending is not None:
                    yield pending
                raise
            if item is None:
                break
            header = item[1]
            if pending is not None:
                if header.base_offset <= pending[1].last_offset:
                    bad = pending if header.base_offset > floor else item
                    raise self._order_error(bad, "overlaps the offsets of its neighbour")
                floor = pending[1].last_offset
                yield pending
            pending = item
        if pending is not None:
            if upper_bound is not None and pending[1].last_offset >= upper_bound:
                raise self._order_error(pending, f"runs into the next segment (base {upper_bound})")
            yield pending

    def _order_error(self, item: tuple[int, BatchHeader, bytes], reason: str) -> CorruptRecordError:
        position, header, _ = item
        return CorruptRecordError(
            self.path,
            position,
            f"batch offsets {header.base_offset}..{header.last_offset} are out of order: {reason}"
            " (the base offset is not covered by the CRC)",
        )

    def _framed_batches(self, start_position: int) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """Every CRC-validated batch from ``start_position``, offsets unchecked."""
        position = start_position
        end = self.end_position
        buf = b""
        buf_start = position
        while position < end:
            offset = position - buf_start
            if offset + BATCH_HEADER_SIZE > len(buf):
                buf = self._pread(min(_READ_CHUNK_BYTES, end - position), position)
                buf_start, offset = position, 0
            if len(buf) - offset >= LOG_OVERHEAD:
                size = declared_size(buf, offset)
                if offset + size > len(buf) and position + size <= end:  # one large batch
                    buf = self._pread(size, position)
                    buf_start, offset = position, 0
            header = self._decode(buf, position, end, validate=True, offset=offset)
            size = header.size_in_bytes
            yield position, header, buf[offset : offset + size]
            position += size

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        """The whole batch at ``position`` (whose header :meth:`headers` gave), CRC-validated.

        For the few batches a header scan needs in full (control batches: the
        marker is in the record); a torn or corrupt batch raises
        :class:`CorruptRecordError` naming the file and position.
        """
        data = self._pread(header.size_in_bytes, position)
        self._decode(data, position, self.end_position, validate=True)
        return data

    def position_of(self, offset: int, start_position: int = 0) -> int | None:
        """Position of the first batch from ``start_position`` whose last offset is ``>= offset``."""
        for position, header in self.headers(start_position):
            if header.last_offset >= offset:
                return position
        return None

    def next_offset(self, start_position: int, empty: int) -> int:
        """The offset after the last batch (scanning from ``start_position``), or ``empty``."""
        next_offset = empty
        for _, header in self.headers(start_position):
            next_offset = header.next_offset
        return next_offset

    def offset_for_timestamp(self, timestamp_ms: int, start_position: int) -> int | None:
        """Offset of the first record from ``start_position`` on with a timestamp ``>= timestamp_ms``.

        Finds the batch by its max timestamp; only that batch's records are decoded.
        """
        for batch_position, header, data in self.batches(start_position):
            if header.max_timestamp >= timestamp_ms:
                for record in decode_records(data, path=self.path, position=batch_position):
                    if record.timestamp_ms >= timestamp_ms:
                        return record.offset
        return None

    def _decode(
        self, buf: bytes, position: int, end: int, *, validate: bool, offset: int = 0
    ) -> BatchHeader:
        """The header of the batch at file ``position`` (``buf[offset]``), which must end by ``end``."""
        header = decode_header(
            buf,
            offset,
            path=self.path,
            end=offset + end - position,
            validate=validate,
            file_position=position,
        )
        if header.base_offset < self.base_offset:
            raise CorruptRecordError(
                self.path,
                position,
                "batch offset below the segment's base offset",
                expected=self.base_offset,
                actual=header.base_offset,
            )
        if header.last_offset - self.base_offset > INT32_MAX:
            # no writer puts it there (an index entry could not even name it): a damaged
            # base offset, which the CRC does not cover
            raise CorruptRecordError(
                self.path,
                position,
                "batch offsets beyond the segment's range (base offset + 2**31 - 1)",
                expected=f"<= {self.base_offset + INT32_MAX}",
                actual=header.last_offset,
            )
        return header
