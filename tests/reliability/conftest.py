"""Reliability suite: sizes from the environment, and the summary lines at the end.

- ``STATESTORE_CI_TRIALS`` (default 3): kill -9 trials per mode in the normal suite;
- ``STATESTORE_SOAK_TRIALS`` (default 5): trials per kill -9 mode of the ``slow``
  soak tests (``-m slow``; the documented soak run uses 200);
- ``STATESTORE_SOAK_SCALE`` (default 2): how many times more data the ``slow``
  crash-point scenarios prepare (the documented soak run uses 4).

The defaults keep ``./dev test`` (which runs the ``slow`` tests too) bounded.
"""

from __future__ import annotations

import os

import pytest

from tests.reliability import stats


def env_int(name: str, default: int) -> int:
    """A positive integer from the environment."""
    value = int(os.environ.get(name, default))
    if value < 1:
        raise ValueError(f"{name} must be >= 1, not {value}")
    return value


CI_TRIALS = env_int("STATESTORE_CI_TRIALS", 3)
SOAK_TRIALS = env_int("STATESTORE_SOAK_TRIALS", 5)
SOAK_SCALE = env_int("STATESTORE_SOAK_SCALE", 2)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the reliability figures of this session (one parseable line per kind)."""
    lines = stats.lines()
    if not lines:
        return
    terminalreporter.section("statestore reliability figures")
    for line in lines:
        terminalreporter.write_line(line)
    stats.write_report()
