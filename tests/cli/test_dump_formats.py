"""``statestore dump`` tells the truth: codecs, control records, headers, leftovers, text values."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from changelog.config import LogConfig
from changelog.log.log import Log
from changelog.record.batch import encode_records
from changelog.record.body import Record
from statestore.cli.output import decode_for_display
from tests.cli.helpers import run_cli

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TS = 1_700_000_000_000


def write_mixed(directory: Path) -> None:
    for codec in CODECS:
        with Log.open(directory, LogConfig(compression_type=codec)) as log:
            log.append(
                [(b"k-" + codec.encode(), b"text value"), (b"z", b"z"), (b"gone", None)],
                timestamp_ms=TS,
                headers=[(("a", b"1"), ("b", None)), (), ()],
            )


def test_dump_defaults_to_deep_iteration_with_data_and_real_codecs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = tmp_path / "t-0"
    write_mixed(partition)
    result = run_cli(["dump", str(partition / "00000000000000000000.log")], capsys)
    assert result.status == 0
    lines = result.out.splitlines()
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert [re.search(r"compresscodec: (\w+)", b).group(1) for b in batches] == CODECS  # type: ignore[union-attr]
    assert all("isvalid: true" in b for b in batches)
    records = [line for line in lines if line.startswith("| offset:")]
    assert len(records) == 15
    assert records[0] == (
        f"| offset: 0 CreateTime: {TS} keySize: 6 valueSize: 10 sequence: -1 "
        "headerKeys: [a,b] key: k-none payload: text value"
    )
    assert records[1].endswith("headerKeys: [] key: z payload: z")  # text, not msgpack 122
    assert records[2].endswith("headerKeys: [] key: gone")  # a tombstone: no payload


def test_dump_shallow_and_no_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partition = tmp_path / "t-0"
    write_mixed(partition)
    shallow = run_cli(["dump", "--shallow", str(partition)], capsys).out
    assert not any(line.startswith("| ") for line in shallow.splitlines())
    no_data = run_cli(["dump", "--no-data", str(partition)], capsys).out
    records = [line for line in no_data.splitlines() if line.startswith("| ")]
    assert len(records) == 15 and not any("key:" in line for line in records)


def test_dump_prints_control_records_as_kafka(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = tmp_path / "t-0"
    with Log.open(partition, LogConfig()) as log:
        log.append([(b"a", b"1")], timestamp_ms=TS)
    marker = Record(1, TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", ())
    control = encode_records(
        [marker],
        base_offset=1,
        last_offset_delta=0,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
        is_control=True,
    )
    with (partition / "00000000000000000000.log").open("ab") as f:
        f.write(control)
    out = run_cli(["dump", str(partition / "00000000000000000000.log")], capsys).out
    lines = out.splitlines()
    assert "isTransactional: true isControl: true" in lines[-2]
    assert lines[-1] == (
        f"| offset: 1 CreateTime: {TS} keySize: 4 valueSize: 6 sequence: 0 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 5"
    )


def test_dump_skips_protocol_leftovers_in_a_directory_and_labels_a_named_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = tmp_path / "t-0"
    write_mixed(partition)
    log_file = partition / "00000000000000000000.log"
    for suffix in (".deleted", ".cleaned", ".swap"):
        shutil.copy(log_file, partition / ("00000000000000000099.log" + suffix))
    out = run_cli(["dump", str(partition)], capsys).out
    assert "00000000000000000099" not in out
    assert sum(line.startswith("| offset:") for line in out.splitlines()) == 15
    named = run_cli(["dump", str(partition / "00000000000000000099.log.deleted")], capsys)
    assert named.status == 0
    assert "(a .deleted file: a leftover" in named.out.splitlines()[1]


def test_inspect_and_verify_are_right_about_compressed_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = tmp_path / "t-0"
    write_mixed(partition)
    verify = run_cli(["verify", str(partition)], capsys)
    assert verify.status == 0, verify.out + verify.err
    assert "truncate" not in verify.out and "unsupported" not in verify.out.lower()


def test_auto_format_elsewhere_still_prefers_msgpack() -> None:
    assert decode_for_display(b"z", "auto") == 122  # get/scan of a msgpack store: unchanged


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_inspect_counts_the_records_of_a_compressed_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], codec: str
) -> None:
    import json  # noqa: PLC0415

    from statestore import StateManager  # noqa: PLC0415
    from tests.cli.helpers import QUIET  # noqa: PLC0415

    state = tmp_path / "state"
    config = LogConfig(segment_bytes=2048, compression_type=codec)
    with StateManager(state, config=QUIET, log_config=config) as manager:
        users = manager.store("users")
        for round_number in range(3):
            for i in range(40):
                users.put(f"user-{i:03d}", {"round": round_number})
            manager.commit()
        users.delete("user-000")
        manager.commit()
    doc = json.loads(run_cli(["inspect", str(state), "--json"], capsys).out)
    partition = doc["stores"][0]["partitions"][0]
    assert (partition["records"], partition["live_keys"], partition["tombstones"]) == (121, 39, 1)
    verify = run_cli(["verify", str(state)], capsys)
    assert verify.status == 0, verify.out + verify.err


def test_each_command_s_help_says_what_auto_tries_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # b"z" is both UTF-8 text and a msgpack integer: dump shows text (as Kafka does), get and
    # scan show what a store's default serde reads.  The help of each says which.
    partition = tmp_path / "t-0"
    write_mixed(partition)
    dumped = run_cli(["dump", str(partition / "00000000000000000000.log")], capsys).out
    assert "key: z payload: z" in dumped
    assert decode_for_display(b"z", "auto") == 122
    commands = {"dump": "UTF-8 text, else msgpack", "get": "msgpack, else UTF-8 text"}
    commands["scan"] = commands["get"]
    for name, first in commands.items():
        shown = run_cli([name, "--help"], capsys).out
        assert f"default: auto = {first}" in " ".join(shown.split()), name
