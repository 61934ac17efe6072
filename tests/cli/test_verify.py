"""``statestore verify`` on clean and corrupted state directories."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from changelog.errors import CorruptRecordError
from changelog.log.log import Log
from changelog.record.batch import decode_header
from statestore import StateManager
from statestore.errors import StoreLayoutError
from tests.cli.helpers import QUIET, run_cli

PARTITION = "users-changelog-0"
FIRST_LOG = "00000000000000000000.log"


def batch_positions(log: Path) -> list[int]:
    data = log.read_bytes()
    positions, position = [], 0
    while position < len(data):
        positions.append(position)
        position += decode_header(data, position, path=log).size_in_bytes
    return positions


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_clean_state_dir_verifies(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 0, result.out
    # the two stores' changelogs and the transaction coordinator's log
    assert "verify: OK: 3 partitions, 0 errors, 0 warnings" in result.out
    assert "ERROR" not in result.out


def test_a_flipped_byte_in_a_closed_segment_fails_naming_file_and_batch_position(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = state / PARTITION / FIRST_LOG
    second_batch = batch_positions(log)[1]
    flip_byte(log, second_batch + 100)  # inside the records: only the CRC can tell
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 1
    assert f"ERROR {log} at position {second_batch}: " in result.out
    assert "fails its CRC-32C check" in result.out
    assert "the next open succeeds but reading offsets from" in result.out
    assert "verify: FAILED" in result.out

    doc = json.loads(run_cli(["verify", str(state / PARTITION), "--json"], capsys).out)
    assert doc["ok"] is False
    (problem,) = doc["partitions"][0]["problems"]
    assert (problem["severity"], problem["path"], problem["position"]) == (
        "error",
        str(log),
        second_batch,
    )


def test_a_broken_frame_in_a_closed_segment_is_an_error(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = state / PARTITION / FIRST_LOG
    second_batch = batch_positions(log)[1]
    flip_byte(log, second_batch + 16)  # the magic byte
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 1
    assert f"ERROR {log} at position {second_batch}: the next open refuses" in result.out
    assert "unknown magic byte" in result.out


def crash_open(state: Path) -> None:
    """Open every store and abandon the manager as ``kill -9`` would (no clean-shutdown marker)."""
    manager = StateManager(state, config=QUIET)
    manager.store("users")
    manager.store("counters", key_type=int)
    manager.crash()


def append_torn_batch(state: Path) -> tuple[Path, int]:
    """Append the first 40 bytes of a real batch to the active segment: a crash mid-append."""
    partition = state / PARTITION
    active = sorted(partition.glob("*.log"))[-1]
    size = active.stat().st_size
    with active.open("ab") as f:
        f.write((partition / FIRST_LOG).read_bytes()[:40])
    return active, size


def test_a_torn_tail_after_a_crash_is_a_warning_and_the_next_open_cuts_it(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crash_open(state)
    active, size = append_torn_batch(state)
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 0, result.out
    assert (
        f"WARNING {active} at position {size}: the next open will truncate (pass L8)" in result.out
    )
    assert "torn tail of 40 bytes" in result.out
    assert run_cli(["verify", "--strict", str(state)], capsys).status == 1
    # What verify announced is what the loader does: the tail is cut, nothing else changes.
    assert run_cli(["scan", str(state), "users", "--keys-only", "--json"], capsys).status == 0
    assert active.stat().st_size == size
    assert run_cli(["verify", "--strict", str(state)], capsys).status == 0


def test_a_torn_tail_in_a_cleanly_closed_partition_is_an_error_and_open_fails(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    active, size = append_torn_batch(state)
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 1
    assert f"ERROR {active} at position {size}: the next open refuses" in result.out
    assert "closed cleanly" in result.out
    opened = run_cli(["get", str(state), "users", "user-001"], capsys)
    assert opened.status == 1
    assert f"{active} at position {size}" in opened.err


def test_a_bad_batch_below_the_recovery_point_of_the_active_segment_is_refused(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kafka truncates here (and so lost 113 KB of acknowledged commits in the issue); the
    batch was flushed, so the next open refuses and changes nothing, as verify says."""
    crash_open(state)
    active = sorted((state / PARTITION).glob("*.log"))[-1]
    second_batch = batch_positions(active)[1]
    flip_byte(active, second_batch + 100)
    before = active.read_bytes()
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 1
    assert f"ERROR {active} at position {second_batch}: the next open refuses" in result.out
    assert "below the recovery point" in result.out
    with pytest.raises(CorruptRecordError) as info:
        Log.open(state / PARTITION)
    assert (info.value.path, info.value.position) == (active, second_batch)
    assert active.read_bytes() == before


