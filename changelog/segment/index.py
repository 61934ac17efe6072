"""Shared mechanics of Kafka's sparse, fixed-width segment indexes (``.index``, ``.timeindex``).

An index file is a plain array of fixed-width, big-endian entries, each a
``(key, value)`` pair of integers.  :mod:`changelog.segment.offset_index` and
:mod:`changelog.segment.time_index` only say what an entry means (their byte tables
are at the top of those modules); searching, appending, truncating, loading,
checking and the file operations are here, once, as in Kafka's
``AbstractIndex``.

Differences from Kafka, on purpose:

* No preallocation and no mmap.  Kafka preallocates ``segment.index.bytes``
  and trims on roll; here the file always holds exactly the valid entries
  (its size is ``entries * entry_size``), so a reader never has to guess
  where the entries end.  ``max_entries = max_index_size // entry_size``
  still bounds the index (``is_full()`` makes the segment roll).
* The entries are kept in memory (two :class:`array.array` columns, as many
  bytes as the file) and searched with :mod:`bisect`.  Each append is also
  written to the file at once (one ``write``), so the file and memory agree.
* Nothing is fsynced until :meth:`FixedWidthIndex.flush`; indexes are never
  trusted after a crash anyway: the loader rebuilds them from the ``.log``.
* The file is opened only to write it (as Kafka's ``LazyIndex`` defers its
  mmap): :meth:`FixedWidthIndex.open` loads the entries and closes the file; a
  write opens it again and keeps it until :meth:`FixedWidthIndex.release`
  (the segment releases its indexes once it is no longer active).

Every write, truncate, fsync, rename and delete goes through
:mod:`changelog.fs.files` (fault points ``index.append``, ``index.truncate``,
``index.fsync``, ``index.rename``, ``index.delete``).
"""

from __future__ import annotations

import array
import bisect
import os
import struct
import threading
from pathlib import Path
from typing import ClassVar, Self

from changelog.errors import (
    CorruptIndexError,
    IndexOperationError,
    LogClosedError,
    LogStorageError,
)
from changelog.fs import files
from changelog.limits import INT32_MAX

__all__ = ["FixedWidthIndex", "IndexOperationError"]


