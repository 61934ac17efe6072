"""``get`` and ``scan`` decode the stores in time with the layout their metadata records."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from statestore import LongSerde, StateManager
from statestore.stores.time.window import Windowed
from tests.cli.helpers import run_cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _build(state_dir: Path) -> None:
    with StateManager(state_dir) as manager:
        clicks = manager.window_store(
            "clicks-per-minute",
            window_size_ms=60_000,
            retention_ms=3_600_000,
            value_serde=LongSerde(),
        )
        clicks.put("alice", 3, 1_700_000_040_000, timestamp_ms=1_700_000_041_234)
        clicks.put("bob", 1, 1_700_000_040_000, timestamp_ms=1_700_000_040_001)
        sessions = manager.session_store("visits", retention_ms=3_600_000)
        sessions.put(Windowed("alice", 10, 50), {"pages": 2})
        versions = manager.versioned_store("prices", history_retention_ms=3_600_000)
        versions.put("apple", 5, 100)
        versions.delete("apple", 200)
        manager.commit()


def test_get_matches_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "clicks-state"
    _build(state)
    page = DOC.read_text(encoding="utf-8")
    shown = re.search(r"\$ statestore get clicks-state clicks-per-minute alice\n(.*)\n", page)
    assert shown is not None
    result = run_cli(["get", str(state), "clicks-per-minute", "alice"], capsys)
    assert (result.status, result.out) == (0, shown.group(1) + "\n")


def test_scan_and_get_decode_every_store_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    _build(state)
    result = run_cli(["scan", str(state), "clicks-per-minute", "--json"], capsys)
    assert json.loads(result.out)["entries"] == [
        {
            "key": "alice",
            "window_start_ms": 1_700_000_040_000,
            "seqnum": 0,
            "timestamp_ms": 1_700_000_041_234,
            "value": 3,
        },
        {
            "key": "bob",
            "window_start_ms": 1_700_000_040_000,
            "seqnum": 0,
            "timestamp_ms": 1_700_000_040_001,
            "value": 1,
        },
    ]
    result = run_cli(["scan", str(state), "visits"], capsys)
    assert "alice start_ms=10 end_ms=50" in result.out
    result = run_cli(["get", str(state), "prices", "apple", "--json"], capsys)
    assert json.loads(result.out) == {
        "key": "apple",
        "found": True,
        "entries": [{"timestamp_ms": 100, "value": 5}, {"timestamp_ms": 200, "value": None}],
    }
    result = run_cli(["get", str(state), "prices", "pear"], capsys)
    assert result.status == 1
