"""``inspect`` counts data records and transaction markers apart (markers are never records)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statestore import StateManager
from tests.cli.helpers import QUIET, run_cli


def test_inspect_counts_markers_apart_from_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=QUIET) as manager:
        a, b = manager.store("a"), manager.store("b")
        for n in range(5):  # five transactions over two stores: a COMMIT marker each, per store
            a[f"k{n}"] = n
            b[f"k{n}"] = n
            b["shared"] = n
            manager.commit()
        a["alone"] = 1  # one partition: one plain batch, no marker
        manager.commit()
    doc = json.loads(run_cli(["inspect", str(state), "--json"], capsys).out)
    parts = {s["name"]: s["partitions"][0] for s in doc["stores"]}
    assert (parts["a"]["records"], parts["a"]["markers"]) == (6, 5)
    assert (parts["b"]["records"], parts["b"]["markers"]) == (10, 5)
    assert sum(s["records"] for s in parts["b"]["segments"]) == 10
    text = run_cli(["inspect", str(state)], capsys).out
    assert "markers" in text.splitlines()[2]
