"""LogSegment, after Kafka's LogSegmentTest: lookups, reads from gaps, truncation, rolling, recovery."""

from __future__ import annotations

import os
import random
from pathlib import Path

import crc32c
import pytest

from changelog.config import LogConfig
from changelog.errors import (
    ChangelogError,
    CorruptRecordError,
    LogClosedError,
    UnsupportedFormatError,
)
from changelog.fs import files
from changelog.limits import INT32_MAX
from changelog.record.batch import (
    Record,
    decode_header,
    decode_records,
    encode_batch,
    encode_records,
)
from changelog.segment.segment import LogSegment

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


def test_should_roll_when_dirty_data_is_older_than_max_compaction_lag(tmp_path: Path) -> None:
    """KIP-354: with ``compact`` a segment rolls after ``max_compaction_lag_ms``, not ``segment_ms``."""
    config = LogConfig(segment_ms=10_000, max_compaction_lag_ms=1000)
    assert config.max_segment_ms == 1000
    seg = make(tmp_path, 0, config)
    append(seg, 0, [b"a"], timestamp_ms=5000)
    assert not seg.should_roll(messages_size=1, max_timestamp_ms=6000, max_offset=1, now_ms=0)
    assert seg.should_roll(messages_size=1, max_timestamp_ms=6001, max_offset=1, now_ms=0)
    seg.close()
    # without compaction the lag means nothing: segment_ms rules
    assert (
        LogConfig(
            cleanup_policy="delete", segment_ms=10_000, max_compaction_lag_ms=1000
        ).max_segment_ms
        == 10_000
    )


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


def cleaned_batches(seed: int, count: int) -> list[bytes]:
    """Batches as the cleaner writes them: offset gaps, uneven sizes, timestamps out of order,
    some emptied (``records_count`` 0 but the offset range kept)."""
    rng = random.Random(seed)
    batches: list[bytes] = []
    offset = 0
    for _ in range(count):
        span = rng.randint(1, 8)
        kept = sorted(rng.sample(range(offset, offset + span), rng.randint(0, span)))
        records = [
            Record(o, 1000 + rng.randrange(500), b"k%d" % o, b"v" * rng.randrange(40)) for o in kept
        ]
        batches.append(
            encode_records(
                records,
                base_offset=offset,
                last_offset_delta=span - 1,
                max_timestamp_ms=None if records else 900,
            )
        )
        offset += span
    return batches


def batch_table(seg: LogSegment) -> list[tuple[int, int, int, int]]:
    """``(position, base offset, last offset, max timestamp)`` of every batch, from the file."""
    data = seg.log_path.read_bytes()
    table = []
    position = 0
    while position < len(data):
        header = decode_header(data, position, path=seg.log_path, validate=True)
        table.append((position, header.base_offset, header.last_offset, header.max_timestamp))
        position += header.size_in_bytes
    return table


def append_run(seg: LogSegment, run: list[bytes]) -> None:
    """Append ``run`` (one or more batches) with one call, as the cleaner's writer does."""
    buf = b"".join(run)
    last = decode_header(run[-1], 0, path=seg.log_path)
    seg.append(
        buf,
        largest_offset=last.last_offset,
        largest_timestamp_ms=max(decode_header(b, 0, path=seg.log_path).max_timestamp for b in run),
        offset_of_max_timestamp=last.base_offset,  # ignored: the segment uses the shallow offset
    )


@pytest.mark.parametrize("seed", range(5))
def test_multi_batch_append_indexes_batch_by_batch(tmp_path: Path, seed: int) -> None:
    """Kafka's DumpLogSegments --verify-index-only: every offset index entry names the last
    offset of the batch starting at its position; every offset can be looked up."""
    rng = random.Random(seed)
    batches = cleaned_batches(seed, 120)
    config = LogConfig(index_interval_bytes=rng.choice([1, 64, 150]), segment_index_bytes=1 << 16)
    seg = make(tmp_path, 0, config)
    start = 0
    while start < len(batches):  # runs of 1..40 batches per write, the first one large
        stop = len(batches) // 2 if start == 0 else start + rng.randint(1, 40)
        append_run(seg, batches[start:stop])
        start = stop
    table = batch_table(seg)
    by_position = {position: last for position, _, last, _ in table}
    assert len(seg.offset_index) >= len(table) // 4
    for n in range(len(seg.offset_index)):
        entry = seg.offset_index.entry(n)
        assert by_position.get(entry.position) == entry.offset, (n, entry)
    # batch last offset -> (max timestamp so far, last offset of the batch holding it)
    max_so_far: dict[int, tuple[int, int]] = {}
    best = (-1, -1)
    for _, _, last, max_ts in table:
        if max_ts > best[0]:
            best = (max_ts, last)
        max_so_far[last] = best
    # A time entry is added with each offset entry (when its timestamp grew): the largest
    # timestamp so far and the last offset of the batch holding it (Kafka's shallow offset).
    expected = {max_so_far[seg.offset_index.entry(n).offset] for n in range(len(seg.offset_index))}
    assert len(seg.time_index) > 0
    for n in range(len(seg.time_index)):
        assert tuple(seg.time_index.entry(n)) in expected
    for position, base, last, _ in table:
        for offset in range(base, last + 1):
            assert seg.translate_offset(offset) == position
    assert seg.translate_offset(table[-1][2] + 1) is None
    assert seg.read_next_offset() == table[-1][2] + 1
    assert seg.largest_timestamp_ms == max(row[3] for row in table)
    seg.close()


