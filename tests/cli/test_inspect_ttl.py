"""``inspect`` shows a TTL store's TTL and how many of its live keys have expired by now."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from statestore import StateManager, TtlSettings
from tests.cli.helpers import QUIET, run_cli

TTL_MS = 3_600_000


def test_inspect_counts_expired_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    now = int(time.time() * 1000)
    with StateManager(state, config=QUIET) as manager:
        store = manager.ttl_store(
            "sessions", ttl=TtlSettings(ttl_ms=TTL_MS, timestamp="record", sweep_interval_ms=10**12)
        )
        plain = manager.store("plain")
        for n in range(5):
            store.put(f"old{n}", n, timestamp_ms=now - TTL_MS - 1_000)  # expired at any later now
        for n in range(3):
            store.put(f"new{n}", n, timestamp_ms=now)  # live for an hour
        store.put("gone", None)
        plain["k"] = 1
        manager.commit()
    doc = json.loads(run_cli(["inspect", str(state), "--json"], capsys).out)
    stores = {s["name"]: s for s in doc["stores"]}
    assert stores["sessions"]["record_ttl_ms"] == TTL_MS
    part = stores["sessions"]["partitions"][0]
    assert (part["live_keys"], part["expired_keys"], part["tombstones"]) == (8, 5, 1)
    assert stores["plain"]["record_ttl_ms"] == 0
    assert stores["plain"]["partitions"][0]["expired_keys"] is None
    text = run_cli(["inspect", str(state)], capsys).out
    assert f"TTL {TTL_MS} ms, 5 of the live keys expired by now" in text
    assert text.count("TTL ") == 1
