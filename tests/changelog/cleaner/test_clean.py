"""One cleaning pass over a real log: Kafka's ``LogCleanerTest`` behaviour, black box.

Logs use tiny segments and an injected clock; every test reads the log back
through ``Log.read`` and the segments' batch headers.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog.cleaner.clean import SourceSegment, clean_log, group_segments_by_size
from changelog.cleaner.manager import read_cleaner_checkpoint
from changelog.cleaner.offset_map import SLOT_BYTES, OffsetMap
from changelog.config import CleanerConfig, LogConfig
from changelog.errors import CleanerAbortedError, CorruptRecordError, LogClosedError
from changelog.fs import files
from changelog.log.log import Log
from changelog.record.batch import BatchHeader

T0 = 1_700_000_000_000


@attrs.define
class Clock:
    """A settable millisecond clock."""

    now: int = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def open_log(path: Path, clock: Clock, **settings: Any) -> Log:
    settings.setdefault("segment_bytes", 1024 * 1024)
    settings.setdefault("delete_retention_ms", 1000)
    settings.setdefault("file_delete_delay_ms", 0)
    settings.setdefault("flush_messages", 10**9)  # appends are not under test: skip their fsyncs
    return Log.open(path / "topic-0", LogConfig(**settings), clock=clock)


def append_each(log: Log, pairs: list[tuple[bytes, bytes | None]]) -> None:
    """One batch per record (the shape Kafka's tests use)."""
    for key, value in pairs:
        log.append([(key, value)])


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]


def headers(log: Log) -> Iterator[tuple[int, BatchHeader, bytes]]:
    for segment in log.segments:
        for _position, header, raw in segment.batches():
            yield segment.base_offset, header, raw


def latest(log: Log) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for _offset, key, value in contents(log):
        assert key is not None
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


# ----------------------------------------------------------------- the seed example


def test_seed_example_keeps_latest_value_per_key(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, clock)
    keys = [b"A", b"B", b"A", b"C", b"B", b"A", b"D", b"C"]
    values = [b"v1", b"v1", b"v2", b"v1", b"v2", b"v3", b"v1", b"v2"]
    append_each(log, list(zip(keys, values, strict=True)))
    log.roll()
    end = log.log_end_offset
    stats = clean_log(log)
    assert stats is not None
    assert contents(log) == [(4, b"B", b"v2"), (5, b"A", b"v3"), (6, b"D", b"v1"), (7, b"C", b"v2")]
    assert log.log_end_offset == end == 8
    assert read_cleaner_checkpoint(log) == 8
    assert (stats.records_read, stats.records_kept) == (8, 4)
    assert stats.bytes_kept < stats.bytes_read
    assert 0 < stats.size_reduction < 1
    # a reader continuing from a gap gets the next record
    assert [r.offset for r in log.read(1)] == [4, 5, 6, 7]
    log.close()
    with open_log(tmp_path, clock) as reopened:
        assert contents(reopened) == [
            (4, b"B", b"v2"),
            (5, b"A", b"v3"),
            (6, b"D", b"v1"),
            (7, b"C", b"v2"),
        ]
        assert reopened.log_end_offset == 8


def test_nothing_due_returns_none(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock) as log:
        append_each(log, [(b"a", b"1"), (b"a", b"2")])
        assert clean_log(log, force=True) is None  # only the active segment
        log.roll()
        assert clean_log(log, force=True) is not None
        assert clean_log(log, force=True) is None  # nothing dirty any more


def test_active_segment_is_never_cleaned(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock) as log:
        append_each(log, [(b"a", b"1"), (b"a", b"2")])
        log.roll()
        append_each(log, [(b"a", b"3"), (b"a", b"4")])
        clean_log(log, force=True)
        assert contents(log) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"a", b"4")]


def test_delete_policy_is_never_compacted(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, cleanup_policy="delete") as log:
        append_each(log, [(b"a", b"1"), (b"a", b"2")])
        log.roll()
        assert clean_log(log, force=True) is None
        assert len(contents(log)) == 2


def test_ratio_threshold_is_honoured_without_force(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.6) as log:
        append_each(log, [(b"k%d" % i, b"x" * 50) for i in range(20)])
        log.roll()
        assert clean_log(log) is not None  # everything dirty: ratio 1.0
        append_each(log, [(b"k%d" % i, b"y" * 50) for i in range(5)])
        log.roll()
        assert clean_log(log) is None  # 5 dirty of 25: ratio 0.2
        assert clean_log(log, force=True) is not None