def test_a_torn_batch_in_a_closed_segment_is_an_error(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = state / PARTITION / FIRST_LOG
    last_batch = batch_positions(log)[-1]
    with log.open("r+b") as f:
        f.truncate(log.stat().st_size - 10)
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 1
    assert f"ERROR {log} at position {last_batch}: the next open refuses" in result.out
    assert "torn batch" in result.out


def test_a_bad_index_entry_of_a_closed_segment_is_a_warning_and_rebuilt(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = state / PARTITION / "00000000000000000000.index"
    data = bytearray(index.read_bytes())
    assert len(data) >= 8
    struct.pack_into(">ii", data, len(data) - 8, 5, 77)  # position 77 is inside a batch
    index.write_bytes(bytes(data))
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 0, result.out
    assert f"WARNING {state / PARTITION / FIRST_LOG}: the next open will rebuild indexes" in (
        result.out
    )
    assert run_cli(["verify", "--strict", str(state)], capsys).status == 1


def test_a_missing_index_is_a_warning(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = state / PARTITION / "00000000000000000000.timeindex"
    index.unlink()
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 0
    assert "its .timeindex file is missing" in result.out


def test_a_garbage_checkpoint_is_an_error(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = state / PARTITION / "recovery-point-offset-checkpoint"
    checkpoint.write_text("0\n1\nnot a checkpoint line\n")
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 1
    assert f"ERROR {checkpoint} at position 4: the next open refuses" in result.out
    assert "not a 'topic partition offset' line" in result.out


def test_leftover_swap_files_are_reported_as_info(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leftover = state / PARTITION / "00000000000000000000.log.cleaned"
    leftover.write_bytes(b"")
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 0
    assert f"INFO {leftover}: the next open will delete (pass L3)" in result.out


def test_verify_of_something_without_partitions_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["verify", str(tmp_path)], capsys)
    assert result.status == 2
    assert "no changelog partitions found" in result.err


def test_verify_next_to_a_running_owner_finds_nothing_wrong(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StateManager(state, config=QUIET) as manager:
        users = manager.store("users")
        for i in range(200):
            users.put(f"new-{i:03d}", {"i": i})
            if i % 20 == 19:
                manager.commit()
        result = run_cli(["verify", "--strict", str(state)], capsys)
        inspected = run_cli(["inspect", str(state)], capsys)
    assert result.status == 0, result.out
    assert inspected.status == 0
    assert "in use by pid" in inspected.out


def test_a_deleted_changelog_directory_is_an_error_as_the_open_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """verify predicts the store open: a recorded partition directory that is gone is refused."""
    state = tmp_path / "state"
    with StateManager(state, config=QUIET) as manager:
        store = manager.store("kv", partitions=2)
        for i in range(40):
            store[f"k{i}"] = i
        manager.commit()
    shutil.rmtree(state / "kv-changelog-1")
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 1, result.out
    assert "kv-changelog-1: store 'kv'" in result.out
    assert "StoreLayoutError" in result.out
    doc = json.loads(run_cli(["verify", "--json", str(state)], capsys).out)
    missing = [p for p in doc["partitions"] if p["directory"].endswith("kv-changelog-1")]
    assert missing and missing[0]["open"]["refused"] is True
    assert missing[0]["open"]["error"] == "StoreLayoutError"
    with StateManager(state, config=QUIET) as manager, pytest.raises(StoreLayoutError):
        manager.store("kv")
    # The partition alone still verifies (it is whole); only the store's layout is wrong.
    assert run_cli(["verify", str(state / "kv-changelog-0")], capsys).status == 0
