"""Helpers for restore-after-crash tests of services built on statestore.

- :class:`CrashHarness`: run a service function in a child process, let it
  acknowledge commits through a :class:`Reporter`, kill it with SIGKILL after
  N acks, at a mark or after a (random) delay, and reopen the restored stores;
- :func:`simulate_crash`: drop an open :class:`~statestore.StateManager` in
  process as if the process had died (descriptors closed, locks released,
  nothing more written);
- the pytest plugin :mod:`statestore.testing.plugin` (fixtures ``state_dir``
  and ``crash_harness``), loaded automatically through its entry point.

See ``docs/testing.md`` for a walk-through.
"""

from __future__ import annotations

from statestore.testing.errors import (
    CrashTestError,
    ServiceExitError,
    ServiceFailedError,
    ServiceTimeoutError,
)
from statestore.testing.harness import CrashHarness, CrashRun, RestoredStores
from statestore.testing.inprocess import simulate_crash
from statestore.testing.process import Reporter

__all__ = [
    "CrashHarness",
    "CrashRun",
    "CrashTestError",
    "Reporter",
    "RestoredStores",
    "ServiceExitError",
    "ServiceFailedError",
    "ServiceTimeoutError",
    "simulate_crash",
]
