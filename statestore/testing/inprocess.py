"""In-process crash: drop a StateManager as if its process had died.

:func:`simulate_crash` is the cheap sibling of the SIGKILL harness, for tests
that want many crash/reopen cycles in one process (Hypothesis state machines):
the background cleaner is stopped (a pass in progress is abandoned before its
swap), every store's RocksDB is released without a flush, every changelog is
abandoned without its checkpoints or clean-shutdown marker, and the
directory locks are released.  Uncommitted writes are lost; committed ones are
in the changelogs.  Reopening the state directory then goes through the same
recovery as after ``kill -9``.

What it cannot do is stop the process half-way through a commit: a commit
either ran or did not.  Use :class:`~statestore.testing.CrashHarness` (a real
SIGKILL) for that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statestore.manager import StateManager

__all__ = ["simulate_crash"]


def simulate_crash(manager: StateManager) -> None:
    """Abandon ``manager`` without a clean shutdown (see the module docstring); idempotent.

    The manager and its stores are closed afterwards: using them raises
    :class:`~statestore.errors.InvalidStateStoreError`.
    """
    manager.crash()