# ----------------------------------------------------------------- offset map limits


def test_partial_cleaning_with_a_tiny_map_converges(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, segment_bytes=600) as log:
        for round_ in range(3):
            append_each(log, [(b"key-%02d" % i, b"v%d" % round_) for i in range(20)])
        log.roll()
        end = log.log_end_offset
        before = contents(log)
        small = OffsetMap(SLOT_BYTES * 11, load_factor=0.5)  # 11 slots, 5 keys
        stats = clean_log(log, force=True, offset_map=small)
        assert stats is not None
        assert stats.end_offset == 5  # the map filled after 5 keys
        assert read_cleaner_checkpoint(log) == 5
        assert contents(log) == before  # keys 0-4 have later values beyond the mapped range
        passes = 1
        while clean_log(log, force=True, offset_map=small) is not None:
            passes += 1
            assert passes < 40
        assert latest(log) == {b"key-%02d" % i: b"v2" for i in range(20)}
        assert [offset for offset, _, _ in contents(log)] == list(range(40, 60))
        assert log.log_end_offset == end


def test_map_fills_mid_batch(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock) as log:
        log.append([(b"k%d" % i, b"a") for i in range(10)])
        log.append([(b"k%d" % i, b"b") for i in range(10)])
        log.roll()
        small = OffsetMap(SLOT_BYTES * 11, load_factor=0.4)  # 4 keys
        stats = clean_log(log, force=True, offset_map=small)
        assert stats is not None and stats.end_offset == 4
        while clean_log(log, force=True, offset_map=small) is not None:
            pass
        assert contents(log) == [(10 + i, b"k%d" % i, b"b") for i in range(10)]


# ----------------------------------------------------------------- tombstones


def test_cleaning_with_deletes_keeps_tombstones_first(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock) as log:
        append_each(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None), (b"c", b"1"), (b"b", b"2")])
        log.roll()
        stats = clean_log(log, force=True)
        assert stats is not None
        assert contents(log) == [(2, b"a", None), (3, b"c", b"1"), (4, b"b", b"2")]
        tombstone_batch = next(h for _b, h, _r in headers(log) if h.base_offset == 2)
        assert tombstone_batch.delete_horizon_ms == T0 + 1000
        assert stats.pending_delete_horizon_ms == T0 + 1000


def test_tombstone_two_pass_lifecycle(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, delete_retention_ms=10_000) as log:
        append_each(log, [(b"a", b"1"), (b"a", None), (b"b", b"1")])
        log.roll()
        assert clean_log(log) is not None  # first pass: stamps the horizon
        assert (1, b"a", None) in contents(log)
        clock.now = T0 + 9_999
        assert clean_log(log) is None  # not due: horizon not reached, nothing dirty
        append_each(log, [(b"b", b"2")])
        log.roll()
        assert clean_log(log, force=True) is not None
        assert (1, b"a", None) in contents(log)  # still within its horizon
        clock.now = T0 + 10_000
        stats = clean_log(log)  # due by the expired horizon alone
        assert stats is not None and stats.due_reason == "delete horizon"
        assert stats.tombstones_removed == 1
        assert contents(log) == [(3, b"b", b"2")]
        assert clean_log(log) is None  # and nothing is pending any more


def test_horizon_is_stamped_once_and_kept(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, delete_retention_ms=10_000) as log:
        log.append([(b"a", None), (b"b", b"1")])
        log.roll()
        clean_log(log, force=True)
        clock.now = T0 + 5_000
        log.append([(b"b", b"2")])
        log.roll()
        clean_log(log, force=True)  # rewrites the batch (b:1 superseded) keeping its horizon
        batch = next(h for _b, h, _r in headers(log) if h.base_offset == 0)
        assert batch.delete_horizon_ms == T0 + 10_000
        assert batch.records_count == 1


