"""kill -9 a process committing transactions over several stores: all or nothing per commit.

The child commits, again and again, one transaction over three stores (one
partition, three partitions, and the metadata store): commit ``n`` writes
``c{n}-{j}`` = n into the partitioned store (spread over its partitions),
``c{n}`` = n into the single-partition one, ``last`` = n into both, and
``position`` = n into the metadata store, and prints ``n`` once
``commit()`` returned.  The parent SIGKILLs it at a random moment, reopens
the directory, and checks that every acknowledged commit is there, that
every commit is wholly visible or wholly absent, and that the visible ones
are exactly ``1..m`` with ``m`` the last acknowledged or the one in flight.
Then the child runs again on the same directory (the next trial).
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statestore.manager import StateManager
from tests.statestore.helpers import NO_CLEANER, kill9_and_drain

WRITER = r"""
import sys
from changelog.config import LogConfig
from statestore.config import StateManagerConfig
from statestore.manager import StateManager

state_dir, parts = sys.argv[1], int(sys.argv[2])
tiny = LogConfig(segment_bytes=16384, min_cleanable_dirty_ratio=0.1, delete_retention_ms=0)
manager = StateManager(state_dir, config=StateManagerConfig(run_cleaner=True), log_config=tiny)
one, many, meta = manager.store("one"), manager.store("many", partitions=parts), manager.metadata
start = meta.get("position", 0)
for n in range(start + 1, start + 1_000_000):
    with manager.transaction():
        for j in range(6):
            many[f"c{n}-{j}"] = n
        many["last"] = n
        one[f"c{n}"] = n
        one["last"] = n
        meta["position"] = n
    print(n, flush=True)
"""


def check(state: Path, parts: int, last_acked: int) -> int:
    """The reopened state is commits ``1..m``, each whole; returns ``m``."""
    with StateManager(state, config=NO_CLEANER) as manager:
        one, many = manager.store("one"), manager.store("many", partitions=parts)
        m = manager.metadata.get("position", 0)
        assert m in (last_acked, last_acked + 1), (m, last_acked)
        assert one.get("last", 0) == many.get("last", 0) == m
        one_items, many_items = dict(one.items()), dict(many.items())
        for n in range(1, m + 1):
            assert one_items.pop(f"c{n}") == n, n
            for j in range(6):
                assert many_items.pop(f"c{n}-{j}") == n, (n, j)
        one_items.pop("last", None)
        many_items.pop("last", None)
        assert one_items == many_items == {}, "writes of an unacknowledged, aborted commit"
        for store in (one, many, manager.metadata):
            for log in store.changelogs:
                assert log.last_stable_offset == log.log_end_offset
    return m


def run_trials(tmp_path: Path, trials: int, seed: int, parts: int = 3) -> int:
    state = tmp_path / "state"
    rng = random.Random(seed)
    total_acked = 0
    for trial in range(trials):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(state), str(parts)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first.strip(), child.stderr.read() if child.stderr else ""
        time.sleep(rng.uniform(0.05, 0.5))
        out, _err = kill9_and_drain(child)
        acked = [int(line) for line in [first, *out.splitlines()] if line.strip()]
        total_acked += len(acked)
        visible = check(state, parts, max(acked))
        print(f"trial {trial}: {len(acked)} acknowledged, last {max(acked)}, visible 1..{visible}")
    return total_acked


def test_kill9_during_transactions_over_three_stores(tmp_path: Path) -> None:
    assert run_trials(tmp_path, trials=4, seed=14) > 4


@pytest.mark.slow
def test_kill9_during_transactions_soak(tmp_path: Path) -> None:
    assert run_trials(tmp_path, trials=25, seed=1414, parts=5) > 25
