"""``inspect``, ``dump``, ``get`` and ``scan`` against real state directories."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from changelog.log.log import Log
from statestore import StateManager
from statestore.cli import main
from tests.cli.helpers import DELETED, QUIET, ROUNDS, USERS, live_users, run_cli, user

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- inspect


def test_inspect_json_matches_the_logs_own_figures(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["inspect", str(state), "--json"], capsys)
    assert result.status == 0, result.err
    doc = json.loads(result.out)
    assert doc["locked_by"] is None
    stores = {s["name"]: s for s in doc["stores"]}
    assert sorted(stores) == ["counters", "users"]
    users = stores["users"]["partitions"][0]
    assert users["live_keys"] == USERS - len(DELETED)
    assert users["tombstones"] == len(DELETED)
    assert users["records"] == USERS * ROUNDS + len(DELETED)
    assert users["clean_shutdown"] is True
    assert users["invalid_bytes"] == 0
    assert users["rocksdb_bytes"] > 0
    with Log.open(state / "users-changelog-0") as log:
        assert users["log_start_offset"] == log.log_start_offset
        assert users["log_end_offset"] == log.log_end_offset
        assert [s["base_offset"] for s in users["segments"]] == [
            s.base_offset for s in log.segments
        ]
        assert users["size_bytes"] == log.size_bytes
    # Never cleaned: every non-active segment is dirty.
    assert len(users["segments"]) > 1
    assert users["dirty_ratio"] == 1.0
    assert stores["counters"]["partitions"][0]["live_keys"] == 7


def test_inspect_table_names_stores_segments_and_the_active_one(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["inspect", str(state)], capsys)
    assert result.status == 0
    assert "not in use" in result.out
    header = next(line for line in result.out.splitlines() if line.startswith("store"))
    for column in ["log start", "log end", "segments", "size", "dirty ratio", "live keys"]:
        assert column in header
    assert re.search(r"^users\s+0\s+0\s+160\s+\d+ ", result.out, re.MULTILINE)
    assert "users-changelog-0: first dirty offset 0" in result.out
    assert result.out.count("active") == 2


def test_inspect_no_keys_skips_the_count(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(["inspect", str(state), "--store", "users", "--no-keys", "--json"], capsys)
    doc = json.loads(result.out)
    assert [s["name"] for s in doc["stores"]] == ["users"]
    assert doc["stores"][0]["partitions"][0]["live_keys"] is None


def test_inspect_works_next_to_a_running_owner_and_names_it(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StateManager(state, config=QUIET):
        result = run_cli(["inspect", str(state)], capsys)
    assert result.status == 0
    assert f"in use by pid {os.getpid()}" in result.out


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda tmp: tmp / "missing", "no such directory"),
        (lambda tmp: tmp, "not a state directory"),
    ],
)
def test_inspect_usage_errors_exit_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, fragment: str
) -> None:
    assert callable(make)
    result = run_cli(["inspect", str(make(tmp_path))], capsys)
    assert result.status == 2
    assert result.err.startswith("statestore: error: ")
    assert fragment in result.err


def test_inspect_of_a_partition_dir_hints_at_its_parent(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["inspect", str(state / "users-changelog-0")], capsys)
    assert result.status == 2
    assert "give its parent" in result.err


def test_unknown_store_lists_the_known_ones(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["inspect", str(state), "--store", "nope"], capsys)
    assert result.status == 2
    assert "stores: counters, users" in result.err


# --------------------------------------------------------------------------- dump


def test_dump_prints_batches_like_kafka_dump_log(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["dump", str(state / "users-changelog-0"), "--shallow"], capsys)
    assert result.status == 0
    lines = result.out.splitlines()
    assert lines[0] == f"Dumping {state / 'users-changelog-0' / '00000000000000000000.log'}"
    assert lines[1] == "Log starting offset: 0"
    assert re.fullmatch(
        r"baseOffset: 0 lastOffset: 29 count: 30 baseSequence: -1 lastSequence: -1 "
        r"producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false "
        r"isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: \d+ "
        r"size: \d+ magic: 2 compresscodec: none crc: \d+ isvalid: true",
        lines[2],
    )
    assert not any(line.startswith("| offset") for line in lines)  # --shallow: no records
    with Log.open(state / "users-changelog-0") as log:
        batches = list(log.read_batches(0))
    assert sum(1 for line in lines if line.startswith("baseOffset:")) == len(batches)
    assert sum(1 for line in lines if line.startswith("Dumping")) == 9  # 3 segments x 3 files


def test_dump_print_data_shows_keys_payloads_and_tombstones(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["dump", str(state / "users-changelog-0"), "--print-data"], capsys)
    records = [line for line in result.out.splitlines() if line.startswith("| offset:")]
    assert len(records) == USERS * ROUNDS + len(DELETED)
    assert re.fullmatch(
        r"\| offset: 0 CreateTime: \d+ keySize: 8 valueSize: \d+ sequence: -1 headerKeys: \[\] "
        r'key: user-000 payload: \{"round": 0, "i": 0\}',
        records[0],
    )
    tombstone = records[-1]
    assert "valueSize: -1" in tombstone
    assert tombstone.endswith(f"key: {user(27)}")
    assert "payload" not in tombstone


def test_dump_single_files_and_index_entries(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = state / "users-changelog-0"
    log_only = run_cli(["dump", str(partition / "00000000000000000060.log")], capsys)
    assert "Log starting offset: 60" in log_only.out
    assert log_only.out.count("Dumping") == 1
    index = run_cli(["dump", str(partition / "00000000000000000060.index")], capsys)
    entries = re.findall(r"^offset: (\d+) position: (\d+)$", index.out, re.MULTILINE)
    assert entries
    assert all(int(offset) >= 60 for offset, _ in entries)
    times = run_cli(["dump", str(partition / "00000000000000000060.timeindex")], capsys)
    assert re.search(r"^timestamp: \d+ offset: \d+$", times.out, re.MULTILINE)


def test_dump_int_keys_and_json(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(
        [
            "dump",
            str(state / "counters-changelog-0"),
            "--print-data",
            "--key-format",
            "int",
            "--json",
        ],
        capsys,
    )
    doc = json.loads(result.out)
    log_doc = next(f for f in doc["files"] if f["kind"] == "log")
    records = [r for batch in log_doc["batches"] for r in batch["records"]]
    assert [(r["key"], r["value"]) for r in records] == [(i, i * 10) for i in range(-3, 4)]
    assert log_doc["invalid_bytes"] == 0
    assert all(batch["crc_valid"] for batch in log_doc["batches"])


def test_dump_reports_trailing_invalid_bytes(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = state / "counters-changelog-0" / "00000000000000000000.log"
    with log.open("ab") as f:
        f.write(b"\x00\x07\x00\x00\x00")
    result = run_cli(["dump", str(log)], capsys)
    assert result.status == 0
    assert "Found 5 invalid bytes at the end of 00000000000000000000.log" in result.out


def test_a_running_logs_preallocated_zeros_are_not_called_invalid(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store in use (or after a crash) has zeros after its active segment's last batch."""
    with StateManager(state, config=QUIET) as manager:
        manager.store("counters", key_type=int).put(100, 1000)
        manager.commit()
        log = state / "counters-changelog-0" / "00000000000000000000.log"
        file_bytes = log.stat().st_size
        inspected = json.loads(run_cli(["inspect", str(state), "--json"], capsys).out)
        dumped = run_cli(["dump", str(log)], capsys)
        dumped_json = json.loads(run_cli(["dump", str(log), "--json"], capsys).out)
    counters = next(s for s in inspected["stores"] if s["name"] == "counters")["partitions"][0]
    assert counters["invalid_bytes"] == 0
    assert counters["preallocated_bytes"] > 0
    assert file_bytes > counters["preallocated_bytes"]
    assert "invalid bytes" not in dumped.out
    assert "zero bytes after the last batch of 00000000000000000000.log" in dumped.out
    log_doc = next(f for f in dumped_json["files"] if f["kind"] == "log")
    assert log_doc["invalid_bytes"] == 0
    assert log_doc["zero_bytes"] == counters["preallocated_bytes"]
    assert log_doc["error"] is None