def test_tombstone_at_or_above_barrier_is_never_removed(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, delete_retention_ms=0) as log:
        append_each(log, [(b"a", b"1"), (b"a", None)])
        log.roll()
        append_each(log, [(b"b", b"1"), (b"b", None)])
        log.roll()
        log.cleaning_barrier_offset = 2
        clean_log(log, force=True)
        clean_log(log, force=True)
        clock.now += 1
        clean_log(log)
        # only the segment below the barrier's was cleaned: a's tombstone went, b's stayed
        assert contents(log) == [(2, b"b", b"1"), (3, b"b", None)]
        log.cleaning_barrier_offset = None
        clean_log(log, force=True)
        clock.now += 1
        clean_log(log)
        assert contents(log) == []
        assert log.log_end_offset == 4


def test_expired_tombstones_are_found_after_reopen(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock) as log:
        append_each(log, [(b"a", b"1"), (b"a", None), (b"b", b"1")])
        log.roll()
        clean_log(log)
        assert (1, b"a", None) in contents(log)
    clock.now += 1000
    with open_log(tmp_path, clock) as log:  # a new Log: the horizon is found by a header scan
        stats = clean_log(log)
        assert stats is not None and stats.due_reason == "delete horizon"
        assert contents(log) == [(2, b"b", b"1")]


# ----------------------------------------------------------------- compaction lags


def test_min_compaction_lag_leaves_young_segments_dirty(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, min_compaction_lag_ms=60_000) as log:
        append_each(log, [(b"a", b"1"), (b"a", b"2")])
        log.roll()
        clock.now += 61_000
        append_each(log, [(b"a", b"3"), (b"a", b"4")])
        log.roll()
        stats = clean_log(log, force=True)
        assert stats is not None and stats.end_offset == 2
        assert [o for o, _, _ in contents(log)] == [1, 2, 3]
        clock.now += 61_000
        clean_log(log, force=True)
        assert [o for o, _, _ in contents(log)] == [3]


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path: Path, clock: Clock) -> None:
    settings = {"max_compaction_lag_ms": 5_000, "min_cleanable_dirty_ratio": 0.99}
    with open_log(tmp_path, clock, **settings) as log:
        append_each(log, [(b"k%d" % i, b"x" * 50) for i in range(30)])
        log.roll()
        clean_log(log, force=True)
        append_each(log, [(b"k1", b"y")])
        log.roll()
        assert clean_log(log) is None
        clock.now += 5_001
        stats = clean_log(log)
        assert stats is not None and stats.due_reason == "max compaction lag"


# ----------------------------------------------------------------- segments


def test_small_segments_are_grouped(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, segment_bytes=800) as log:
        for i in range(40):
            log.append([(b"k%d" % (i % 4), b"v%d" % i)])
            if i % 4 == 3:
                log.roll()  # ten segments of ~300 bytes
        before = log.segments[:-1]
        assert len(before) == 10
        clean_log(log, force=True)
        after = log.segments[:-1]
        assert [s.base_offset for s in after] == [0, 8, 16, 24, 32]  # pairs: 2 x 300 <= 800
        assert all(s.size_bytes <= 800 for s in after)
        assert latest(log) == {b"k%d" % k: b"v%d" % (36 + k) for k in range(4)}
        # each merged segment keeps only its last batch (emptied) below the live records
        clean_log(log, force=True)
        assert [o for o, _k, _v in contents(log)] == [36, 37, 38, 39]


def _seg(base: int, size: int, index_bytes: int = 0) -> SourceSegment:
    return SourceSegment(
        base_offset=base,
        next_base_offset=base + 1,
        size_bytes=size,
        offset_index_bytes=index_bytes,
        time_index_bytes=0,
        reader=None,
    )


def test_grouping_respects_size_index_and_int32_offsets() -> None:
    segs = [_seg(0, 300), _seg(10, 300), _seg(20, 300), _seg(30, 50)]
    groups = group_segments_by_size(
        segs, max_size=600, max_index_size=1000, first_uncleanable_offset=40
    )
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30]]
    segs = [_seg(0, 10, 600), _seg(10, 10, 600)]
    groups = group_segments_by_size(
        segs, max_size=600, max_index_size=1000, first_uncleanable_offset=40
    )
    assert len(groups) == 2
    sparse = [_seg(0, 10), _seg(2**31 - 5, 10), _seg(2**31 + 10, 10)]
    groups = group_segments_by_size(
        sparse, max_size=10_000, max_index_size=10_000, first_uncleanable_offset=2**31 + 20
    )
    assert [[s.base_offset for s in g] for g in groups] == [[0], [2**31 - 5, 2**31 + 10]]


