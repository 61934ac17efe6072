"""Fixtures of the CLI tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli.helpers import build_state


@pytest.fixture(scope="session")
def state_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One state directory built by a real StateManager (see :func:`build_state`), never modified."""
    return build_state(tmp_path_factory.mktemp("template") / "state")


@pytest.fixture
def state(tmp_path: Path, state_template: Path) -> Path:
    """A private copy of the cleanly closed template state directory."""
    return Path(shutil.copytree(state_template, tmp_path / "state"))
