"""kill -9 a process committing key-value, timestamped, window and session stores in one transaction.

After every kill the reopened stores hold one whole commit, no earlier than
the last acknowledged one: none lost, none partially visible (the three
stores always agree on the commit number), windows included.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statestore.config import StoreConfig
from statestore.manager import StateManager
from statestore.serdes import LongSerde
from statestore.stores.time.timestamped import ValueAndTimestamp
from statestore.stores.time.window import Windowed
from tests.statestore.helpers import NO_CLEANER
from tests.statestore.time.harness import kill9_trials, open_window_store

WRITER = r"""
import sys
from changelog.config import LogConfig
from statestore.config import StateManagerConfig, StoreConfig
from statestore.manager import StateManager
from statestore.serdes import LongSerde

state_dir, mode = sys.argv[1], sys.argv[2]
config = StoreConfig(restore_mode=mode, flush_interval_records=300)
manager = StateManager(
    state_dir,
    config=StateManagerConfig(run_cleaner=True),
    log_config=LogConfig(segment_bytes=8192, min_cleanable_dirty_ratio=0.1),
)
kv = manager.store("kv", config=config)
ts = manager.timestamped_store("ts", value_serde=LongSerde(), config=config)
win = manager.window_store(
    "win", window_size_ms=10, retention_ms=2_000, segment_interval_ms=100,
    value_serde=LongSerde(), config=config,
)
sessions = manager.session_store(
    "sess", retention_ms=2_000, segment_interval_ms=100, value_serde=LongSerde(), config=config,
)
start = kv.get("commit", 0)
for n in range(start + 1, start + 1_000_000):
    with manager.transaction():
        kv["commit"] = n
        kv[f"k{n % 13}"] = n
        ts.put("t", n, timestamp_ms=n)
        ts.put(f"t{n % 7}", n, timestamp_ms=n)
        win.put("w", n, n * 10, timestamp_ms=n)
        win.put("x", n, (n // 3) * 30, timestamp_ms=n)
        sessions.merge(
            "u", n * 10, inactivity_gap_ms=15 if n % 5 else 5,
            aggregate=lambda agg: (agg or 0) + 1, merger=lambda a, b: a + b,
        )
    print(n, flush=True)
"""


def _check(state_dir: Path, mode: str) -> int:
    """The commit number the reopened stores agree on (asserts they are one whole commit)."""
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    with StateManager(state_dir, config=NO_CLEANER) as manager:
        n = manager.store("kv", config=config).get("commit", 0)
        ts = manager.timestamped_store("ts", value_serde=LongSerde(), config=config)
        win = open_window_store(manager, config)
        sessions = manager.session_store(
            "sess",
            retention_ms=2_000,
            segment_interval_ms=100,
            value_serde=LongSerde(),
            config=config,
        )
        if n == 0:
            assert ts.get("t") is None
            assert list(win.all()) == []
            assert list(sessions.all()) == []
            return 0
        assert ts.get_with_timestamp("t") == ValueAndTimestamp(n, n)
        assert {k: v.value for k, v in ts.items() if k != "t"} == {
            f"t{m % 7}": m for m in range(max(1, n - 6), n + 1)
        }
        assert win.stream_time_ms == n * 10
        # windows of "w": every commit's, back to the retention (start > n*10 - 2000)
        expected_w = [(m * 10, m) for m in range(max(1, n - 199), n + 1)]
        assert list(win.fetch("w", 0, 2**40)) == expected_w
        assert win.fetch_window("x", (n // 3) * 30) == n
        # commits m at m*10 chain into one session, broken after each m % 5 == 0 (gap 5 < 10)
        first = max(1, n - n % 5)
        assert list(sessions.find_sessions("u", n * 10, n * 10)) == [
            (Windowed("u", first * 10, n * 10), n - first + 1)
        ]
        return int(n)


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_kill9_across_store_types_loses_nothing_and_shows_no_partial_commit(
    tmp_path: Path, mode: str
) -> None:
    for trial, state_dir, acked in kill9_trials(WRITER, tmp_path, mode, (20, 300)):
        n = _check(state_dir, mode)
        assert n in (acked[-1], acked[-1] + 1), (trial, n, acked[-1])
