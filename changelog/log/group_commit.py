"""Group commit: threads that need one log durable share its fsyncs (leader/follower).

A thread that has appended a batch ending at offset ``o`` needs the log
durable up to ``o`` (every offset below ``o`` fsynced) before it may
acknowledge.  Paying one fsync per thread caps N committing threads at one
fsync's throughput together (~5-7k fsyncs/s here, ``docs/performance.md``).
Databases share the fsync instead (PostgreSQL's and InnoDB's group commit);
so does this module, with the leader/follower rule:

1. a thread whose offset is already durable returns at once;
2. if a flush is in progress, it waits for that flush to end and looks again
   (the flush may have covered it: a *follower*, acknowledged by another
   thread's fsync);
3. otherwise it becomes the *leader*: it fsyncs everything appended so far,
   its own batch and every batch appended by threads that are now waiting,
   and wakes them.

While a leader fsyncs (the GIL is released), other threads keep appending;
the next leader's one fsync covers all of them.  N threads therefore need
about one fsync per *round*, not per commit.

Failure (the log's failed-state rules, :mod:`changelog.log.log`): a flush that
raises fails the group for good.  The leader gets its error; every waiter,
and every later caller, gets :class:`~changelog.errors.LogFailedError` (or
what the ``check`` callback raises: the log's own failed or closed state).
Nobody is acknowledged by a failed fsync, and the durable offset is only
read after a flush returned normally.

What a group commit guarantees (``docs/recovery.md``, "Group commit"): when
:meth:`GroupCommit.sync_to` returns, every offset below the one asked for was
fsynced by an fsync that *started* after the batch holding it was written
(the leader reads what it covers before its fsync, never after), and that
fsync succeeded.  It does not promise an fsync per caller, nor any order
between callers' returns.

:func:`sync_logs` is the other half of a commit over many partitions: it
makes several logs durable with their fsyncs overlapped (one thread per log;
``os.fsync`` releases the GIL), so a commit's data round costs about one
fsync, not one per partition.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final, Protocol

from changelog.errors import LogClosedError, LogFailedError, LogStorageError

__all__ = ["GroupCommit", "Syncable", "sync_logs"]

_POOL_THREADS: Final = 32
"""Worker threads of :func:`sync_logs` (a commit over more logs queues the rest)."""


class GroupCommit:
    """Leader/follower fsync sharing for one log (module docstring).

    ``durable_offset()`` returns the offset below which everything is on disk
    (read without a lock: an ``int`` attribute read).  ``flush(force)`` fsyncs
    everything appended before it was called and raises on failure; it must
    bring ``durable_offset()`` up to what it covered before it returns (it may
    skip the fsync when that is already durable, unless ``force``).
    ``check(offset)`` raises if the log can no longer make ``offset`` durable
    (failed, closed, or ``offset`` beyond its end); it is called before every
    decision, so a leader whose flush did not cover its offset looks again.

    Invariants: at most one ``flush()`` runs at a time (``_flushing``); once
    ``_failure`` is set it stays set and no caller returns normally.

    Thread-safety: thread-safe.  ``_cond``'s lock guards ``_flushing``,
    ``_failure`` and the counters; it is never held while ``flush()`` runs,
    and the callbacks are called without it (they may take the log's lock).
    """

    def __init__(
        self,
        *,
        durable_offset: Callable[[], int],
        flush: Callable[[bool], None],
        check: Callable[[int], None],
        label: str = "",
    ) -> None:
        """Share ``flush`` between the callers of :meth:`sync_to`."""
        self._durable_offset = durable_offset
        self._flush = flush
        self._check = check
        self._label = label
        self._lock = threading.Lock()
        """``_cond``'s lock, entered directly: ``with`` on a Condition runs two Python-level
        methods around it, on every call of :meth:`sync_to`."""
        self._cond = threading.Condition(self._lock)
        self._flushing = False
        self._waiting = 0
        """Callers in ``_cond.wait()`` (guarded by ``_cond``)."""
        self._failure: BaseException | None = None
        self._solo = threading.Lock()
        self.sharing = True
        """``False`` turns group commit off (for benchmarks and tests): every caller then runs
        its own fsync, one caller at a time, as appends did before group commit."""
        self.flushes = 0
        """fsyncs run by leaders (successful or not)."""
        self.followers = 0
        """Calls of :meth:`sync_to` acknowledged by another thread's fsync."""

    @property
    def failure(self) -> BaseException | None:
        """What failed a flush (the group then refuses every caller), or ``None``."""
        return self._failure

    def _raise_failed(self, offset: int) -> None:
        failure = self._failure
        assert failure is not None
        self._check(offset)  # the log's own error first (it names the log and the step)
        if isinstance(failure, LogStorageError):
            raise LogFailedError(
                f"{self._label}a shared fsync failed ({failure}); nothing it covered is acknowledged",
                failure,
            ) from failure
        raise LogClosedError(
            f"{self._label}a shared fsync did not finish ({failure!r}); nothing it covered is "
            "acknowledged"
        ) from failure

    def sync_to(self, offset: int) -> bool:
        """Return once every offset below ``offset`` is durable; ``True`` if this call fsynced.

        Steps 1-3 of the module docstring.  Raises what the flush raised (as
        the leader), :class:`~changelog.errors.LogFailedError` (a waiter of a
        failed flush, or any caller after it), or what ``check`` raises.
        """
        if not self.sharing:
            return self._sync_alone(offset)
        lock, cond = self._lock, self._cond
        led = False
        while True:
            with lock:
                while True:
                    if self._failure is not None:
                        self._raise_failed(offset)
                    if self._durable_offset() >= offset:
                        if not led:
                            self.followers += 1
                        return led
                    self._check(offset)
                    if not self._flushing:
                        break
                    self._waiting += 1
                    try:
                        cond.wait()
                    finally:
                        self._waiting -= 1
                self._flushing = True
                self.flushes += 1
            led = True
            try:
                self._flush(False)
            except BaseException as exc:
                with lock:
                    self._failure = exc
                    self._flushing = False
                    cond.notify_all()
                raise
            with lock:
                self._flushing = False
                if self._waiting:  # a Condition's notify walks its waiters in Python: skip it
                    cond.notify_all()
                if self._durable_offset() >= offset:  # the usual end: this flush covered it
                    return True

    def _sync_alone(self, offset: int) -> bool:
        """``sharing`` off: this caller's own fsync, under a lock of its own."""
        with self._solo:
            if self._failure is not None:
                self._raise_failed(offset)
            self._check(offset)
            self.flushes += 1
            try:
                self._flush(True)
            except BaseException as exc:
                self._failure = exc
                raise
        return True


class Syncable(Protocol):
    """What :func:`sync_logs` needs of a log: :meth:`changelog.Log.sync_to`."""

    def sync_to(self, offset: int) -> bool:
        """Return once every offset below ``offset`` is durable."""
        ...


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool  # noqa: PLW0603 - one lazily started pool per process
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="changelog-sync")
        return _pool


def sync_logs(targets: Sequence[tuple[Syncable, int]]) -> None:
    """Make each ``(log, offset)`` durable below ``offset``, the logs' fsyncs overlapped.

    The first target is synced on the calling thread, the others on a shared
    pool of threads at the same time (each through its log's group commit,
    so a log another committer is flushing is not fsynced twice).  Returns
    when all are durable.  If any fails, waits for the others and raises the
    first error in ``targets`` order (each failed log is failed by its own
    rules); the commit must then not be acknowledged.
    """
    if not targets:
        return
    if len(targets) == 1:
        log, offset = targets[0]
        log.sync_to(offset)
        return
    pool = _executor()
    futures: list[Future[bool]] = [pool.submit(log.sync_to, offset) for log, offset in targets[1:]]
    first: BaseException | None = None
    try:
        log, offset = targets[0]
        log.sync_to(offset)
    except BaseException as exc:  # noqa: BLE001 - re-raised after the others finished
        first = exc
    for future in futures:
        error = future.exception()
        if error is not None and first is None:
            first = error
    if first is not None:
        raise first
