"""The directory lock: one owner per partition (or state) directory.

A lock is an exclusive, non-blocking ``flock`` on a ``.lock`` file inside the
directory.  Every :meth:`DirectoryLock.acquire` opens its own file description,
so a second owner conflicts whether it is another process or another thread
(or another :class:`DirectoryLock`) of the same process.  The kernel drops the
lock when the holder's descriptor is closed, including when the process dies
(``kill -9``): a stale ``.lock`` file never blocks anyone, and the file itself is
never deleted (deleting it would let two owners lock two different inodes).

The holder writes its pid into the file, so that the error a second owner gets
can name it.  The pid is informative only: the ``flock`` is the lock.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Final

from changelog.errors import LogLockedError, LogStorageError

__all__ = ["LOCK_FILE_NAME", "DirectoryLock"]

LOCK_FILE_NAME: Final = ".lock"

logger = logging.getLogger(__name__)


class DirectoryLock:
    """An exclusive lock on ``directory/.lock``.

    Thread-safety: thread-safe; ``_mutex`` guards ``_fd`` (acquire/release may
    race with each other from different threads).

    Invariants: ``_fd`` is ``None`` or an open descriptor of the lock file on
    which this object holds ``LOCK_EX``.
    """

    def __init__(self, directory: Path | str) -> None:
        """Prepare a lock for ``directory`` (nothing is opened until :meth:`acquire`)."""
        self._directory = Path(directory)
        self._path = self._directory / LOCK_FILE_NAME
        self._fd: int | None = None
        self._mutex = threading.Lock()

    @property
    def path(self) -> Path:
        """The ``.lock`` file."""
        return self._path

    @property
    def held(self) -> bool:
        """Whether this object currently holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`LogLockedError` naming the path and holder's pid.

        Raises :class:`LogStorageError` if the lock file cannot be opened.
        Acquiring a lock this object already holds is a no-op.
        """
        with self._mutex:
            if self._fd is not None:
                return
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise LogStorageError(self._path, "open lock file", exc) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise LogLockedError(self._path, holder) from None
            except OSError as exc:
                os.close(fd)
                raise LogStorageError(self._path, "flock", exc) from exc
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
            except OSError:
                # The pid is informative only; the flock is held, so keep it.
                logger.warning("%s: could not write the holder pid into the lock file", self._path)
            self._fd = fd
            logger.debug("%s: locked by pid %s", self._path, os.getpid())

    def release(self) -> None:
        """Release the lock (closing the descriptor drops the ``flock``); idempotent."""
        with self._mutex:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            logger.debug("%s: unlocked", self._path)

    def __enter__(self) -> DirectoryLock:
        """Acquire the lock for the duration of a ``with`` block."""
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release the lock."""
        self.release()

    def __repr__(self) -> str:
        """Path and state, for logs."""
        return f"DirectoryLock({str(self._path)!r}, held={self.held})"


def _read_holder(fd: int) -> str | None:
    """The pid written by the current holder, as ``"pid N"``, or ``None`` if unreadable."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return f"pid {text}" if text.isdigit() else None
