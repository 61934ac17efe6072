"""``get`` and ``scan`` of a TTL store show no expired entry, as a read does: opening the
store offline replays its changelog from at or below every record that may expire (the
restore's expiry rule), so an expired value is applied as a delete before anything is read."""

from __future__ import annotations

import itertools
import json
import shutil
import time
from pathlib import Path

import pytest

from statestore import StateManager, TtlSettings
from tests.cli.helpers import QUIET, run_cli

TTL_MS = 3_600_000
_copies = itertools.count()


def copy(state: Path) -> str:
    """A copy of the state directory: opening a TTL store may sweep it, and each check here
    must see the expired entries still in RocksDB."""
    target = state.parent / f"copy{next(_copies)}"
    shutil.copytree(state, target)
    return str(target)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A TTL store written two TTLs ago: two keys stamped then (expired by the CLI's clock,
    though still in RocksDB) and two stamped a minute ahead of this machine's clock."""
    state = tmp_path / "state"
    then = int(time.time() * 1000) - 2 * TTL_MS  # the service's clock, two TTLs ago
    with StateManager(state, config=QUIET, clock=lambda: then) as manager:
        store = manager.ttl_store(
            "sessions", ttl=TtlSettings(ttl_ms=TTL_MS, timestamp="record", sweep_interval_ms=10**12)
        )
        for key in ("a-old", "b-old"):
            store.put(key, "stale", timestamp_ms=then)
        for key in ("a-new", "b-new"):
            store.put(key, "fresh", timestamp_ms=then + 2 * TTL_MS + 60_000)
        manager.commit()
    return state


def test_get_hides_an_expired_value(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gone = run_cli(["get", copy(state), "sessions", "a-old", "--json"], capsys)
    assert gone.status == 1
    assert json.loads(gone.out) == {"key": "a-old", "found": False, "entries": []}
    live = json.loads(run_cli(["get", copy(state), "sessions", "a-new", "--json"], capsys).out)
    assert [e["value"] for e in live["entries"]] == ["fresh"]


def test_scan_hides_expired_entries(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(run_cli(["scan", copy(state), "sessions", "--json"], capsys).out)
    assert [e["key"] for e in doc["entries"]] == ["a-new", "b-new"]
    limited = run_cli(["scan", copy(state), "sessions", "--limit", "1", "--keys-only"], capsys)
    assert limited.out.splitlines()[0].startswith("a-new")
