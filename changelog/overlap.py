"""Run a job on a helper thread while this thread waits in a system call: a commit's apply beside its fsync.

A one-partition commit has two slow steps that do not depend on each other
once the batch is written: the changelog's fsync (the kernel's time; the
GIL is released) and the caller's follow-up work, such as applying the same
writes to RocksDB (CPU time, with the GIL held).  :func:`run_beside` runs
them at the same time, so the commit costs about the longer of the two
rather than their sum:

1. the job is handed to an idle helper thread (two lock operations; a new
   helper is started when none is idle, up to :data:`MAX_HELPERS`; past
   that the job runs on the calling thread after the wait, one after the
   other as before);
2. the calling thread runs ``wait`` (the fsync), which releases the GIL in
   the kernel, so the helper takes the GIL and runs the job meanwhile;
3. the calling thread waits for the job to end, and only then returns or
   raises: ``wait``'s exception first (the job's, if it also failed, is named
   in a note on it), else the job's.

Whatever happens, both have ended when :func:`run_beside` returns or raises:
the caller never runs on while its job does.  A job must not call
:func:`run_beside` itself.

After ``fork()`` the child forgets the parent's helpers (their threads do not
exist in the child) and starts its own when it needs them.

Thread-safety: thread-safe; any number of threads may call it at once (each
gets its own helper).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["MAX_HELPERS", "helper_count", "run_beside"]

T = TypeVar("T")

MAX_HELPERS: Final = 64
"""Helper threads at most per process; a caller finding none idle and this many started runs its job itself."""


class _Helper:
    """One helper thread and its two hand-off locks (held = not signalled)."""

    __slots__ = ("_done", "_error", "_go", "_job")

    def __init__(self) -> None:
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._job: Callable[[], None] | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._serve, name="changelog-beside", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._go.acquire()
            job = self._job
            self._job = None
            try:
                if job is not None:
                    job()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller, raised there
                self._error = exc
            self._done.release()

    def start(self, job: Callable[[], None]) -> None:
        self._job = job
        self._go.release()

    def join(self) -> BaseException | None:
        """Wait for the job; its exception, if it raised one."""
        self._done.acquire()
        error, self._error = self._error, None
        return error


_idle: list[_Helper] = []
_started = 0
_lock = threading.Lock()


def _forget_after_fork() -> None:
    global _lock, _started  # noqa: PLW0603 - the child's own helpers, from scratch
    _idle.clear()
    _started = 0
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def _take() -> _Helper | None:
    global _started  # noqa: PLW0603 - counted under _lock
    with _lock:
        if _idle:
            return _idle.pop()
        if _started >= MAX_HELPERS:
            return None
        _started += 1
    return _Helper()


def helper_count() -> int:
    """Helper threads started in this process so far (for tests and metrics)."""
    return _started


def run_beside(job: Callable[[], None], wait: Callable[[], T]) -> T:
    """Run ``job`` on a helper thread while this thread runs ``wait``; return ``wait``'s result.

    The steps and the error rule are in the module docstring: both have
    ended when this returns or raises; ``wait``'s exception wins, else the
    job's is raised.
    """
    helper = _take()
    if helper is None:
        result = wait()
        job()
        return result
    helper.start(job)
    try:
        result = wait()
    except BaseException as exc:
        error = helper.join()
        _release(helper)
        if error is not None and error is not exc:
            exc.add_note(f"the job run beside it also failed: {error!r}")
        raise
    error = helper.join()
    _release(helper)
    if error is not None:
        raise error
    return result


def _release(helper: _Helper) -> None:
    with _lock:
        _idle.append(helper)