def test_multi_batch_append_equals_single_appends_and_recovery(tmp_path: Path) -> None:
    """The indexes do not depend on how the batches were grouped into writes, and recover()
    rebuilds them byte for byte."""
    batches = cleaned_batches(7, 80)
    config = LogConfig(index_interval_bytes=100, segment_index_bytes=1 << 16)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one_by_one = make(tmp_path / "a", 0, config)
    grouped = make(tmp_path / "b", 0, config)
    for batch in batches:
        append_run(one_by_one, [batch])
    for start in range(0, len(batches), 13):
        append_run(grouped, batches[start : start + 13])
    for seg in (one_by_one, grouped):
        seg.on_become_inactive()
    files_a = [one_by_one.offset_index.path.read_bytes(), one_by_one.time_index.path.read_bytes()]
    files_b = [grouped.offset_index.path.read_bytes(), grouped.time_index.path.read_bytes()]
    assert files_a == files_b
    assert len(files_a[0]) > 8 * 10
    assert grouped.recover() == 0
    assert [grouped.offset_index.path.read_bytes(), grouped.time_index.path.read_bytes()] == files_b
    one_by_one.close()
    grouped.close()


def test_multi_batch_append_refuses_a_bad_buffer(tmp_path: Path) -> None:
    seg = make(tmp_path, 0)
    batches = cleaned_batches(3, 3)
    last = decode_header(batches[-1], 0, path=seg.log_path).last_offset
    for bad, largest in [
        (b"".join(batches)[:-1], last),  # torn: the last batch is cut short
        (b"".join(batches) + b"\0" * 5, last),  # trailing bytes
        (b"".join(batches), last + 1),  # largest_offset disagrees with the batches
    ]:
        with pytest.raises(ChangelogError, match="cannot append"):
            seg.append(bad, largest_offset=largest, largest_timestamp_ms=0)
        assert seg.size_bytes == 0
        assert seg.log_path.stat().st_size == 0
    seg.close()


ATTRIBUTES = 21  # the attributes' position in a batch; compression is bits 0-2


def flip_compression_bit(seg: LogSegment, position: int, *, restamp: bool) -> None:
    """Set codec bits 0b101 (id 5, no codec) in the batch at ``position``; ``restamp``: fix its
    CRC (a batch of an unknown codec) or not (flipped bits)."""
    data = bytearray(seg.log_path.read_bytes())
    size = decode_header(data, position, path=seg.log_path).size_in_bytes
    data[position + ATTRIBUTES + 1] |= 0x05
    if restamp:
        crc = crc32c.crc32c(bytes(data[position + ATTRIBUTES : position + size]))
        data[position + 17 : position + 21] = crc.to_bytes(4, "big")
    seg.log_path.write_bytes(bytes(data))


@pytest.mark.parametrize("restamp", [False, True], ids=["flipped-bit", "unknown-codec"])
def test_compression_bits_are_believed_only_after_the_crc(tmp_path: Path, restamp: bool) -> None:
    """Flipped codec bits are corruption (CorruptRecordError), an unknown codec id under a
    valid CRC is unsupported; both name the file and the batch's position, on every read path."""
    seg = make(tmp_path, 0, LogConfig(index_interval_bytes=4096))  # no index entry: scans from 0
    first = append(seg, 0, [b"a" * 20])
    append(seg, 1, [b"b" * 20])
    append(seg, 2, [b"c" * 20])
    flip_compression_bit(seg, len(first), restamp=restamp)
    expected = UnsupportedFormatError if restamp else CorruptRecordError
    for read in (
        lambda: list(seg.batches()),
        lambda: list(seg.headers()),
        lambda: seg.translate_offset(2),
        seg.read_next_offset,
    ):
        with pytest.raises(expected) as info:
            read()
        assert type(info.value) is expected
        assert info.value.path == seg.log_path
        assert info.value.position == len(first)
    if restamp:
        with pytest.raises(UnsupportedFormatError):
            seg.recover()
    else:
        assert seg.recover() > 0  # corruption: cut there
        assert seg.size_bytes == len(first)
    seg.close()
