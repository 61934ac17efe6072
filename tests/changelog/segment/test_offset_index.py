"""OffsetIndex: Kafka's OffsetIndexTest behaviour, golden bytes, corrupt files, file operations."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changelog.errors import CorruptIndexError, LogClosedError, LogStorageError
from changelog.fs import files
from changelog.segment.index import IndexOperationError
from changelog.segment.offset_index import OffsetIndex, OffsetPosition

BASE_OFFSET = 45


@pytest.fixture
def index(tmp_path: Path) -> Iterator[OffsetIndex]:
    idx = OffsetIndex.open(
        tmp_path / "00000000000000000045.index", BASE_OFFSET, max_index_size=30 * 8
    )
    yield idx
    idx.close()


def test_golden_entry_bytes(index: OffsetIndex) -> None:
    # relative offset 50 - 45 = 5 (int32), position 4096 (int32), big-endian
    index.append(50, 4096)
    index.append(BASE_OFFSET + 2**31 - 1, 2**31 - 1)
    assert index.path.read_bytes() == bytes.fromhex("00000005 00001000 7fffffff 7fffffff")
    assert OffsetIndex.entry_size() == 8


def test_random_lookup(index: OffsetIndex) -> None:
    assert index.lookup(92) == OffsetPosition(BASE_OFFSET, 0), "absent: position 0"
    rng = random.Random(7)
    offsets, positions = [], []
    offset, position = BASE_OFFSET + 1, 0
    for _ in range(index.max_entries):
        offset += rng.randint(1, 15)
        position += rng.randint(1, 15)
        offsets.append(offset)
        positions.append(position)
    for o, p in zip(offsets, positions, strict=True):
        index.append(o, p)
    for o, p in zip(offsets, positions, strict=True):
        assert index.lookup(o) == OffsetPosition(o, p)
    for target in rng.sample(range(BASE_OFFSET, offsets[-1]), 30):
        floor = [i for i, o in enumerate(offsets) if o <= target]
        expected = (
            OffsetPosition(offsets[floor[-1]], positions[floor[-1]])
            if floor
            else OffsetPosition(BASE_OFFSET, 0)
        )
        assert index.lookup(target) == expected


def test_lookup_extreme_cases(index: OffsetIndex) -> None:
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0), "empty index"
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    last = BASE_OFFSET + index.max_entries
    assert index.lookup(last) == OffsetPosition(last, index.max_entries - 1)
    assert index.lookup(last + 10**9) == OffsetPosition(last, index.max_entries - 1)
    assert index.lookup(-(10**9)) == OffsetPosition(BASE_OFFSET, 0)


def test_entry(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i, i)
    for i in range(index.max_entries):
        assert index.entry(i) == OffsetPosition(BASE_OFFSET + i, i)


def test_entry_overflow(index: OffsetIndex) -> None:
    with pytest.raises(IndexOperationError, match="no entry 0"):
        index.entry(0)


def test_append_too_many(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.is_full()
    with pytest.raises(IndexOperationError, match="full"):
        index.append(BASE_OFFSET + index.max_entries + 1, 1000)
    assert len(index) == index.max_entries
    assert index.path.stat().st_size == index.max_entries * 8


def test_append_out_of_order(index: OffsetIndex) -> None:
    index.append(51, 0)
    for offset in (50, 51):
        with pytest.raises(IndexOperationError, match="no larger than the last offset"):
            index.append(offset, 1)
    with pytest.raises(IndexOperationError, match="position"):
        index.append(52, -1)
    assert len(index) == 1
    assert index.path.stat().st_size == 8


def test_append_outside_the_relative_range(index: OffsetIndex) -> None:
    assert not index.can_append_offset(BASE_OFFSET + 2**31)
    assert not index.can_append_offset(BASE_OFFSET - 1)
    assert index.can_append_offset(BASE_OFFSET + 2**31 - 1)
    for offset in (BASE_OFFSET - 1, BASE_OFFSET + 2**31):
        with pytest.raises(IndexOperationError, match="relative to base offset"):
            index.append(offset, 0)
    assert len(index) == 0


def test_fetch_upper_bound_offset(index: OffsetIndex) -> None:
    first = OffsetPosition(BASE_OFFSET, 0)
    second = OffsetPosition(BASE_OFFSET + 1, 10)
    third = OffsetPosition(BASE_OFFSET + 2, 23)
    fourth = OffsetPosition(BASE_OFFSET + 3, 37)
    assert index.fetch_upper_bound_offset(first, 5) is None
    for entry in (first, second, third, fourth):
        index.append(*entry)
    assert index.fetch_upper_bound_offset(first, 5) == second
    assert index.fetch_upper_bound_offset(first, 10) == second
    assert index.fetch_upper_bound_offset(first, 23) == third
    assert index.fetch_upper_bound_offset(first, 22) == third
    assert index.fetch_upper_bound_offset(second, 24) == fourth
    assert index.fetch_upper_bound_offset(fourth, 1) is None
    assert index.fetch_upper_bound_offset(first, 200) is None
    assert index.fetch_upper_bound_offset(second, 200) is None


def test_reopen(index: OffsetIndex) -> None:
    first, second = OffsetPosition(51, 0), OffsetPosition(52, 1)
    index.append(*first)
    index.append(*second)
    index.flush()
    index.close()
    reopened = OffsetIndex.open(index.path, BASE_OFFSET, max_index_size=30 * 8)
    try:
        assert reopened.lookup(first.offset) == first
        assert reopened.lookup(second.offset) == second
        assert reopened.last_offset == second.offset
        assert len(reopened) == 2
        with pytest.raises(IndexOperationError):
            reopened.append(52, 2)
        reopened.append(53, 2)
        assert reopened.path.stat().st_size == 24
    finally:
        reopened.close()


def test_truncate(tmp_path: Path) -> None:
    idx = OffsetIndex.open(tmp_path / "0.index", 0, max_index_size=10 * 8)
    try:
        idx.reset()
        for i in range(1, 10):
            idx.append(i, i)

        idx.truncate_to(12)
        assert idx.lookup(10) == OffsetPosition(9, 9), "unchanged by truncate past the end"
        assert idx.last_offset == 9

        idx.append(10, 10)
        idx.truncate_to(10)
        assert idx.lookup(10) == OffsetPosition(9, 9), "truncate at an entry removes it"
        assert idx.last_offset == 9
        idx.append(10, 10)

        idx.truncate_to(9)
        assert idx.lookup(10) == OffsetPosition(8, 8), "truncate off the last entry"
        assert idx.last_offset == 8
        idx.append(9, 9)

        idx.truncate_to(5)
        assert idx.lookup(10) == OffsetPosition(4, 4)
        assert idx.last_offset == 4
        idx.append(5, 5)
        assert idx.path.stat().st_size == 5 * 8

        idx.truncate_to_entries(2)
        assert (len(idx), idx.last_offset) == (2, 2)
        idx.truncate_to_entries(7)
        assert len(idx) == 2

        idx.reset()
        assert len(idx) == 0, "full truncation leaves no entries"
        assert idx.last_entry() == OffsetPosition(0, 0)
        assert idx.path.stat().st_size == 0
        idx.append(0, 0)
    finally:
        idx.close()


def test_sanity_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    idx = OffsetIndex.open(tmp_path / "20.index", 20, max_index_size=10 * 8)
    try:
        idx.append(20, 0)
        idx.sanity_check()
    finally:
        idx.close()


@pytest.mark.parametrize(
    ("content", "position", "words"),
    [
        (bytes.fromhex("00000001 00000000 000000"), 8, "not a multiple"),
        (bytes.fromhex("0000"), 0, "not a multiple"),
        (bytes.fromhex("00000002 00000000 00000001 00000010"), 8, "does not increase"),
        (bytes.fromhex("00000002 00000000 00000002 00000010"), 8, "does not increase"),
        (bytes.fromhex("ffffffff 00000000"), 0, "does not increase"),  # relative offset -1
        (bytes.fromhex("00000001 00000010 00000002 00000008"), 8, "goes backwards"),
        (bytes.fromhex("00000001 ffffffff"), 0, "negative"),
    ],
    ids=["torn-entry", "short", "backwards", "repeated", "below-base", "position-back", "neg-pos"],
)
def test_loading_a_corrupt_file(tmp_path: Path, content: bytes, position: int, words: str) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError, match=words) as info:
        OffsetIndex.open(path, 0, max_index_size=1024)
    assert info.value.path == path
    assert info.value.position == position


def test_sanity_check_sees_a_file_changed_behind_its_back(index: OffsetIndex) -> None:
    index.append(50, 0)
    index.sanity_check()
    with index.path.open("ab") as file:
        file.write(b"\x00" * 8)
    with pytest.raises(CorruptIndexError, match="does not hold the entries") as info:
        index.sanity_check()
    assert (info.value.expected, info.value.actual) == (8, 16)
    index.trim_to_valid_size()
    index.sanity_check()
    with index.path.open("ab") as file:
        file.write(b"\x00" * 3)
    with pytest.raises(CorruptIndexError, match="not a multiple"):
        index.sanity_check()


def test_resize(index: OffsetIndex) -> None:
    assert not index.resize(30 * 8)
    assert index.resize(15 * 8)
    assert index.max_entries == 15
    assert index.resize(60 * 8 + 7)
    assert index.max_entries == 60
    for i in range(10):
        index.append(BASE_OFFSET + i, i)
    with pytest.raises(IndexOperationError, match="cannot resize"):
        index.resize(9 * 8)


def test_close_delete_and_rename(tmp_path: Path, index: OffsetIndex) -> None:
    index.append(46, 0)
    new_path = tmp_path / "00000000000000000045.index.swap"
    index.rename_to(new_path)
    assert new_path.exists()
    assert not (tmp_path / "00000000000000000045.index").exists()
    index.append(47, 10)
    assert new_path.stat().st_size == 16
    index.close()
    index.close()
    assert index.closed
    with pytest.raises(LogClosedError):
        index.append(48, 20)
    with pytest.raises(LogClosedError):
        index.flush()
    assert index.delete()
    assert not new_path.exists()
    assert not index.delete()


def test_mutations_go_through_fault_points(index: OffsetIndex) -> None:
    steps: list[str] = []
    with files.inject_faults(lambda step, _path: steps.append(step)):
        index.append(46, 0)
        index.flush()
        index.truncate_to(46)
    assert steps == ["index.append", "index.fsync", "index.truncate"]


def test_a_crash_before_the_write_leaves_no_entry(index: OffsetIndex) -> None:
    def crash(step: str, _path: Path) -> None:
        if step == "index.append":
            raise files.SimulatedCrash(step)

    index.append(46, 0)
    with files.inject_faults(crash), pytest.raises(files.SimulatedCrash):
        index.append(47, 10)
    assert len(index) == 1
    assert index.path.stat().st_size == 8


def test_a_failed_write_leaves_a_whole_file(
    index: OffsetIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    index.append(46, 0)
    real_write = os.write

    def half_then_full(fd: int, data: memoryview) -> int:
        if len(data) == 8:
            real_write(fd, bytes(data[:4]))
            return 4
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(LogStorageError):
        index.append(47, 10)
    monkeypatch.undo()
    assert len(index) == 1
    assert index.path.stat().st_size == 8
    index.append(47, 10)
    assert index.entry(1) == OffsetPosition(47, 10)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 20), st.integers(0, 500)),
            st.tuples(st.just("truncate"), st.integers(0, 400), st.just(0)),
            st.tuples(st.just("reopen"), st.just(0), st.just(0)),
        ),
        max_size=40,
    )
)
def test_matches_a_list_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    path = tmp_path_factory.mktemp("idx") / "00000000000000000100.index"
    model: list[tuple[int, int]] = []
    idx = OffsetIndex.open(path, 100, max_index_size=1000 * 8)
    try:
        for op, a, b in ops:
            if op == "append":
                offset = (model[-1][0] if model else 99) + a
                position = (model[-1][1] if model else 0) + b
                idx.append(offset, position)
                model.append((offset, position))
            elif op == "truncate":
                idx.truncate_to(100 + a)
                model = [(o, p) for o, p in model if o < 100 + a]
            else:
                idx.close()
                idx = OffsetIndex.open(path, 100, max_index_size=1000 * 8)
            assert [tuple(idx.entry(n)) for n in range(len(idx))] == model
            for target in (99, 100, 150, 10**6):
                floor = [e for e in model if e[0] <= target]
                assert tuple(idx.lookup(target)) == (floor[-1] if floor else (100, 0))
        idx.sanity_check()
    finally:
        idx.close()