def test_emptied_batches_go_unless_they_end_the_round(tmp_path: Path, clock: Clock) -> None:
    """Kafka's rule: an emptied batch is kept only when its next offset is the first
    uncleanable offset (the round's last batch); a segment that empties becomes empty."""
    with open_log(tmp_path, clock, segment_bytes=150) as log:
        log.append([(b"a", b"1")])
        log.append([(b"b", b"1")])
        log.roll()
        log.append([(b"a", b"2"), (b"b", b"2")])
        log.roll()
        clean_log(log, force=True)
        found = [
            (base, h.base_offset, h.last_offset, h.records_count) for base, h, _ in headers(log)
        ]
        assert found == [(2, 2, 3, 2)]  # both batches of segment 0 are gone
        assert [s.base_offset for s in log.segments] == [0, 2, 4]
        assert log.segments[0].size_bytes == 0
        assert contents(log) == [(2, b"a", b"2"), (3, b"b", b"2")]
    with open_log(tmp_path, clock) as log:
        assert (log.log_start_offset, log.log_end_offset) == (0, 4)


def test_the_last_batch_of_the_round_is_kept_empty(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, segment_bytes=150, delete_retention_ms=0) as log:
        log.append([(b"a", b"1")])
        log.append([(b"a", None)])  # the round's last batch: a tombstone
        log.roll()
        clean_log(log, force=True)  # keeps the tombstone, stamps its horizon (now + 0)
        clock.now += 1
        log.append([(b"c", b"1")])
        log.roll()
        clean_log(log, force=True)
        found = [(h.base_offset, h.last_offset, h.records_count) for _base, h, _ in headers(log)]
        assert (1, 1, 0) not in found  # not the last of this round: gone
        assert found[-1] == (2, 2, 1)
    with open_log(tmp_path, clock, segment_bytes=150, delete_retention_ms=0) as log:
        log.append([(b"c", None)])
        log.roll()
        clean_log(log, force=True)
        clock.now += 1
        clean_log(log, force=True)
        found = [(h.base_offset, h.last_offset, h.records_count) for _base, h, _ in headers(log)]
        assert found == [(3, 3, 0)]  # the round's last batch, emptied, keeps offset 3
        assert log.log_end_offset == 4
    with open_log(tmp_path, clock) as log:
        assert log.log_end_offset == 4


def test_many_small_segments_over_few_keys_merge(tmp_path: Path, clock: Clock) -> None:
    """Segments that empty shrink to nothing and merge with their neighbours, pass after pass."""
    with open_log(tmp_path, clock, segment_bytes=120) as log:
        for i in range(60):
            log.append([(b"k%d" % (i % 3), b"v%d" % i)])
        log.roll()
        assert len(log.segments) == 61
        clean_log(log, force=True)  # 60 segments, the last 3 keep their record
        assert [s.size_bytes > 0 for s in log.segments[:60]] == [False] * 57 + [True] * 3
        for i in range(60, 63):  # more dirty data: the next pass merges what emptied
            log.append([(b"k%d" % (i % 3), b"v%d" % i)])
            log.roll()
            clean_log(log, force=True)
        assert len(log.segments) <= 6, [s.size_bytes for s in log.segments]
        assert latest(log) == {b"k0": b"v60", b"k1": b"v61", b"k2": b"v62"}


def test_clean_segment_with_nothing_to_remove_is_not_rewritten(
    tmp_path: Path, clock: Clock
) -> None:
    with open_log(tmp_path, clock, segment_bytes=200) as log:
        append_each(log, [(b"a", b"1"), (b"b", b"1")])
        log.roll()
        clean_log(log, force=True)
        first = log.segments[0]
        inode = first.log_path.stat().st_ino
        append_each(log, [(b"c", b"1"), (b"c", b"2")])
        log.roll()
        stats = clean_log(log, force=True)
        assert stats is not None and stats.segments_untouched >= 1
        assert log.segments[0] is first
        assert first.log_path.stat().st_ino == inode


