"""Helpers of the CLI tests: real state directories, and running the CLI in process."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from changelog.config import LogConfig
from statestore import StateManager, StateManagerConfig
from statestore.cli import main

USERS = 30
ROUNDS = 5
DELETED = range(0, USERS, 3)  # 10 tombstones
SMALL_LOG = LogConfig(segment_bytes=2048, index_interval_bytes=128)
QUIET = StateManagerConfig(run_cleaner=False)


@attrs.frozen
class Result:
    """What one CLI run printed and returned."""

    status: int
    out: str
    err: str


def run_cli(args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> Result:
    """Run ``statestore ARGS`` in process (argparse exits become statuses)."""
    out = io.StringIO()
    try:
        status = main(list(args), out=out)
    except SystemExit as exc:
        status = int(exc.code or 0)
    captured = capsys.readouterr()
    return Result(status, out.getvalue() + captured.out, captured.err)


def user(i: int) -> str:
    return f"user-{i:03d}"


def build_state(state_dir: Path) -> Path:
    """Two stores: ``users`` (5 rounds of updates, then 10 deletes) and ``counters`` (int keys)."""
    with StateManager(state_dir, config=QUIET, log_config=SMALL_LOG) as manager:
        users = manager.store("users")
        for round_number in range(ROUNDS):
            for i in range(USERS):
                users.put(user(i), {"round": round_number, "i": i})
            manager.commit()
        for i in DELETED:
            users.delete(user(i))
        manager.commit()
        counters = manager.store("counters", key_type=int)
        for i in range(-3, 4):
            counters.put(i, i * 10)
        manager.commit()
    return state_dir


def live_users() -> dict[str, dict[str, int]]:
    """What ``users`` holds after :func:`build_state`."""
    return {user(i): {"round": ROUNDS - 1, "i": i} for i in range(USERS) if i not in DELETED}
