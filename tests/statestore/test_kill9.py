"""kill -9 a writer process mid-stream; the reopened store is a whole-commit state no earlier than the last ack."""

from __future__ import annotations

import logging
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from statestore.config import StoreConfig
from statestore.manager import StateManager
from tests.statestore.helpers import NO_CLEANER, kill9_and_drain

WRITER = r"""
import sys
from changelog.config import LogConfig
from statestore.config import StateManagerConfig, StoreConfig
from statestore.manager import StateManager

state_dir, mode = sys.argv[1], sys.argv[2]
manager = StateManager(
    state_dir,
    config=StateManagerConfig(run_cleaner=True),
    log_config=LogConfig(segment_bytes=8192, min_cleanable_dirty_ratio=0.1, delete_retention_ms=0),
)
store = manager.store("kv", config=StoreConfig(restore_mode=mode, flush_interval_records=500))
start = store.get("commit", 0)
for n in range(start + 1, start + 100_000):
    for k in range(10):
        store[f"k{k}"] = n
    store.delete(f"gone{n - 1}")
    store[f"gone{n}"] = n
    store["commit"] = n
    store.commit()
    print(n, flush=True)
"""


def model(n: int) -> dict[str, Any]:
    """The state after commit ``n`` (all the writer's commits up to ``n``)."""
    if n == 0:
        return {}
    state: dict[str, Any] = {f"k{k}": n for k in range(10)}
    state[f"gone{n}"] = n
    state["commit"] = n
    return state


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_kill9_during_writes_loses_no_acknowledged_commit(tmp_path: Path, mode: str) -> None:
    state_dir = tmp_path / "state"
    rng = random.Random(mode)
    last_acked = 0
    for trial in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(state_dir), mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        first = child.stdout.readline()  # the writer is up and committing
        assert first.strip(), child.stderr.read() if child.stderr else ""
        time.sleep(rng.uniform(0.05, 0.4))
        out, _err = kill9_and_drain(child)
        acked = [int(line) for line in ([first, *out.splitlines()]) if line.strip()]
        last_acked = max(acked)
        with StateManager(state_dir, config=NO_CLEANER) as manager:
            store = manager.store("kv", config=StoreConfig(restore_mode=mode))  # type: ignore[arg-type]
            state = dict(store.items())
        n = state.get("commit", 0)
        assert n in (last_acked, last_acked + 1), (trial, n, last_acked)
        assert state == model(n), trial


def test_the_reopen_after_a_kill9_logs_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A kill -9 leaves every preallocated log with zeros after its last batch: the normal
    end of the log, cut at INFO.  An operator must not read "garbage or a torn write" after
    every crash (a real torn write keeps its warning: tests/changelog/log/test_preallocate.py)."""
    state_dir = tmp_path / "state"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(state_dir), "full"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    for _ in range(20):  # some commits acknowledged
        assert child.stdout.readline().strip(), child.stderr.read() if child.stderr else ""
    kill9_and_drain(child)
    with caplog.at_level(logging.INFO):
        with StateManager(state_dir, config=NO_CLEANER) as manager:
            assert manager.store("kv").get("commit", 0) >= 20
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("zero bytes after the last batch" in r.getMessage() for r in caplog.records)
