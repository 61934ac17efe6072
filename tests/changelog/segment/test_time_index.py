"""TimeIndex: Kafka's TimeIndexTest behaviour, golden bytes, corrupt files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from changelog.errors import CorruptIndexError
from changelog.limits import NO_TIMESTAMP
from changelog.segment.index import IndexOperationError
from changelog.segment.time_index import TimeIndex, TimestampOffset

MAX_ENTRIES = 30
BASE_OFFSET = 45


@pytest.fixture
def index(tmp_path: Path) -> Iterator[TimeIndex]:
    idx = TimeIndex.open(
        tmp_path / "00000000000000000045.timeindex", BASE_OFFSET, max_index_size=MAX_ENTRIES * 12
    )
    yield idx
    idx.close()


def append_entries(index: TimeIndex, count: int) -> None:
    for i in range(1, count + 1):
        index.maybe_append(i * 10, i * 10 + BASE_OFFSET)


def test_golden_entry_bytes(index: TimeIndex) -> None:
    # timestamp 1_700_000_000_000 (int64), relative offset 50 - 45 = 5 (int32), big-endian
    index.maybe_append(1_700_000_000_000, 50)
    assert index.path.read_bytes() == bytes.fromhex("0000018bcfe56800 00000005")
    assert TimeIndex.entry_size() == 12


def test_lookup(index: TimeIndex) -> None:
    assert index.lookup(100) == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET), "empty"
    append_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(9) == TimestampOffset(-1, BASE_OFFSET), "before the first entry"
    assert index.lookup(25) == TimestampOffset(20, 65), "between two entries"
    assert index.lookup(30) == TimestampOffset(30, 75), "exactly an entry"
    assert index.lookup(10**12) == TimestampOffset(290, 335), "past the last entry"


def test_entry(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    assert index.entry(0) == TimestampOffset(10, 55)
    assert index.entry(1) == TimestampOffset(20, 65)
    assert index.entry(2) == TimestampOffset(30, 75)
    assert index.entry(3) == TimestampOffset(40, 85)


def test_entry_overflow(index: TimeIndex) -> None:
    with pytest.raises(IndexOperationError, match="no entry 0"):
        index.entry(0)


def test_truncate(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    index.reset()
    assert len(index) == 0
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate_to(10 + BASE_OFFSET)
    assert len(index) == 0
    append_entries(index, 5)
    index.truncate_to(76)  # between entries for offsets 75 and 85: keeps 55, 65, 75
    assert index.last_entry() == TimestampOffset(30, 75)
    index.truncate_to(75)  # exactly an entry's offset: removes it
    assert index.last_entry() == TimestampOffset(20, 65)
    index.truncate_to(10**6)  # past the end: nothing changes
    assert len(index) == 2
    assert index.path.stat().st_size == 24


def test_truncate_removes_every_entry_of_a_repeated_offset(index: TimeIndex) -> None:
    index.maybe_append(10, 50)
    index.maybe_append(20, 60)
    index.maybe_append(30, 60)  # a later, larger timestamp seen at the same offset
    index.truncate_to(60)
    assert [index.entry(n) for n in range(len(index))] == [TimestampOffset(10, 50)]


def test_append(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    with pytest.raises(IndexOperationError, match="full"):
        index.maybe_append(10000, 1000)
    with pytest.raises(IndexOperationError, match="smaller than the last offset"):
        index.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    index.maybe_append(10000, 1000, skip_full_check=True)
    assert index.last_entry() == TimestampOffset(10000, 1000)
    assert len(index) == MAX_ENTRIES
    with pytest.raises(IndexOperationError, match="full"):
        index.maybe_append(10001, 1001, skip_full_check=True)


def test_append_only_when_the_timestamp_grows(index: TimeIndex) -> None:
    index.maybe_append(100, 50)
    index.maybe_append(100, 51)  # same timestamp: ignored, as on a second roll or close
    assert len(index) == 1
    with pytest.raises(IndexOperationError, match="smaller than the last timestamp"):
        index.maybe_append(99, 52)
    index.maybe_append(101, 50)  # a larger timestamp at the same offset is kept
    assert index.last_entry() == TimestampOffset(101, 50)
    assert index.path.stat().st_size == 24


def test_nothing_is_indexed_without_timestamps(index: TimeIndex) -> None:
    index.maybe_append(NO_TIMESTAMP, 50)
    assert len(index) == 0


def test_offsets_must_fit_relative_to_the_base(index: TimeIndex) -> None:
    for offset in (BASE_OFFSET - 1, BASE_OFFSET + 2**31):
        with pytest.raises(IndexOperationError, match="relative to base offset"):
            index.maybe_append(5, offset)
    assert len(index) == 0


def test_is_full_keeps_a_slot_for_the_roll(index: TimeIndex) -> None:
    assert not index.is_full()
    append_entries(index, MAX_ENTRIES - 2)
    assert not index.is_full()
    index.maybe_append(1000, 1000)
    assert index.is_full()


def test_last_entry(index: TimeIndex) -> None:
    assert index.last_entry() == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)
    index.maybe_append(1, 1 + BASE_OFFSET)
    assert index.last_entry() == TimestampOffset(1, BASE_OFFSET + 1)


def test_resize(index: TimeIndex) -> None:
    assert not index.resize(MAX_ENTRIES * 12)
    assert index.resize(MAX_ENTRIES // 2 * 12)
    assert index.resize(MAX_ENTRIES * 2 * 12)


def test_reopen_keeps_the_entries(index: TimeIndex) -> None:
    append_entries(index, 5)
    index.close()
    reopened = TimeIndex.open(index.path, BASE_OFFSET, max_index_size=MAX_ENTRIES * 12)
    try:
        assert reopened.last_entry() == TimestampOffset(50, 95)
        assert reopened.lookup(35) == TimestampOffset(30, 75)
        reopened.sanity_check()
    finally:
        reopened.close()


@pytest.mark.parametrize(
    ("content", "position", "words"),
    [
        # Kafka's three sanity checks: the last timestamp below the first ...
        (bytes.fromhex("0000000000000014 00000001 000000000000000a 00000002"), 12, "timestamp"),
        # ... the last offset below the base offset ...
        (bytes.fromhex("000000000000000a ffffffff"), 0, "relative offset"),
        # ... and a size that is not a whole number of entries.
        (bytes.fromhex("000000000000000a 00000001 0000"), 12, "not a multiple"),
        # Equal timestamps never get in (maybe_append ignores them), nor offsets going back.
        (bytes.fromhex("000000000000000a 00000001 000000000000000a 00000002"), 12, "timestamp"),
        (bytes.fromhex("000000000000000a 00000002 000000000000000b 00000001"), 12, "offset"),
        (bytes.fromhex("ffffffffffffffff 00000001"), 0, "timestamp"),
    ],
    ids=["ts-back", "below-base", "torn", "ts-repeat", "offset-back", "no-timestamp"],
)
def test_loading_a_corrupt_file(tmp_path: Path, content: bytes, position: int, words: str) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError, match=words) as info:
        TimeIndex.open(path, 0, max_index_size=1200)
    assert info.value.path == path
    assert info.value.position == position


def test_sanity_check(index: TimeIndex) -> None:
    index.sanity_check()
    append_entries(index, 5)
    index.sanity_check()
    with index.path.open("ab") as file:
        file.write(b"\x01")
    with pytest.raises(CorruptIndexError, match="not a multiple") as info:
        index.sanity_check()
    assert info.value.path == index.path
    index.trim_to_valid_size()
    index.sanity_check()
    assert index.path.stat().st_size == 5 * 12
