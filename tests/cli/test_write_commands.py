"""``compact`` and ``restore``: they change files, never the state a store holds."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from statestore import StateManager
from tests.cli.helpers import DELETED, QUIET, USERS, live_users, run_cli


def users_state(state: Path) -> dict[str, object]:
    with StateManager(state, config=QUIET) as manager:
        return dict(manager.store("users").items())


def inspect(state: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    doc = json.loads(run_cli(["inspect", str(state), "--json"], capsys).out)
    return {s["name"]: s["partitions"][0] for s in doc["stores"]}


def test_compact_shrinks_the_log_and_keeps_the_state(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = inspect(state, capsys)["users"]
    result = run_cli(["compact", str(state)], capsys)
    assert result.status == 0, result.err
    assert "users-changelog-0" in result.out
    assert "cleaned" in result.out
    after = inspect(state, capsys)["users"]
    assert after["size_bytes"] < before["size_bytes"]
    assert after["records"] < before["records"]
    assert after["live_keys"] == USERS - len(DELETED)
    assert users_state(state) == live_users()
    assert run_cli(["verify", str(state)], capsys).status == 0


def test_compact_roll_and_zero_delete_retention_remove_tombstones_in_two_passes(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "compact",
        str(state),
        "--store",
        "users",
        "--roll",
        "--delete-retention-ms",
        "0",
        "--json",
    ]
    first = json.loads(run_cli(args, capsys).out)["partitions"][0]
    assert first["rolled"] is True
    assert first["cleaned"] is True
    second = json.loads(run_cli(args, capsys).out)["partitions"][0]
    assert first.get("tombstones_removed", 0) + second.get("tombstones_removed", 0) == len(DELETED)
    figures = inspect(state, capsys)["users"]
    assert figures["tombstones"] == 0
    assert figures["records"] == USERS - len(DELETED)
    assert users_state(state) == live_users()


def test_compact_says_when_there_is_nothing_to_clean(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["compact", str(state), "--store", "counters"], capsys)
    assert result.status == 0
    assert "nothing to clean" in result.out
    assert "--roll" in result.out


def test_compact_of_a_single_partition_dir(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(["compact", str(state / "users-changelog-0"), "--json"], capsys)
    doc = json.loads(result.out)
    assert [p["partition"] for p in doc["partitions"]] == ["users-changelog-0"]
    assert doc["partitions"][0]["records_removed"] > 0


def test_compact_refuses_a_state_dir_a_service_owns(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StateManager(state, config=QUIET):
        result = run_cli(["compact", str(state)], capsys)
    assert result.status == 1
    assert result.err == (
        f"statestore: error: {state} is locked by pid {os.getpid()}: a service owns it; stop it "
        "first (inspect, dump, verify, top and metadata without --apply work while it runs)\n"
    )


def test_restore_rebuilds_a_deleted_rocksdb_from_the_changelog(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.rmtree(state / "users-rocksdb-0")
    result = run_cli(["restore", str(state), "--store", "users", "--json"], capsys)
    assert result.status == 0, result.err
    report = json.loads(result.out)
    (doc,) = report["restored"]
    assert list(report["approximate_entries"]) == ["users"]
    assert doc["rebuilt"] is True
    assert doc["records_restored"] == USERS * 5 + len(DELETED)
    assert doc["end_offset"] == USERS * 5 + len(DELETED)
    assert (state / "users-rocksdb-0").is_dir()
    assert users_state(state) == live_users()


def scanned(state: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """What ``scan`` reads: it keeps a RocksDB whose applied offset fits the log (incremental)."""
    doc = json.loads(run_cli(["scan", str(state), "users", "--json"], capsys).out)
    return {entry["key"]: entry["value"] for entry in doc["entries"]}


def test_restore_replaces_a_rocksdb_that_disagrees_with_the_changelog(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = state.parent / "other"
    with StateManager(other, config=QUIET) as manager:
        manager.store("users").put("intruder", 1)
        manager.commit()
    shutil.rmtree(state / "users-rocksdb-0")
    shutil.copytree(other / "users-rocksdb-0", state / "users-rocksdb-0")
    # The store records restore_mode=full, which the CLI uses: the foreign RocksDB is never read.
    assert "intruder" not in scanned(state, capsys)
    result = run_cli(["restore", str(state)], capsys)
    assert result.status == 0
    assert "restore: rebuilt RocksDB of 2 store(s)" in result.out
    assert scanned(state, capsys) == live_users()


def test_restore_of_a_locked_state_dir_fails_clearly(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StateManager(state, config=QUIET):
        result = run_cli(["restore", str(state)], capsys)
    assert result.status == 1
    assert "is locked by pid" in result.err


def test_a_partitioned_store_is_inspected_restored_and_read_per_partition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=QUIET) as manager:
        sharded = manager.store("sharded", partitions=3)
        for i in range(60):
            sharded.put(f"k{i:02d}", i)
        manager.commit()
    doc = json.loads(run_cli(["inspect", str(state), "--json"], capsys).out)
    partitions = doc["stores"][0]["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    assert sum(p["live_keys"] for p in partitions) == 60
    assert all(p["live_keys"] > 0 for p in partitions)

    for number in range(3):
        shutil.rmtree(state / f"sharded-rocksdb-{number}")
    restored = json.loads(run_cli(["restore", str(state), "--json"], capsys).out)["restored"]
    assert [r["partition"] for r in restored] == [0, 1, 2]
    assert sum(r["records_restored"] for r in restored) == 60

    scan = json.loads(run_cli(["scan", str(state), "sharded", "--json"], capsys).out)
    assert [(e["key"], e["value"]) for e in scan["entries"]] == [
        (f"k{i:02d}", i) for i in range(60)
    ]
    assert run_cli(["get", str(state), "sharded", "k42"], capsys).out == "42\n"