def test_batches_that_lose_nothing_are_copied_byte_for_byte(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock) as log:
        log.append([(b"a", b"1"), (b"b", b"1")])
        log.append([(b"c", b"1")])
        log.append([(b"c", b"2")])
        log.roll()
        original = {h.base_offset: raw for _b, h, raw in headers(log)}
        clean_log(log, force=True)
        after = {h.base_offset: raw for _b, h, raw in headers(log)}
        assert after[0] == original[0]
        assert after[3] == original[3]
        assert 2 not in after


def test_keyless_records_are_dropped_and_counted(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, cleanup_policy="delete") as log:  # a compacted log refuses them
        log.append([(None, b"x"), (b"a", b"1")])
        log.roll()
    with open_log(tmp_path, clock) as log:  # e.g. a topic whose policy was changed to compact
        stats = clean_log(log, force=True)
        assert stats is not None and stats.invalid_records == 1
        assert contents(log) == [(1, b"a", b"1")]


def test_compact_delete_applies_retention_and_compaction(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock, cleanup_policy="compact,delete", retention_ms=10_000) as log:
        append_each(log, [(b"a", b"1"), (b"b", b"1")])
        log.roll()
        clock.now += 20_000
        append_each(log, [(b"c", b"1"), (b"c", b"2")])
        log.roll()
        assert log.delete_old_segments() == 1
        stats = clean_log(log, force=True)
        assert stats is not None
        assert contents(log) == [(3, b"c", b"2")]
        assert read_cleaner_checkpoint(log) == 4


# ----------------------------------------------------------------- stats, abort, errors


def test_stats_and_summary_line(tmp_path: Path, clock: Clock, caplog: Any) -> None:
    with open_log(tmp_path, clock) as log:
        append_each(log, [(b"k%d" % (i % 10), b"x" * 100) for i in range(100)])
        log.roll()
        with caplog.at_level(logging.INFO, logger="changelog.cleaner.summary"):
            stats = clean_log(log, force=True)
        assert stats is not None
        assert stats.records_read == 100 and stats.records_kept == 10
        assert stats.records_removed == 90
        assert stats.map_records_read == 100
        assert stats.bytes_written == stats.bytes_kept
        assert stats.duration_s > 0 and stats.mb_per_s_read > 0
        assert stats.size_reduction == pytest.approx(1 - stats.bytes_kept / stats.bytes_read)
        assert "size reduction" in caplog.text and "[topic-0]" in caplog.text


def test_abort_deletes_cleaned_files_and_changes_nothing(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock) as log:
        append_each(log, [(b"a", b"1"), (b"a", b"2")])
        log.roll()
        before = contents(log)
        calls = {"n": 0}

        def abort_in_recopy() -> bool:
            calls["n"] += 1
            return calls["n"] > 3

        with pytest.raises(CleanerAbortedError):
            clean_log(log, force=True, abort=abort_in_recopy)
        assert contents(log) == before
        assert not list(log.dir.glob("*.cleaned"))
        assert read_cleaner_checkpoint(log) is None
        with pytest.raises(CleanerAbortedError):
            clean_log(log, force=True, abort=lambda: True)
        assert clean_log(log, force=True) is not None


