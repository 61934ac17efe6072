"""The ``statestore`` pytest plugin (registered through the ``pytest11`` entry point).

Installed with the package, so every test suite that depends on statestore
gets these fixtures without a ``conftest.py``:

- ``state_dir``: a fresh, empty state directory (``tmp_path / "state"``);
- ``crash_harness``: a :class:`~statestore.testing.CrashHarness` on ``state_dir``
  (``"spawn"`` children, 60 s timeout); any child still alive at teardown is killed.

Importing this module imports nothing heavy (no RocksDB): the plugin is loaded
by every pytest run in an environment where statestore is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statestore.testing.harness import CrashHarness

__all__ = ["crash_harness", "state_dir"]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """A fresh, empty state directory for one test."""
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def crash_harness(state_dir: Path) -> Iterator[CrashHarness]:
    """A :class:`~statestore.testing.CrashHarness` over the test's ``state_dir``."""
    harness = CrashHarness(state_dir)
    try:
        yield harness
    finally:
        harness.close()
