"""A partition's commit lock: one commit at a time, handed to waiting committers in arrival order.

Why not a plain :class:`threading.Lock`: CPython's lock is not fair.  A thread
that releases it and asks again at once (a thread committing in a loop) gets
it back before the threads already waiting are even scheduled, so with N
threads committing one store, one thread commits record after record, each
with its own fsync, while the others wait for the lock although their writes
were already taken (and made durable) by an earlier commit.  Measured with 3
threads and fsyncs slowed to 2 ms: 196 of 200 commits carried one record
(``docs/performance.md``, "Group commit of one store").

The lock shares fsyncs the way a group commit does, with two rules:

1. **Tickets.**  A committer asks for a :meth:`CommitLock.ticket` after its
   writes are buffered: the number the next take of the buffer will have.
   Takes are numbered (:meth:`CommitLock.next_take`, called by the buffer
   *before* it copies its pending writes), so any take numbered at or above
   the ticket includes the committer's writes.  When a commit succeeds, its
   take number is recorded (:meth:`CommitLock.committed`).
   :meth:`CommitLock.acquire_unless_covered` returns ``False`` without the
   lock as soon as a take at or above the ticket has committed: the caller's
   writes are durable, someone else's commit carried them, and it has
   nothing to do.
2. **Arrival order.**  The lock passes to waiters oldest first, so while one
   commit is in its fsync the other threads buffer their writes and queue;
   the first in line takes every pending write into one batch and one fsync,
   and the ones after it find themselves covered and return at once.

Invariants: ``_held`` is true while an owner holds the lock; ``_waiters``
holds one locked gate per waiting thread, oldest first; a release with
waiters opens the oldest gate and leaves ``_held`` true (ownership passes
directly, so no newcomer can overtake).  ``_committed <= _taken``: takes are
numbered 1, 2, ... under the lock, and ``_committed`` is the highest take
whose commit succeeded (takes commit in order, one at a time).

Thread-safety: thread-safe; ``_mutex`` guards every field and is held only
for those few operations.  Not reentrant.
"""

from __future__ import annotations

import collections
import threading
from types import TracebackType

__all__ = ["CommitLock"]


class CommitLock:
    """A first-come-first-served lock (module docstring); a context manager like ``threading.Lock``."""

    __slots__ = ("_committed", "_held", "_mutex", "_taken", "_waiters")

    def __init__(self) -> None:
        """An unlocked lock; no take yet."""
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: collections.deque[threading.Lock] = collections.deque()
        self._taken = 0
        self._committed = 0

    def acquire(self) -> bool:
        """Wait until every earlier caller has had and released the lock, then hold it."""
        return self.acquire_unless_covered(None)

    def acquire_unless_covered(self, ticket: int | None) -> bool:
        """Hold the lock (``True``), or return ``False`` once a take at or above ``ticket`` committed.

        ``None``: no ticket, always wait for the lock.
        """
        with self._mutex:
            if ticket is not None and self._committed >= ticket:
                return False
            if not self._held:
                self._held = True
                return True
            gate = threading.Lock()
            gate.acquire()
            self._waiters.append(gate)
        gate.acquire()  # opened by the release that hands the lock to this thread
        if ticket is not None and self._committed >= ticket:
            self.release()  # covered while waiting: pass the lock on
            return False
        return True

    def acquire_take(self) -> int:
        """:meth:`ticket`, :meth:`acquire_unless_covered` with it and :meth:`next_take`, in one step.

        For a committer whose writes are buffered and who copies them next: the
        take's number (> 0) with the lock held, or 0 (lock not held) once a take
        that includes those writes committed.  An uncontended lock costs one
        ``_mutex`` round.
        """
        with self._mutex:
            if not self._held:
                self._held = True
                self._taken += 1
                return self._taken
            ticket = self._taken + 1
            gate = threading.Lock()
            gate.acquire()
            self._waiters.append(gate)
        gate.acquire()  # opened by the release that hands the lock to this thread
        if self._committed >= ticket:
            self.release()  # covered while waiting: pass the lock on
            return 0
        return self.next_take()

    def ticket(self) -> int:
        """The number the next take will have (ask after buffering the writes to cover)."""
        with self._mutex:
            return self._taken + 1

    def next_take(self) -> int:
        """Number a take (the lock's holder calls it just *before* copying the pending writes)."""
        with self._mutex:
            self._taken += 1
            return self._taken

    def committed(self, take: int) -> None:
        """Record that the commit of take ``take`` succeeded (durable), by the lock's holder."""
        with self._mutex:
            self._committed = max(self._committed, take)

    def release_committed(self, take: int) -> None:
        """:meth:`committed` then :meth:`release`, in one ``_mutex`` round (a one-partition commit)."""
        with self._mutex:
            if not self._held:
                raise RuntimeError("release of an unlocked CommitLock")
            self._committed = max(self._committed, take)
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._held = False

    def release(self) -> None:
        """Hand the lock to the oldest waiter, or unlock it."""
        with self._mutex:
            if not self._held:
                raise RuntimeError("release of an unlocked CommitLock")
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._held = False

    def queue_length(self) -> int:
        """How many threads wait for the lock (for metrics and tests)."""
        return len(self._waiters)

    def locked(self) -> bool:
        """Whether someone holds the lock."""
        return self._held

    def __enter__(self) -> bool:
        """:meth:`acquire`."""
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """:meth:`release`."""
        self.release()