def test_corrupt_segment_is_reported_with_path_and_position(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock) as log:
        append_each(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3")])
        log.roll()
        segment = log.segments[0]
        second = [p for p, _h, _r in segment.batches()][1]
        with segment.log_path.open("r+b") as handle:
            handle.seek(second + 64)
            byte = handle.read(1)
            handle.seek(second + 64)
            handle.write(bytes([byte[0] ^ 0xFF]))
        with pytest.raises(CorruptRecordError) as info:
            clean_log(log, force=True)
        assert info.value.path == segment.log_path
        assert info.value.position == second
        assert not list(log.dir.glob("*.cleaned"))


def test_dedupe_buffer_is_shared_by_threads(tmp_path: Path, clock: Clock) -> None:
    with open_log(tmp_path, clock) as log:
        append_each(log, [(b"k%d" % i, b"1") for i in range(80)])
        log.roll()
        config = CleanerConfig(dedupe_buffer_size_bytes=2048, threads=2)
        stats = clean_log(log, force=True, config=config)
        assert stats is not None and stats.end_offset == 57  # 1024 bytes: 64 slots, 57 keys


# ----------------------------------------------------------------- crash injection


def _build(path: Path, clock: Clock) -> list[tuple[int, bytes | None, bytes | None]]:
    with open_log(path, clock, segment_bytes=300) as log:
        for i in range(11):
            log.append([(b"k%d" % (i % 3), b"v%d" % i)])  # three segments of four batches
        log.append([(b"k0", None)])
        log.roll()
        return contents(log)


def _build_with_untouched_middle(
    path: Path, clock: Clock
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Three one-segment groups: the first and last lose records, the middle one nothing."""
    keys = [b"a0", b"a1", b"a0", b"a1", b"b0", b"b1", b"b2", b"b3", b"c0", b"c0", b"c1", b"c1"]
    with open_log(path, clock, segment_bytes=300) as log:
        for i, key in enumerate(keys):
            log.append([(key, b"v%d" % i)])  # three segments of four batches
        log.roll()
        return contents(log)


def _count_steps(path: Path, clock: Clock) -> tuple[list[str], list[Any], Any]:
    steps: list[str] = []
    with open_log(path, clock, segment_bytes=300) as log:
        with files.inject_faults(lambda step, _path: steps.append(step)):
            stats = clean_log(log, force=True)
        return steps, contents(log), stats


def test_a_pass_with_an_untouched_group_between_rewritten_ones_swaps_once(
    tmp_path: Path, clock: Clock
) -> None:
    old = _build_with_untouched_middle(tmp_path, clock)
    steps, new, stats = _count_steps(tmp_path, clock)
    assert stats.segments_rewritten == 2 and stats.segments_untouched == 1
    assert stats.groups_swapped == 2
    assert steps.count("replace.fsync_dir") == 1  # S6 once: one replace_segments call
    kept = [b"a0", b"a1", b"b0", b"b1", b"b2", b"b3", b"c0", b"c1"]
    assert [key for _offset, key, _value in new] == kept
    assert [entry for entry in old if entry[1] and entry[1].startswith(b"b")] == new[2:6]


@pytest.mark.parametrize("build", [_build, _build_with_untouched_middle])
def test_crash_after_every_step_leaves_old_or_new(
    tmp_path: Path, clock: Clock, build: Callable[[Path, Clock], Any]
) -> None:
    template = tmp_path / "template"
    old = build(template, clock)
    shutil.copytree(template, tmp_path / "probe")
    steps, new, _stats = _count_steps(tmp_path / "probe", clock)
    assert len(steps) > 10 and new != old
    assert "segment.rename" in steps and "replace.fsync_dir" in steps
    outcomes = set()
    for k in range(len(steps)):
        root = tmp_path / f"crash-{k}"
        shutil.copytree(template, root)

        def crash_at_k(step: str, path: Path, k: int = k, seen: list[int] = [0]) -> None:  # noqa: B006 - a fresh counter per k
            if seen[0] == k:
                raise files.SimulatedCrash(f"{step} {path}")
            seen[0] += 1

        log = open_log(root, clock, segment_bytes=300)
        with pytest.raises(files.SimulatedCrash), files.inject_faults(crash_at_k):
            clean_log(log, force=True)
        log.abandon()
        with open_log(root, clock, segment_bytes=300) as reopened:
            after = contents(reopened)
            assert after in (old, new), f"crash at step {k} ({steps[k]})"
            outcomes.add(after == new)
            assert reopened.log_end_offset == old[-1][0] + 1
            assert not list(reopened.dir.glob("*.cleaned"))
            assert not list(reopened.dir.glob("*.swap"))
            clean_log(reopened, force=True)
            assert contents(reopened) == new
    assert outcomes == {False, True}  # some crashes land before the swap, some after


@pytest.mark.parametrize("how", ["closed", "abandoned"])
def test_clean_log_on_a_closed_log_writes_no_file(tmp_path: Path, clock: Clock, how: str) -> None:
    """A closed (or abandoned) log is refused before the pass reads or writes anything."""
    log = open_log(tmp_path, clock, segment_bytes=200)
    append_each(log, [(f"k{n % 3}".encode(), b"v" * 20) for n in range(60)])
    assert len(log.segments) > 5
    if how == "closed":
        log.close()
    else:
        log.abandon()  # as an I/O error leaves it: descriptors and the lock released
    before = sorted(path.name for path in log.dir.iterdir())
    with pytest.raises(LogClosedError):
        clean_log(log, force=True)
    assert sorted(path.name for path in log.dir.iterdir()) == before