@pytest.mark.parametrize("name", ["missing.log", "recovery-point-offset-checkpoint"])
def test_dump_rejects_what_is_not_a_segment_file(
    state: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    result = run_cli(["dump", str(state / "users-changelog-0" / name)], capsys)
    assert result.status == 2
    assert "statestore: error:" in result.err


# --------------------------------------------------------------------------- get / scan


def test_get_prints_the_value(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(["get", str(state), "users", user(4)], capsys)
    assert result.status == 0, result.err
    assert json.loads(result.out) == {"round": ROUNDS - 1, "i": 4}
    result = run_cli(["get", str(state), "users", user(4), "--json"], capsys)
    assert json.loads(result.out) == {"key": user(4), "found": True, "value": {"round": 4, "i": 4}}


def test_get_of_a_deleted_key_exits_1(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(["get", str(state), "users", user(3)], capsys)
    assert result.status == 1
    assert result.out == ""
    assert result.err == f"statestore: key '{user(3)}' not found in store 'users'\n"


def test_get_int_keys_and_hex_values(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(["get", str(state), "counters", "--key-format", "int", "--", "-3"], capsys)
    assert (result.status, result.out) == (0, "-30\n")
    raw = run_cli(
        ["get", str(state), "counters", "2", "--key-format", "int", "--value-format", "hex"], capsys
    )
    assert raw.out == "0x14\n"  # msgpack positive fixint 20


def test_get_rejects_a_bad_key_for_its_format(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["get", str(state), "counters", "ten", "--key-format", "int"], capsys)
    assert result.status == 2
    assert "not an integer" in result.err


def test_scan_all_prefix_range_reverse_limit(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    everything = json.loads(run_cli(["scan", str(state), "users", "--json"], capsys).out)
    assert {e["key"]: e["value"] for e in everything["entries"]} == live_users()
    assert [e["key"] for e in everything["entries"]] == sorted(live_users())

    prefix = run_cli(["scan", str(state), "users", "--prefix", "user-00", "--keys-only"], capsys)
    assert prefix.out.splitlines()[:-1] == [user(i) for i in (1, 2, 4, 5, 7, 8)]

    ranged = json.loads(
        run_cli(
            [
                "scan",
                str(state),
                "users",
                "--from",
                user(10),
                "--to",
                user(14),
                "--keys-only",
                "--json",
            ],
            capsys,
        ).out
    )
    assert ranged["keys"] == [user(10), user(11), user(13)]

    reverse = run_cli(
        ["scan", str(state), "users", "--reverse", "--limit", "2", "--keys-only"], capsys
    )
    assert reverse.out.splitlines() == [user(29), user(28), "(2 entries)"]

    table = run_cli(["scan", str(state), "counters", "--key-format", "int"], capsys)
    assert re.search(r"^-3\s+-30$", table.out, re.MULTILINE)
    assert table.out.endswith("(7 entries)\n")


def test_scan_prefix_and_range_together_is_a_usage_error(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["scan", str(state), "users", "--prefix", "a", "--from", "b"], capsys)
    assert result.status == 2
    assert "not both" in result.err


def test_get_on_a_locked_state_dir_fails_clearly(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StateManager(state, config=QUIET):
        result = run_cli(["get", str(state), "users", user(1)], capsys)
    assert result.status == 1
    assert f"locked by pid {os.getpid()}" in result.err
    assert "stop it first" in result.err


# --------------------------------------------------------------------------- the program


def test_python_dash_m_statestore_runs_and_errors_without_traceback(tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "statestore", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0
    for command in ["inspect", "dump", "verify", "compact", "restore", "get", "scan"]:
        assert command in ok.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "statestore", "verify", str(tmp_path / "nope")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2
    assert missing.stderr == f"statestore: error: {tmp_path / 'nope'}: no such file or directory\n"


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli([], capsys)
    assert result.status == 2
    assert "COMMAND" in result.err


def test_the_console_script_points_at_main() -> None:
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "statestore"]
    assert script.value == "statestore.cli:main"
    assert script.load() is main


def test_dump_of_a_state_dir_dumps_every_partition(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(["dump", str(state)], capsys)
    assert result.status == 0
    dumped = re.findall(r"^Dumping (.+)$", result.out, re.MULTILINE)
    assert {Path(p).parent.name for p in dumped} == {
        "__transaction_state-0",  # the transaction coordinator's log is a partition too
        "counters-changelog-0",
        "users-changelog-0",
    }
    assert len(dumped) == 3 + 3 + 9


def test_dump_marks_a_batch_failing_its_crc_invalid(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = state / "users-changelog-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's records
    log.write_bytes(bytes(data))
    result = run_cli(["dump", str(log)], capsys)
    assert result.status == 0
    verdicts = re.findall(r"isvalid: (\w+)$", result.out, re.MULTILINE)
    assert verdicts == ["false", "true"]
