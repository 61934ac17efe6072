"""Fixtures for statestore tests: managers over tmp state directories with tiny segments."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statestore.manager import StateManager
from tests.statestore.helpers import NO_CLEANER, TINY_LOG

OpenManager = Callable[..., StateManager]


@pytest.fixture
def open_manager(tmp_path: Path) -> Iterator[OpenManager]:
    """``open_manager(**kwargs)`` -> a manager on ``tmp_path/state`` (all closed at teardown)."""
    opened: list[StateManager] = []

    def make(**kwargs: Any) -> StateManager:
        kwargs.setdefault("config", NO_CLEANER)
        kwargs.setdefault("log_config", TINY_LOG)
        manager = StateManager(tmp_path / "state", **kwargs)
        opened.append(manager)
        return manager

    yield make
    for manager in opened:
        manager.close()
