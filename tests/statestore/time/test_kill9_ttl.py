"""kill -9 a process committing a TTL store beside key-value, timestamped and window stores in one transaction.

The child's clock is logical: ``BASE + 10 * n`` while it writes commit ``n``,
so values expire as commits go by (TTL: 30 commits), the sweep writes
tombstones at every commit and the background cleaner removes expired records
meanwhile.  After every kill the stores are reopened at a clock no earlier
than any the child reached and must hold one whole commit, no earlier than
the last acknowledged one (none lost, none partially visible), and the TTL
store exactly the model's live values at that clock: an expired value is
never back (none resurrected).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statestore.config import StoreConfig
from statestore.manager import StateManager
from statestore.serdes import LongSerde
from statestore.stores.time.settings import TtlSettings
from tests.statestore.helpers import NO_CLEANER
from tests.statestore.time.harness import kill9_trials, open_window_store

BASE = 1_000_000
STEP = 10
TTL_MS = 300
KEYS = 97

WRITER = r"""
import sys
from changelog.config import LogConfig
from statestore.config import StateManagerConfig, StoreConfig
from statestore.manager import StateManager
from statestore.serdes import LongSerde
from statestore.stores.time.settings import TtlSettings

state_dir, mode = sys.argv[1], sys.argv[2]
BASE, STEP, TTL_MS, KEYS = 1_000_000, 10, 300, 97
now = [BASE]
config = StoreConfig(restore_mode=mode, flush_interval_records=300)
manager = StateManager(
    state_dir,
    lambda: now[0],
    config=StateManagerConfig(run_cleaner=True),
    log_config=LogConfig(segment_bytes=4096, min_cleanable_dirty_ratio=0.1, delete_retention_ms=50),
)
kv = manager.store("kv", config=config)
start = kv.get("commit", 0)
now[0] = BASE + STEP * (start + 1)  # the clock never steps back across restarts
ttl = manager.ttl_store(
    "ttl", ttl=TtlSettings(ttl_ms=TTL_MS, sweep_interval_ms=0), value_serde=LongSerde(),
    config=config,
)
ts = manager.timestamped_store("ts", value_serde=LongSerde(), config=config)
win = manager.window_store(
    "win", window_size_ms=10, retention_ms=2_000, segment_interval_ms=100,
    value_serde=LongSerde(), config=config,
)
for n in range(start + 1, start + 1_000_000):
    now[0] = BASE + STEP * n
    with manager.transaction():
        kv["commit"] = n
        ttl["last"] = n
        ttl[f"e{n % KEYS}"] = n
        ts.put("t", n, timestamp_ms=n)
        win.put("w", n, n * 10, timestamp_ms=n)
    print(n, flush=True)
"""


def _expected_ttl(n: int, clock_ms: int) -> dict[str, int]:
    """The TTL store's live values after commit ``n``, read at ``clock_ms`` (the model)."""
    latest: dict[str, int] = {}
    for m in range(1, n + 1):
        latest["last"] = m
        latest[f"e{m % KEYS}"] = m
    return {k: m for k, m in latest.items() if BASE + STEP * m > clock_ms - TTL_MS}


def _check(state_dir: Path, mode: str, clock_ms: int) -> int:
    """The commit number the reopened stores agree on (asserts one whole commit, nothing resurrected)."""
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    with StateManager(state_dir, lambda: clock_ms, config=NO_CLEANER) as manager:
        n = int(manager.store("kv", config=config).get("commit", 0))
        ttl = manager.ttl_store(
            "ttl", ttl=TtlSettings(ttl_ms=TTL_MS), value_serde=LongSerde(), config=config
        )
        ts = manager.timestamped_store("ts", value_serde=LongSerde(), config=config)
        win = open_window_store(manager, config)
        assert dict(ttl.items()) == _expected_ttl(n, clock_ms)
        for key in [f"e{k}" for k in range(KEYS)]:
            assert ttl.get(key) == _expected_ttl(n, clock_ms).get(key)
        if mode == "full":  # RocksDB was rebuilt: an expired value was applied as a delete
            assert len(ttl.inner) == len(_expected_ttl(n, clock_ms))
        if n == 0:
            assert ts.get("t") is None
            return 0
        assert ts.get("t") == n
        assert win.fetch_window("w", n * 10) == n
        assert win.stream_time_ms == n * 10
        return n


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_kill9_with_a_ttl_store_loses_nothing_and_resurrects_nothing(
    tmp_path: Path, mode: str
) -> None:
    for trial, state_dir, acked in kill9_trials(WRITER, tmp_path, mode, (40, 200)):
        # the child's clock reached at most commit acked + 2 (it writes one commit ahead of its print)
        clock_ms = BASE + STEP * (acked[-1] + 2)
        n = _check(state_dir, mode, clock_ms)
        assert n in (acked[-1], acked[-1] + 1), (trial, n, acked[-1])
