"""Checkpoint files: Kafka's text format, atomic replace, truncated and garbage files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changelog.errors import CorruptCheckpointError
from changelog.fs import files
from changelog.fs.checkpoint import InvalidCheckpointEntryError, read_checkpoint, write_checkpoint

NAME = "recovery-point-offset-checkpoint"


def test_golden_text(tmp_path: Path) -> None:
    path = tmp_path / NAME
    write_checkpoint(path, {("balances", 3): 1042, ("balances", 0): 7, ("a.b-c_d", 12): 0})
    assert path.read_bytes() == b"0\n3\na.b-c_d 12 0\nbalances 0 7\nbalances 3 1042\n"
    assert read_checkpoint(path) == {("balances", 3): 1042, ("balances", 0): 7, ("a.b-c_d", 12): 0}


def test_reads_a_file_as_kafka_writes_it(tmp_path: Path) -> None:
    path = tmp_path / NAME
    path.write_text("0\n2\nuser-profiles 0 123456789012\n__consumer_offsets 49 0\n")
    assert read_checkpoint(path) == {
        ("user-profiles", 0): 123456789012,
        ("__consumer_offsets", 49): 0,
    }


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path / NAME) == {}


def test_empty_checkpoint_round_trips(tmp_path: Path) -> None:
    path = tmp_path / NAME
    write_checkpoint(path, {})
    assert path.read_bytes() == b"0\n0\n"
    assert read_checkpoint(path) == {}


def test_every_truncation_is_detected(tmp_path: Path) -> None:
    path = tmp_path / NAME
    write_checkpoint(path, {("balances", 0): 1042, ("balances", 1): 99})
    whole = path.read_bytes()
    for cut in range(len(whole)):
        path.write_bytes(whole[:cut])
        with pytest.raises(CorruptCheckpointError) as info:
            read_checkpoint(path)
        assert info.value.path == path
        assert info.value.position is not None
        assert 0 <= info.value.position <= cut
        assert "line " in info.value.reason


@pytest.mark.parametrize(
    ("content", "line", "position"),
    [
        (b"1\n1\nt 0 5\n", 1, 0),  # unknown version
        (b"x\n1\nt 0 5\n", 1, 0),
        (b"0\n-1\n", 2, 2),  # negative count
        (b"0\nmany\n", 2, 2),
        (b"0\n2\nt 0 5\n", 3, 4),  # fewer entries than counted
        (b"0\n1\nt 0 5\nt 1 6\n", 4, 10),  # more entries than counted
        (b"0\n1\nt 0\n", 3, 4),  # a field missing
        (b"0\n1\nt 0 5 6\n", 3, 4),  # a field too many
        (b"0\n1\nt  0 5\n", 3, 4),  # two spaces
        (b"0\n1\nt 0 +5\n", 3, 4),
        (b"0\n1\nt 0 5.0\n", 3, 4),
        (b"0\n1\nt -1 5\n", 3, 4),  # negative partition
        (b"0\n1\nt 0 -5\n", 3, 4),  # negative offset
        (b"0\n1\nt 2147483648 5\n", 3, 4),  # partition beyond int32
        (b"0\n1\nt 0 9223372036854775808\n", 3, 4),  # offset beyond int64
        (b"0\n1\nbad topic! 0 5\n", 3, 4),
        (b"0\n1\n\n", 3, 4),  # an empty line
        (b"0\n2\nt 0 5\nt 0 6\n", 4, 10),  # the same partition twice
        (b"0\r\n1\r\nt 0 5\r\n", 1, 0),  # CRLF is not what Kafka writes
        (b"\x00\x00\x00\x00\n", 1, 0),  # zeros after a power loss
    ],
)
def test_garbage_is_reported_with_line_and_position(
    tmp_path: Path, content: bytes, line: int, position: int
) -> None:
    path = tmp_path / NAME
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=f"line {line}:") as info:
        read_checkpoint(path)
    assert info.value.path == path
    assert info.value.position == position


def test_non_utf8_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / NAME
    path.write_bytes(b"0\n1\nt\xff 0 5\n")
    with pytest.raises(CorruptCheckpointError, match="UTF-8") as info:
        read_checkpoint(path)
    assert info.value.position == 5


@pytest.mark.parametrize(
    "entries",
    [
        {("bad topic", 0): 1},
        {("", 0): 1},
        {("t" * 250, 0): 1},
        {("t", -1): 1},
        {("t", 2**31): 1},
        {("t", 0): -1},
        {("t", 0): 2**63},
        {("t", 0): 1.0},
        {("t", True): 1},
        {("t", "0"): 1},
        {"t": 1},
        {("t", 0): 1, (1, 0): 1},
    ],
)
def test_bad_entries_write_nothing(tmp_path: Path, entries: dict[object, object]) -> None:
    path = tmp_path / NAME
    write_checkpoint(path, {("t", 0): 5})
    before = path.read_bytes()
    with pytest.raises(InvalidCheckpointEntryError):
        write_checkpoint(path, entries)  # type: ignore[arg-type]
    assert path.read_bytes() == before
    assert not (tmp_path / (NAME + ".tmp")).exists()


def test_write_is_atomic_at_every_step(tmp_path: Path) -> None:
    """A crash at any step leaves the old checkpoint or the new one, never anything else."""
    path = tmp_path / NAME
    old, new = {("t", 0): 5}, {("t", 0): 6, ("t", 1): 7}
    steps: list[str] = []
    write_checkpoint(path, old)
    with files.inject_faults(lambda step, _path: steps.append(step)):
        write_checkpoint(path, new)
    assert steps == [
        "checkpoint.create",
        "checkpoint.write",
        "checkpoint.fsync",
        "checkpoint.rename",
        "checkpoint.fsync_dir",
    ]
    for crash_at in steps:
        write_checkpoint(path, old)

        def crash(step: str, _path: Path, crash_at: str = crash_at) -> None:
            if step == crash_at:
                raise files.SimulatedCrash(step)

        with files.inject_faults(crash), pytest.raises(files.SimulatedCrash):
            write_checkpoint(path, new)
        assert read_checkpoint(path) in (old, new)
        expected = new if crash_at == "checkpoint.fsync_dir" else old
        assert read_checkpoint(path) == expected


def test_a_stray_tmp_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / NAME
    write_checkpoint(path, {("t", 0): 5})
    (tmp_path / (NAME + ".tmp")).write_bytes(b"0\n1\nt 0")
    assert read_checkpoint(path) == {("t", 0): 5}
    write_checkpoint(path, {("t", 0): 6})
    assert read_checkpoint(path) == {("t", 0): 6}


topics = st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True)


@given(
    st.dictionaries(
        st.tuples(topics, st.integers(0, 2**31 - 1)), st.integers(0, 2**63 - 1), max_size=20
    )
)
def test_round_trip(
    tmp_path_factory: pytest.TempPathFactory, entries: dict[tuple[str, int], int]
) -> None:
    path = tmp_path_factory.mktemp("cp") / NAME
    write_checkpoint(path, entries)
    assert read_checkpoint(path) == entries