class FixedWidthIndex:
    """A sparse index of fixed-width ``(key, value)`` entries, in memory and in its file.

    Subclasses set the entry layout (``ENTRY``, a big-endian :class:`struct.Struct`
    built one field per line), the column type codes and names, which column
    holds offsets (for :meth:`truncate_to`), and translate entries to and from
    their public named tuples.

    Invariants: the file holds exactly ``len(self)`` entries (its size is
    ``len(self) * entry_size``) equal to the in-memory columns; keys strictly
    increase; values never decrease; relative offsets lie in
    ``[0, INT32_MAX]``.  Loading a file that breaks them raises
    :class:`CorruptIndexError` naming the file, the byte position and the values.

    Thread-safety: thread-safe.  ``self._lock`` guards the columns, the file
    descriptor (its position is always the end of the file) and ``closed``.
    """

    ENTRY: ClassVar[struct.Struct]
    _KEY_TYPE: ClassVar[str]
    _VALUE_TYPE: ClassVar[str]
    _KEY_NAME: ClassVar[str]
    _VALUE_NAME: ClassVar[str]
    _KEY_MIN: ClassVar[int]
    _VALUE_MIN: ClassVar[int]
    _OFFSETS_ARE_KEYS: ClassVar[bool]
    _KIND: ClassVar[str]

    def __init__(
        self,
        path: Path,
        *,
        base_offset: int,
        max_index_size: int,
        fd: int | None,
        keys: array.array[int],
        values: array.array[int],
    ) -> None:
        """Use :meth:`open`; this only wires up what it has loaded and checked."""
        self._path = path
        self._base_offset = base_offset
        self._max_entries = max_index_size // self.entry_size()
        self._fd: int | None = fd
        self._closed = False
        self._keys = keys
        self._values = values
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- opening

    @classmethod
    def entry_size(cls) -> int:
        """Bytes per entry in the file."""
        return cls.ENTRY.size

    @classmethod
    def open(cls, path: Path, base_offset: int, *, max_index_size: int) -> Self:
        """Open (creating if missing) the index file at ``path`` and load its entries.

        Raises :class:`CorruptIndexError` if the file's size is not a whole
        number of entries or its entries break the invariants; the caller then
        deletes and rebuilds it from the ``.log``.  Creating the file does not
        fsync the directory: an index lost in a crash is rebuilt.
        """
        if base_offset < 0:
            raise ValueError(f"negative base offset {base_offset}")
        if max_index_size < cls.entry_size():
            raise ValueError(f"max_index_size {max_index_size} holds no entry")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LogStorageError(path, "open", exc) from exc
        try:
            data = _read_all(fd, path)
            keys, values = cls._load(path, data)
            os.lseek(fd, len(data), os.SEEK_SET)
        except OSError as exc:
            os.close(fd)
            raise LogStorageError(path, "read", exc) from exc
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # opened again when the file is written (see _require_fd)
        return cls(
            path,
            base_offset=base_offset,
            max_index_size=max_index_size,
            fd=None,
            keys=keys,
            values=values,
        )

    @classmethod
    def read_entries(cls, path: Path) -> tuple[array.array[int], array.array[int]]:
        """The two columns of the index file at ``path``, read-only (the loader's plan, verify).

        Raises :class:`CorruptIndexError` as :meth:`open` would, naming the
        file; a missing file raises it too (with position ``None``).
        """
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise CorruptIndexError(path, None, f"{cls._KIND} file is missing") from exc
        except OSError as exc:
            raise LogStorageError(path, "read", exc) from exc
        return cls._load(path, data)

    @classmethod
    def _load(cls, path: Path, data: bytes) -> tuple[array.array[int], array.array[int]]:
        size = cls.entry_size()
        if len(data) % size:
            raise CorruptIndexError(
                path,
                len(data) - len(data) % size,
                f"{cls._KIND} size {len(data)} is not a multiple of the entry size {size}",
            )
        keys = array.array(cls._KEY_TYPE)
        values = array.array(cls._VALUE_TYPE)
        previous_key = cls._KEY_MIN - 1
        previous_value = cls._VALUE_MIN
        for n, (key, value) in enumerate(cls.ENTRY.iter_unpack(data)):
            if key <= previous_key:
                raise CorruptIndexError(
                    path,
                    n * size,
                    f"{cls._KIND} entry {n}: {cls._KEY_NAME} does not increase",
                    expected=f"> {previous_key}",
                    actual=key,
                )
            if value < previous_value:
                raise CorruptIndexError(
                    path,
                    n * size,
                    f"{cls._KIND} entry {n}: {cls._VALUE_NAME} goes backwards or is negative",
                    expected=f">= {previous_value}",
                    actual=value,
                )
            keys.append(key)
            values.append(value)
            previous_key, previous_value = key, value
        return keys, values

    # ----------------------------------------------------------------- properties

    @property
    def path(self) -> Path:
        """The index file."""
        return self._path

    @path.setter
    def path(self, new_path: Path) -> None:
        """Record that the caller renamed the file (the open descriptor stays valid)."""
        self._path = new_path

    @property
    def base_offset(self) -> int:
        """The segment's base offset; entries store offsets relative to it."""
        return self._base_offset

    @property
    def max_entries(self) -> int:
        """``max_index_size // entry_size``."""
        return self._max_entries

    @property
    def size_in_bytes(self) -> int:
        """Bytes the entries take in the file."""
        return len(self._keys) * self.entry_size()

    def __len__(self) -> int:
        """Number of entries."""
        return len(self._keys)

    def is_full(self) -> bool:
        """Whether another entry would exceed ``max_entries`` (the segment must roll)."""
        return len(self._keys) >= self._max_entries

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def is_open(self) -> bool:
        """Whether a descriptor is open now (for tests of descriptor use)."""
        return self._fd is not None

    # ----------------------------------------------------------------- searching (for subclasses)

    def _relative(self, offset: int) -> int:
        relative = offset - self._base_offset
        if not 0 <= relative <= INT32_MAX:
            raise IndexOperationError(
                self._path,
                f"offset {offset} cannot be stored relative to base offset {self._base_offset}",
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` fits relative to the base offset (else the segment must roll)."""
        return 0 <= offset - self._base_offset <= INT32_MAX

    def _floor_slot(self, column: array.array[int], target: int) -> int:
        """Slot of the largest entry ``<= target`` in a non-decreasing column, or -1."""
        return bisect.bisect_right(column, target) - 1

    def _ceiling_slot(self, column: array.array[int], target: int) -> int:
        """Slot of the smallest entry ``>= target`` in a non-decreasing column, or -1."""
        slot = bisect.bisect_left(column, target)
        return slot if slot < len(column) else -1

    def _entry_at(self, n: int) -> tuple[int, int]:
        if not 0 <= n < len(self._keys):
            raise IndexOperationError(
                self._path, f"no entry {n} in a {self._KIND} of {len(self._keys)} entries"
            )
        return self._keys[n], self._values[n]

    # ----------------------------------------------------------------- mutation

    def _require_fd(self) -> int:
        """The descriptor, opened at the end of the file if it is not open (the caller
        holds ``self._lock``); kept until :meth:`release` or :meth:`close`."""
        if self._closed:
            raise LogClosedError(f"{self._KIND} {self._path} is closed")
        if self._fd is None:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise LogStorageError(self._path, "open", exc) from exc
            try:
                os.lseek(fd, 0, os.SEEK_END)
            except OSError as exc:
                os.close(fd)
                raise LogStorageError(self._path, "seek", exc) from exc
            self._fd = fd
        return self._fd

    def release(self) -> None:
        """Close the descriptor but stay usable: the next write opens it again (the entries
        are in memory, so lookups need no descriptor)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _append_entry(self, key: int, value: int) -> None:
        """Write one entry; the caller holds ``self._lock`` and has checked the order.

        ``max_entries`` is a hard limit here, whatever a subclass's :meth:`is_full` says.
        """
        fd = self._require_fd()
        if len(self._keys) >= self._max_entries:
            raise IndexOperationError(
                self._path, f"{self._KIND} is full ({len(self._keys)} of {self._max_entries})"
            )
        try:
            files.write_fd(fd, self.ENTRY.pack(key, value), self._path, "index.append")
        except LogStorageError:
            self._cut_partial_entry(fd)
            raise
        self._keys.append(key)
        self._values.append(value)

    def _cut_partial_entry(self, fd: int) -> None:
        """After a failed write (disk full), drop any partial entry so the file stays whole."""
        valid = len(self._keys) * self.entry_size()
        try:
            files.truncate_fd(fd, valid, self._path, "index.append.repair")
            os.lseek(fd, valid, os.SEEK_SET)
        except (LogStorageError, OSError):
            pass  # the write already failed with the real cause; the loader rebuilds the index

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ``>= offset`` (no effect past the last entry)."""
        with self._lock:
            column = self._keys if self._OFFSETS_ARE_KEYS else self._values
            self._truncate_locked(bisect.bisect_left(column, offset - self._base_offset))

    def truncate_to_entries(self, entries: int) -> None:
        """Keep only the first ``entries`` entries (no effect if there are fewer)."""
        if entries < 0:
            raise IndexOperationError(self._path, f"cannot keep {entries} entries")
        with self._lock:
            self._truncate_locked(entries)

    def reset(self) -> None:
        """Remove every entry (before a rebuild)."""
        with self._lock:
            self._truncate_locked(0)

    def _truncate_locked(self, entries: int) -> None:
        fd = self._require_fd()
        if entries >= len(self._keys):
            return
        size = entries * self.entry_size()
        files.truncate_fd(fd, size, self._path, "index.truncate")
        try:
            os.lseek(fd, size, os.SEEK_SET)
        except OSError as exc:
            raise LogStorageError(self._path, "index.truncate", exc) from exc
        del self._keys[entries:]
        del self._values[entries:]

    def trim_to_valid_size(self) -> None:
        """Make the file exactly as long as its entries (Kafka trims its preallocation on roll).

        Our file never holds more than its entries, so this only cuts bytes
        that someone else appended to it.
        """
        with self._lock:
            fd = self._require_fd()
            valid = len(self._keys) * self.entry_size()
            if _file_size(fd, self._path) != valid:
                files.truncate_fd(fd, valid, self._path, "index.truncate")
                try:
                    os.lseek(fd, valid, os.SEEK_SET)
                except OSError as exc:
                    raise LogStorageError(self._path, "index.truncate", exc) from exc

    def resize(self, max_index_size: int) -> bool:
        """Change the bound to ``max_index_size // entry_size`` entries; returns whether it changed.

        The bound may not drop below the entries already there.
        """
        new_max = max_index_size // self.entry_size()
        with self._lock:
            if new_max < len(self._keys):
                raise IndexOperationError(
                    self._path,
                    f"cannot resize to {new_max} entries: {len(self._keys)} are in the {self._KIND}",
                )
            changed = new_max != self._max_entries
            self._max_entries = new_max
            return changed

    def flush(self) -> None:
        """fsync the file."""
        with self._lock:
            files.fsync_fd(self._require_fd(), self._path, "index.fsync")

    def close(self) -> None:
        """Close the file (no fsync: call :meth:`flush` first if it should be durable). Idempotent."""
        with self._lock:
            self._closed = True
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def delete(self) -> bool:
        """Close and delete the file; returns whether a file was there."""
        self.close()
        return files.delete_file(self._path, "index.delete")

    def rename_to(self, new_path: Path, *, sync_dir: bool = True) -> None:
        """Rename the file (through :func:`changelog.fs.files.rename_file`); the index stays open."""
        with self._lock:
            files.rename_file(self._path, new_path, "index.rename", sync_dir=sync_dir)
            self._path = new_path

    # ----------------------------------------------------------------- checking

    def sanity_check(self) -> None:
        """Check the invariants that are cheap to check (Kafka's ``sanityCheck``).

        The file size must be a whole number of entries and match the entries
        in memory; the first and last entries must be in order and the last
        offset not below the base offset.  Raises :class:`CorruptIndexError`
        naming the file and the values found.
        """
        with self._lock:
            fd = self._require_fd()
            length = _file_size(fd, self._path)
            size = self.entry_size()
            if length % size:
                raise CorruptIndexError(
                    self._path,
                    length - length % size,
                    f"{self._KIND} size is not a multiple of the entry size {size}",
                    expected=len(self._keys) * size,
                    actual=length,
                )
            if length != len(self._keys) * size:
                raise CorruptIndexError(
                    self._path,
                    min(length, len(self._keys) * size),
                    f"{self._KIND} file does not hold the entries in memory",
                    expected=len(self._keys) * size,
                    actual=length,
                )
            if not self._keys:
                return
            last = len(self._keys) - 1
            if self._keys[last] < self._keys[0] or self._values[last] < self._values[0]:
                raise CorruptIndexError(
                    self._path,
                    last * size,
                    f"{self._KIND} last entry is before its first",
                    expected=f">= ({self._keys[0]}, {self._values[0]})",
                    actual=(self._keys[last], self._values[last]),
                )
            column = self._keys if self._OFFSETS_ARE_KEYS else self._values
            if column[last] < 0:
                raise CorruptIndexError(
                    self._path,
                    last * size,
                    f"{self._KIND} last offset is below the base offset {self._base_offset}",
                    expected=f">= {self._base_offset}",
                    actual=self._base_offset + column[last],
                )

    def __repr__(self) -> str:
        """``OffsetIndex(path, base_offset=.., entries=..)``."""
        return (
            f"{type(self).__name__}({str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={len(self._keys)}/{self._max_entries})"
        )


def _read_all(fd: int, path: Path) -> bytes:
    size = _file_size(fd, path)
    chunks = []
    position = 0
    while position < size:
        chunk = os.pread(fd, size - position, position)
        if not chunk:
            break
        chunks.append(chunk)
        position += len(chunk)
    return b"".join(chunks)


def _file_size(fd: int, path: Path) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError as exc:
        raise LogStorageError(path, "fstat", exc) from exc
