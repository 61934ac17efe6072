"""LogSegment, after Kafka's LogSegmentTest: lookups, reads from gaps, truncation, rolling, recovery."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from changelog import files
from changelog.config import LogConfig
from changelog.errors import CorruptRecordError, LogClosedError
from changelog.record_batch import decode_records, encode_batch
from changelog.segment import INT32_MAX, LogSegment

CONFIG = LogConfig(index_interval_bytes=100, segment_index_bytes=4096, segment_bytes=1 << 20)


def make(directory: Path, base: int, config: LogConfig = CONFIG, suffix: str = "") -> LogSegment:
    return LogSegment.create(directory, base, config=config, file_suffix=suffix, created_ms=0)


def append(seg: LogSegment, base: int, values: list[bytes], timestamp_ms: int = 1000) -> bytes:
    """Append one batch holding ``values`` at offsets ``base..``; returns its bytes."""
    data = encode_batch(base, [(b"k", v) for v in values], timestamp_ms=timestamp_ms)
    last = base + len(values) - 1
    seg.append(
        data, largest_offset=last, largest_timestamp_ms=timestamp_ms, offset_of_max_timestamp=last
    )
    return data


def offsets(seg: LogSegment, start_position: int = 0) -> list[int]:
    found: list[int] = []
    for position, _header, data in seg.batches(start_position):
        found.extend(r.offset for r in decode_records(data, path=seg.log_path, position=position))
    return found


def test_read_on_empty_segment(tmp_path: Path) -> None:
    seg = make(tmp_path, 40)
    assert seg.translate_offset(40) is None
    assert list(seg.batches()) == []
    assert seg.read_next_offset() == 40
    assert seg.size_bytes == 0
    seg.close()


def test_read_before_first_offset(tmp_path: Path) -> None:
    seg = make(tmp_path, 40)
    append(seg, 50, [b"hello", b"there", b"little", b"bee"])
    assert seg.translate_offset(41) == 0
    assert offsets(seg) == [50, 51, 52, 53]
    seg.close()


def test_read_after_last(tmp_path: Path) -> None:
    seg = make(tmp_path, 40)
    append(seg, 50, [b"hello", b"there"])
    assert seg.translate_offset(52) is None
    seg.close()


def test_read_from_gap(tmp_path: Path) -> None:
    seg = make(tmp_path, 40)
    first = append(seg, 50, [b"hello", b"there"])
    append(seg, 60, [b"alpha", b"beta"])
    position = seg.translate_offset(55)
    assert position == len(first)
    assert offsets(seg, position) == [60, 61]
    seg.close()


def test_translate_offset_uses_index_then_scans(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    positions = {}
    for n in range(200):
        positions[n] = seg.size_bytes
        append(seg, n, [b"x" * 20])
    assert len(seg.offset_index) > 10  # an entry about every 100 bytes
    for n in range(200):
        assert seg.translate_offset(n) == positions[n]
    assert seg.translate_offset(200) is None
    assert seg.read_next_offset() == 200
    seg.close()


def test_next_offset_calculation(tmp_path: Path) -> None:
    seg = make(tmp_path, 40)
    assert seg.read_next_offset() == 40
    append(seg, 50, [b"hello", b"there", b"you"])
    assert seg.read_next_offset() == 53
    seg.close()


def test_truncate(tmp_path: Path) -> None:
    seg = make(tmp_path, 40)
    offset = 40
    for _ in range(30):
        append(seg, offset, [b"hello"])
        append(seg, offset + 1, [b"hello"])
        assert offsets(seg)[-2:] == [offset, offset + 1]
        seg.truncate_to(offset + 1)
        assert offsets(seg)[-1] == offset
        assert seg.read_next_offset() == offset + 1
        offset += 1
    seg.close()


def test_truncate_inside_a_batch_removes_the_whole_batch(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    first = append(seg, 0, [b"a", b"b"])
    append(seg, 2, [b"c", b"d", b"e"])
    removed = seg.truncate_to(3)
    assert seg.size_bytes == len(first)
    assert removed > 0
    assert seg.read_next_offset() == 2
    seg.close()


def test_truncate_full_resets_create_time_and_allows_reappend(tmp_path: Path) -> None:
    seg = make(tmp_path, 40)
    append(seg, 40, [b"hello", b"there"])
    assert seg.truncate_to(0, now_ms=500) > 0
    assert seg.size_bytes == 0
    assert not seg.offset_index.is_full()
    assert not seg.time_index.is_full()
    assert list(seg.batches()) == []
    assert seg.max_timestamp_so_far_ms == -1
    assert not seg.should_roll(messages_size=10, max_timestamp_ms=-1, max_offset=41, now_ms=10**12)
    append(seg, 40, [b"hello", b"there"])
    assert offsets(seg) == [40, 41]
    seg.close()


def test_reload_largest_timestamp_and_next_offset_after_truncation(tmp_path: Path) -> None:
    seg = make(tmp_path, 40, LogConfig(index_interval_bytes=1))
    for offset in range(40, 70):
        append(seg, offset, [b"hello"], timestamp_ms=offset * 10)
    assert seg.read_next_offset() == 70
    assert seg.largest_timestamp_ms == 690
    seg.truncate_to(41)
    assert len(seg.time_index) == 0
    assert seg.largest_timestamp_ms == 400
    assert seg.read_next_offset() == 41
    seg.close()


def test_should_roll_on_size(tmp_path: Path) -> None:
    seg = make(tmp_path, 0, LogConfig(segment_bytes=200))
    data = append(seg, 0, [b"x" * 50])
    assert not seg.should_roll(
        messages_size=200 - len(data), max_timestamp_ms=1000, max_offset=1, now_ms=0
    )
    assert seg.should_roll(
        messages_size=201 - len(data), max_timestamp_ms=1000, max_offset=1, now_ms=0
    )
    seg.close()


def test_should_roll_on_time_measured_from_first_batch_with_jitter(tmp_path: Path) -> None:
    seg = make(tmp_path, 0, LogConfig(segment_ms=1000, segment_jitter_ms=300))
    assert 0 <= seg.roll_jitter_ms < 300
    seg.roll_jitter_ms = 200
    append(seg, 0, [b"a"], timestamp_ms=5000)
    append(seg, 1, [b"b"], timestamp_ms=9000)  # later batches do not move the reference
    assert not seg.should_roll(messages_size=1, max_timestamp_ms=5800, max_offset=2, now_ms=0)
    assert seg.should_roll(messages_size=1, max_timestamp_ms=5801, max_offset=2, now_ms=0)
    seg.close()


def test_should_roll_on_full_index_and_offset_overflow(tmp_path: Path) -> None:
    seg = make(tmp_path, 0, LogConfig(index_interval_bytes=0, segment_index_bytes=24))
    append(seg, 0, [b"a"])
    assert not seg.should_roll(messages_size=1, max_timestamp_ms=1000, max_offset=1, now_ms=0)
    append(seg, 1, [b"b"])  # first index entry
    assert seg.should_roll(
        messages_size=1, max_timestamp_ms=1000, max_offset=2, now_ms=0
    )  # time index full
    seg.close()
    empty = make(tmp_path, 100)
    assert not empty.should_roll(
        messages_size=1, max_timestamp_ms=0, max_offset=100 + INT32_MAX, now_ms=10**13
    )
    assert empty.should_roll(
        messages_size=1, max_timestamp_ms=0, max_offset=101 + INT32_MAX, now_ms=0
    )
    empty.close()


def test_change_file_suffixes(tmp_path: Path) -> None:
    seg = make(tmp_path, 40, suffix=files.CLEANED_SUFFIX)
    append(seg, 40, [b"a"])
    names = {p.name for p in tmp_path.iterdir()}
    assert "00000000000000000040.log.cleaned" in names
    seg.change_file_suffixes(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
    seg.change_file_suffixes(files.SWAP_SUFFIX, "")
    assert {p.name for p in tmp_path.iterdir()} == {
        "00000000000000000040.log",
        "00000000000000000040.index",
        "00000000000000000040.timeindex",
    }
    assert seg.log_path == tmp_path / "00000000000000000040.log"
    append(seg, 41, [b"b"])  # the descriptors survived the renames
    assert offsets(seg) == [40, 41]
    seg.delete()
    assert list(tmp_path.iterdir()) == []


def test_reader_keeps_reading_after_delete(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    for n in range(10):
        append(seg, n, [b"v" * 30])
    reader = seg.open_reader()
    seg.delete()
    assert not seg.log_path.exists()
    with pytest.raises(LogClosedError):
        seg.open_reader()
    assert len(list(reader.batches())) == 10
    reader.close()


def test_reader_sees_a_fixed_prefix(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    append(seg, 0, [b"a"])
    reader = seg.open_reader()
    append(seg, 1, [b"b"])
    assert [h.base_offset for _, h, _ in reader.batches()] == [0]
    reader.close()
    seg.close()


def test_corrupt_batch_is_reported_with_path_and_position(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    first = append(seg, 0, [b"a" * 20])
    append(seg, 1, [b"b" * 20])
    with seg.log_path.open("r+b") as f:
        f.seek(len(first) + 70)
        f.write(b"\xff")
    with pytest.raises(CorruptRecordError) as info:
        list(seg.batches())
    assert info.value.path == seg.log_path
    assert info.value.position == len(first)
    seg.close()


def test_recovery_fixes_corrupt_index(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    for n in range(100):
        append(seg, n, [str(n).encode()])
    before = seg.offset_index.path.read_bytes()
    assert before
    with seg.offset_index.path.open("r+b") as f:
        f.seek(5)
        f.write(os.urandom(len(before) - 5))
    assert seg.recover() == 0
    assert seg.offset_index.path.read_bytes() == before  # rebuilt exactly as appended
    for n in range(100):
        position = seg.translate_offset(n)
        assert position is not None
        assert offsets(seg, position)[0] == n
    seg.close()


def test_recover_rebuilds_the_same_indexes_and_timestamps(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    for n in range(50):
        append(seg, n, [b"v" * (n % 7 + 1)], timestamp_ms=1000 + n * (-1) ** n)
    seg.on_become_inactive()
    index, timeindex = seg.offset_index.path.read_bytes(), seg.time_index.path.read_bytes()
    largest = seg.largest_timestamp_ms
    assert seg.recover() == 0
    assert seg.offset_index.path.read_bytes() == index
    assert seg.time_index.path.read_bytes() == timeindex
    assert seg.largest_timestamp_ms == largest
    seg.close()


@pytest.mark.parametrize("seed", range(10))
def test_recovery_with_corrupt_message(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    seg = make(tmp_path, 0)
    ends = []
    for n in range(100):
        append(seg, n, [str(n).encode()])
        ends.append(seg.size_bytes)
    victim = rng.randrange(100)
    start = ends[victim - 1] if victim else 0
    # Bytes 16.. of a batch are framed or CRC-covered (0-15: base offset, length and
    # leader epoch are not, as in Kafka), so the garbage always invalidates the victim.
    with seg.log_path.open("r+b") as f:
        position = start + 16 + rng.randrange(ends[victim] - start - 16)
        f.seek(position)
        original = f.read(12)
        f.seek(position)
        f.write(bytes(b ^ 0x5A for b in original))
    truncated = seg.recover()
    assert seg.size_bytes == start
    assert truncated == ends[-1] - start
    assert offsets(seg) == list(range(victim))
    assert seg.read_next_offset() == victim
    seg.close()


def test_recovery_truncates_torn_tail(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    append(seg, 0, [b"a", b"b"])
    size = seg.size_bytes
    append(seg, 2, [b"c" * 100])
    os.truncate(seg.log_path, size + 30)
    assert seg.recover() == 30
    assert seg.size_bytes == size
    assert seg.read_next_offset() == 2
    append(seg, 2, [b"again"])
    assert offsets(seg) == [0, 1, 2]
    seg.close()


def test_recovery_truncates_appended_garbage(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    append(seg, 0, [b"a"])
    size = seg.size_bytes
    with seg.log_path.open("ab") as f:
        f.write(os.urandom(500))
    assert seg.recover() == 500
    assert seg.size_bytes == size
    seg.close()


def test_largest_timestamp_survives_reopen(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    append(seg, 0, [b"a"], timestamp_ms=7000)
    append(seg, 1, [b"b"], timestamp_ms=3000)
    seg.on_become_inactive()
    seg.flush()
    seg.close()
    again = LogSegment.open(tmp_path, 0, config=CONFIG)
    assert again.largest_timestamp_ms == 7000
    again.sanity_check()
    again.close()


def test_closed_segment_refuses_use(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    seg.close()
    seg.close()
    with pytest.raises(LogClosedError):
        append(seg, 0, [b"a"])
    with pytest.raises(LogClosedError):
        seg.flush()


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    """Kafka's testFindOffsetByTimestamp: one record per batch at offset * 10 ms."""
    seg = make(tmp_path, 40, LogConfig(index_interval_bytes=1))
    for offset in range(40, 50):
        append(seg, offset, [f"msg{offset}".encode()], timestamp_ms=offset * 10)
    assert seg.largest_timestamp_ms == 490
    assert seg.find_offset_by_timestamp(420) == 42  # an indexed timestamp
    assert seg.find_offset_by_timestamp(421) == 43
    assert seg.find_offset_by_timestamp(430) == 43
    assert seg.find_offset_by_timestamp(431) == 44
    assert seg.find_offset_by_timestamp(491) is None  # past the last timestamp
    assert seg.find_offset_by_timestamp(401) == 41
    assert seg.find_offset_by_timestamp(399) == 40  # before the first timestamp
    seg.close()
