"""The CLI uses each store's recorded settings (its metadata file), and reports a damaged one."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from statestore import StateManager
from statestore.config import StoreConfig
from statestore.stores.metadata import metadata_path, read_metadata
from tests.cli.helpers import QUIET, SMALL_LOG, run_cli


def make_state(state: Path, *, mode: str = "full") -> None:
    config = attrs.evolve(SMALL_LOG, delete_retention_ms=0)  # recorded, never given to the CLI
    with StateManager(state, config=QUIET) as manager:
        store = manager.store(
            "kv",
            partitions=3,
            log_config=config,
            config=StoreConfig(restore_mode=mode),  # type: ignore[arg-type]
        )
        for i in range(60):
            store[f"k{i}"] = i
        store.commit()
        for i in range(0, 60, 2):
            del store[f"k{i}"]
        store.commit()


def test_compact_uses_the_recorded_log_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """delete_retention_ms=0 is recorded: two passes remove every tombstone without
    --delete-retention-ms (with LogConfig's defaults, 24 h, none would go)."""
    state = tmp_path / "state"
    make_state(state)
    args = ["compact", str(state), "--roll", "--json"]
    first = json.loads(run_cli(args, capsys).out)["partitions"]
    second = json.loads(run_cli(args, capsys).out)["partitions"]
    removed = sum(d.get("tombstones_removed", 0) for d in first + second)
    assert removed == 30
    with StateManager(state, config=QUIET) as manager:
        assert dict(manager.store("kv").items()) == {f"k{i}": i for i in range(1, 60, 2)}


def test_get_and_scan_use_the_recorded_partitions_and_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    make_state(state, mode="incremental")
    result = run_cli(["get", str(state), "kv", "k3"], capsys)
    assert result.status == 0, result.err
    assert result.out.strip() == "3"
    result = run_cli(["scan", str(state), "kv", "--keys-only", "--json"], capsys)
    assert len(json.loads(result.out)["keys"]) == 30
    assert read_metadata(state, "kv").restore_mode == "incremental"  # type: ignore[union-attr]
    assert sorted(p.name for p in state.glob("kv-changelog-*")) == [
        f"kv-changelog-{p}" for p in range(3)
    ]


def test_a_damaged_metadata_file_is_a_verify_error_and_refuses_the_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    make_state(state)
    path = metadata_path(state, "kv")
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    result = run_cli(["verify", str(state), "--json"], capsys)
    assert result.status == 1
    doc = json.loads(result.out)
    store_partitions = [p for p in doc["partitions"] if "kv-changelog-" in p["directory"]]
    assert len(store_partitions) == 3
    assert doc["errors"] == 3  # each partition's open would be refused (not the coordinator's)
    assert all(p["open"]["error"] == "CorruptStoreMetadataError" for p in store_partitions)
    for command in (["get", str(state), "kv", "k1"], ["compact", str(state)]):
        result = run_cli(command, capsys)
        assert result.status != 0
        assert str(path) in result.err
    assert path.read_bytes() == bytes(data)


def test_inspect_refuses_partition_directories_the_metadata_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    make_state(state)
    (state / "kv-changelog-3").mkdir()
    result = run_cli(["inspect", str(state)], capsys)
    assert result.status != 0
    assert "metadata records 3" in result.err


def test_metadata_shows_and_migrates_only_with_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    make_state(state)
    shown = json.loads(run_cli(["metadata", str(state), "--json"], capsys).out)
    assert shown["stores"][0]["recorded"]["partitions"] == 3
    assert "log_config.segment_bytes" in run_cli(["metadata", str(state)], capsys).out
    path = metadata_path(state, "kv")
    before = path.read_bytes()
    args = ["metadata", str(state), "--store", "kv", "--set", "segment_bytes=8192"]
    result = run_cli([*args, "--value-serde", "msgpack-v2"], capsys)
    assert result.status == 0
    assert "nothing was changed" in result.out
    assert path.read_bytes() == before
    result = run_cli([*args, "--apply", "--json"], capsys)
    assert json.loads(result.out)["changes"] == [
        {"setting": "log_config.segment_bytes", "from": 2048, "to": 8192}
    ]
    assert read_metadata(state, "kv").log_config.segment_bytes == 8192  # type: ignore[union-attr]
    bad = run_cli(["metadata", str(state), "--store", "kv", "--set", "segment_bytes=x"], capsys)
    assert bad.status == 2
    bad = run_cli(["metadata", str(state), "--store", "kv", "--set", "nope=1"], capsys)
    assert bad.status == 2
    with StateManager(state, config=QUIET):
        locked = run_cli([*args[:-1], "segment_bytes=4096", "--apply"], capsys)
    assert locked.status == 1
    assert "lock" in locked.err
