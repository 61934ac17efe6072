"""File names and every file-system mutation of the changelog, in one place.

Nobody else in :mod:`changelog` renames, deletes, truncates or fsyncs a file:
they call these functions.  That gives one place to get atomicity right and
one place for tests to inject crashes: every mutation first calls
:func:`fault_point` with a step name, and a test can install a hook (with
:func:`inject_faults`) that raises :class:`SimulatedCrash` at the k-th step
(a crash: nothing more happens), or an :class:`OSError` such as ``ENOSPC`` or
``EIO`` (a failing disk: the step fails exactly as the real call would, wrapped
in :class:`~changelog.errors.LogStorageError`), or :class:`ShortWrite` at a
write step (half of the data is written, then the write fails).

Names (Kafka's): a segment is ``<20-digit base offset><suffix>`` with the
suffixes below; the segment-replace protocol adds ``.cleaned``, ``.swap`` and
``.deleted`` after the ordinary suffix (``00000000000000000000.log.swap``).

Atomic replace of a small file (checkpoints): write ``<name>.tmp``, fsync it,
``os.replace`` over the target, fsync the directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from changelog.errors import LogStorageError

__all__ = [
    "CLEANED_SUFFIX",
    "CLEAN_SHUTDOWN_FILE",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "SEGMENT_SUFFIXES",
    "SWAP_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "FaultHook",
    "ShortWrite",
    "SimulatedCrash",
    "atomic_write",
    "delete_file",
    "delete_tree",
    "fault_point",
    "fdatasync_fd",
    "fsync_dir",
    "fsync_fd",
    "inject_faults",
    "make_dirs",
    "parse_base_offset",
    "pwrite_fd",
    "rename_file",
    "segment_file_name",
    "truncate_fd",
    "write_fd",
]

CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
"""Written last by a clean close; its absence at open means "recover" (Kafka's marker file)."""
LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
TXN_INDEX_SUFFIX: Final = ".txnindex"
SEGMENT_SUFFIXES: Final = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
"""Every file a segment may have (the ``.txnindex`` only once it has an entry)."""
CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
DELETED_SUFFIX: Final = ".deleted"

_OFFSET_DIGITS: Final = 20
_SEGMENT_NAME = re.compile(r"^(\d{20})(\.[a-z]+)(\.[a-z]+)?$")

FaultHook = Callable[[str, Path], None]
"""Called as ``hook(step, path)`` before each file-system mutation."""

_fault_hook: FaultHook | None = None


class SimulatedCrash(BaseException):
    """Raised by a test's fault hook to stop the process "here", as ``kill -9`` would.

    A :class:`BaseException` so that no ``except Exception`` on the way up can
    swallow it and tidy up: after a crash, nothing more is written.
    """


class ShortWrite(OSError):  # noqa: N818 - it is a fault to inject, named for what it does
    """Raised by a test's fault hook at a write step: :func:`write_fd` writes the first half
    of the data, then fails with this error's ``errno`` (a disk filling up mid-write)."""


def fault_point(step: str, path: Path) -> None:
    """Announce the file-system mutation ``step`` on ``path`` to the installed hook."""
    if _fault_hook is not None:
        _fault_hook(step, path)


@contextlib.contextmanager
def inject_faults(hook: FaultHook) -> Iterator[None]:
    """Install ``hook`` for the duration of the block (tests only; not thread-scoped)."""
    global _fault_hook  # noqa: PLW0603 - one process-wide hook is the point
    previous = _fault_hook
    _fault_hook = hook
    try:
        yield
    finally:
        _fault_hook = previous


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for ``(42, ".log")``."""
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    return f"{base_offset:0{_OFFSET_DIGITS}d}{suffix}"


def parse_base_offset(name: str) -> tuple[int, str, str] | None:
    """Split a segment file name into ``(base_offset, suffix, protocol_suffix)``.

    ``"00000000000000000042.log.swap"`` -> ``(42, ".log", ".swap")``;
    ``protocol_suffix`` is ``""`` for an ordinary file.  Anything else -> ``None``.
    """
    match = _SEGMENT_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2), match.group(3) or ""


def _storage_error(path: Path, operation: str, exc: OSError) -> LogStorageError:
    return LogStorageError(path, operation, exc)


def write_fd(fd: int, data: bytes | memoryview, path: Path, step: str = "write") -> None:
    """Write all of ``data`` at the fd's position (looping on short writes)."""
    view = memoryview(data)
    try:
        try:
            fault_point(step, path)
        except ShortWrite:
            os.write(fd, view[: len(view) // 2])
            raise
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError as exc:
        raise _storage_error(path, step, exc) from exc


def pwrite_fd(
    fd: int,
    data: bytes | bytearray | memoryview,
    position: int,
    path: Path,
    step: str = "write",
    *,
    announce: bool = True,
) -> None:
    """Write all of ``data`` at ``position`` (looping on short writes); the fd's offset is
    not used, so the descriptor must not be ``O_APPEND`` (Linux would append).

    ``announce=False``: no fault point (the later writes of one step a caller splits in
    pieces, whose first write announced it)."""
    if _fault_hook is None or not announce:  # the usual case: one call, no view of the data
        try:
            written = os.pwrite(fd, data, position)
        except OSError as exc:
            raise _storage_error(path, step, exc) from exc
        if written == len(data):
            return
        data, position = memoryview(data)[written:], position + written
    view = memoryview(data)
    try:
        try:
            if announce:
                fault_point(step, path)
        except ShortWrite:
            os.pwrite(fd, view[: len(view) // 2], position)
            raise
        while view:
            written = os.pwrite(fd, view, position)
            view = view[written:]
            position += written
    except OSError as exc:
        raise _storage_error(path, step, exc) from exc


def fdatasync_fd(fd: int, path: Path, step: str = "fsync") -> None:
    """``fdatasync`` an open file: its data, and its size when that changed.

    fdatasync(2): metadata needed to read the data back (the file size) is flushed;
    timestamps are not.  So it is as durable as ``fsync`` for an append, and cheaper
    only when the append changed no metadata (a write into preallocated space).  Where
    ``os`` has no ``fdatasync`` (macOS), ``fsync``.
    """
    try:
        if _fault_hook is not None:
            _fault_hook(step, path)
        getattr(os, "fdatasync", os.fsync)(fd)
    except OSError as exc:
        raise _storage_error(path, step, exc) from exc


def fsync_fd(fd: int, path: Path, step: str = "fsync") -> None:
    """fsync an open file."""
    try:
        fault_point(step, path)
        os.fsync(fd)
    except OSError as exc:
        raise _storage_error(path, step, exc) from exc


def truncate_fd(fd: int, size: int, path: Path, step: str = "truncate") -> None:
    """Truncate an open file to ``size`` bytes."""
    try:
        fault_point(step, path)
        os.ftruncate(fd, size)
    except OSError as exc:
        raise _storage_error(path, step, exc) from exc


def fsync_dir(directory: Path, step: str = "fsync_dir") -> None:
    """fsync a directory so that renames and creations in it are durable."""
    try:
        fault_point(step, directory)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise _storage_error(directory, step, exc) from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):  # some filesystems refuse; nothing to do
            raise _storage_error(directory, step, exc) from exc
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, step: str = "atomic_write") -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Steps (each a fault point): 1. write ``path.tmp``; 2. fsync it;
    3. ``os.replace`` onto ``path``; 4. fsync the directory.  A crash before 3
    leaves the old file (and a stray ``.tmp`` the reader ignores); after 3, the new one.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        fault_point(f"{step}.create", tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise _storage_error(tmp, step, exc) from exc
    try:
        write_fd(fd, data, tmp, f"{step}.write")
        fsync_fd(fd, tmp, f"{step}.fsync")
    finally:
        os.close(fd)
    rename_file(tmp, path, f"{step}.rename", sync_dir=False)
    fsync_dir(path.parent, f"{step}.fsync_dir")


def make_dirs(directory: Path, step: str = "mkdir") -> None:
    """Create ``directory`` and any missing parents, each made durable.

    After each ``mkdir`` the parent is fsynced, so the new entry survives a
    power cut (a directory entry is durable only once its parent directory
    is fsynced).  An existing directory is left as it is.
    """
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        try:
            fault_point(step, path)
            path.mkdir(exist_ok=True)
        except OSError as exc:
            raise _storage_error(path, step, exc) from exc
        fsync_dir(path.parent, f"{step}.fsync_parent")


def rename_file(src: Path, dst: Path, step: str = "rename", *, sync_dir: bool = True) -> None:
    """Rename ``src`` to ``dst`` (replacing it), then fsync the directory unless told not to."""
    try:
        fault_point(step, src)
        src.replace(dst)
    except OSError as exc:
        raise _storage_error(src, step, exc) from exc
    if sync_dir:
        fsync_dir(dst.parent, f"{step}.fsync_dir")


def delete_file(path: Path, step: str = "delete", *, missing_ok: bool = True) -> bool:
    """Delete ``path``; returns whether a file was there."""
    try:
        fault_point(step, path)
        path.unlink()
    except FileNotFoundError:
        if not missing_ok:
            raise
        return False
    except OSError as exc:
        raise _storage_error(path, step, exc) from exc
    return True


def delete_tree(directory: Path, step: str = "delete_tree") -> None:
    """Delete ``directory`` and everything below it, deepest first, then fsync its parent.

    Every file deletion and directory removal is a fault point (``step``), so
    a crash can stop it anywhere: callers rename the tree to a name nobody
    reads first (``<name>.deleted``), so a half-deleted tree is never used.
    A missing ``directory`` is nothing to do.
    """
    if not directory.exists():
        return
    for root, dirs, names in os.walk(directory, topdown=False):
        for name in names:
            delete_file(Path(root) / name, f"{step}.delete")
        for name in dirs:
            path = Path(root) / name
            try:
                fault_point(f"{step}.rmdir", path)
                path.rmdir()
            except OSError as exc:
                raise _storage_error(path, f"{step}.rmdir", exc) from exc
    try:
        fault_point(f"{step}.rmdir", directory)
        directory.rmdir()
    except OSError as exc:
        raise _storage_error(directory, f"{step}.rmdir", exc) from exc
    fsync_dir(directory.parent, f"{step}.fsync_parent")
