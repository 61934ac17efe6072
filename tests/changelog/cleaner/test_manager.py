"""Which logs are due and how much is cleanable: Kafka's ``LogCleanerManagerTest`` behaviour.

The range and ratio logic runs against small fakes of the segment and log
protocols (so each case states exactly the sizes and timestamps it needs);
the checkpoint and horizon cases use real logs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog.cleaner.manager import (
    CleanerManager,
    cleanable_offsets,
    log_to_clean,
    read_cleaner_checkpoint,
    record_pending_delete_horizon,
    write_cleaner_checkpoint,
)
from changelog.config import LogConfig
from changelog.errors import CorruptCheckpointError
from changelog.fs.checkpoint import CLEANER_CHECKPOINT

NOW = 1_000_000


@attrs.define
class FakeSegment:
    base_offset: int
    size_bytes: int = 100
    largest_timestamp_ms: int = 0
    first_timestamp_ms: int | None = None
    log_path: Path = Path("fake.log")

    def first_batch_timestamp_ms(self) -> int | None:
        return self.first_timestamp_ms

    def open_reader(self) -> Any:
        return FakeReader()


class FakeReader:
    path = Path("fake.log")

    def headers(self) -> Iterator[Any]:
        return iter(())

    def close(self) -> None:
        pass


@attrs.define(eq=False)
class FakeLog:
    dir: Path
    segments: list[FakeSegment]
    config: LogConfig = attrs.field(factory=LogConfig)
    log_end_offset: int = 1000
    log_start_offset: int = 0
    cleaning_barrier_offset: int | None = None
    topic: str = "t"
    partition: int = 0
    lock: Any = attrs.field(factory=threading.RLock)

    @property
    def active_segment(self) -> FakeSegment:
        return self.segments[-1]

    @property
    def last_stable_offset(self) -> int:
        return self.log_end_offset


def make_log(tmp_path: Path, bases: list[int], name: str = "t-0", **kwargs: Any) -> FakeLog:
    directory = tmp_path / name
    directory.mkdir(exist_ok=True)
    log = FakeLog(directory, [FakeSegment(base) for base in bases], **kwargs)
    record_pending_delete_horizon(log, None)  # nothing pending: no header scan of the fake
    return log


# ----------------------------------------------------------------- cleanable offsets


def test_whole_log_is_dirty_without_a_checkpoint(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20, 30])
    assert cleanable_offsets(log, None, NOW) == (0, 30, False)


def test_checkpoint_below_log_start_is_reset(tmp_path: Path) -> None:
    log = make_log(tmp_path, [10, 20, 30], log_start_offset=10)
    assert cleanable_offsets(log, 5, NOW) == (10, 30, True)


def test_checkpoint_above_log_end_is_reset(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20], log_end_offset=25)
    assert cleanable_offsets(log, 40, NOW) == (0, 20, True)


def test_active_segment_is_never_cleanable(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0])
    assert cleanable_offsets(log, None, NOW) == (0, 0, False)


def test_min_compaction_lag_holds_back_young_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20, 30], config=LogConfig(min_compaction_lag_ms=60_000))
    log.segments[0].largest_timestamp_ms = NOW - 120_000
    log.segments[1].largest_timestamp_ms = NOW - 30_000  # younger than the lag
    log.segments[2].largest_timestamp_ms = NOW - 120_000
    assert cleanable_offsets(log, None, NOW) == (0, 10, False)


def test_min_compaction_lag_of_the_first_dirty_segment_allows_nothing(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20], config=LogConfig(min_compaction_lag_ms=60_000))
    for segment in log.segments:
        segment.largest_timestamp_ms = NOW
    assert cleanable_offsets(log, None, NOW) == (0, 0, False)


def test_barrier_holds_back_the_segment_holding_it(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20, 30], cleaning_barrier_offset=15)
    assert cleanable_offsets(log, None, NOW) == (0, 10, False)
    log.cleaning_barrier_offset = 10
    assert cleanable_offsets(log, None, NOW) == (0, 10, False)
    log.cleaning_barrier_offset = 5000
    assert cleanable_offsets(log, None, NOW) == (0, 30, False)


def test_first_uncleanable_never_below_first_dirty(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20, 30], cleaning_barrier_offset=5)
    assert cleanable_offsets(log, 25, NOW) == (25, 25, False)


# ----------------------------------------------------------------- ratio and due reasons


def test_dirty_ratio_counts_clean_and_dirty_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20, 30, 40])
    measured = log_to_clean(log, now_ms=NOW, checkpoint_offset=20)
    assert (measured.clean_bytes, measured.dirty_bytes) == (200, 200)
    assert measured.dirty_ratio == 0.5
    assert measured.due_reason is None  # not above the default 0.5
    log.segments[2].size_bytes = 101
    assert log_to_clean(log, now_ms=NOW, checkpoint_offset=20).due_reason == "dirty ratio"


def test_empty_range_inside_a_segment_has_no_dirty_bytes(tmp_path: Path) -> None:
    # a partial pass stopped at 15, inside segment 12; the barrier holds segment 12 back
    log = make_log(tmp_path, [0, 9, 12, 20, 23], cleaning_barrier_offset=14)
    measured = log_to_clean(log, now_ms=NOW, checkpoint_offset=15, force=True)
    assert (measured.first_dirty_offset, measured.first_uncleanable_offset) == (15, 15)
    assert measured.dirty_bytes == 0
    assert measured.due_reason is None


def test_force_ignores_only_the_ratio(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20, 30, 40])
    assert log_to_clean(log, now_ms=NOW, checkpoint_offset=30, force=True).due_reason == "forced"
    assert log_to_clean(log, now_ms=NOW, checkpoint_offset=40, force=True).due_reason is None


def test_max_compaction_lag_makes_a_log_due(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20, 30], config=LogConfig(max_compaction_lag_ms=60_000))
    log.segments[2].first_timestamp_ms = NOW - 90_000
    measured = log_to_clean(log, now_ms=NOW, checkpoint_offset=20)
    assert measured.dirty_ratio < 0.5
    assert measured.max_compaction_delay_ms == 30_000
    assert measured.due_reason == "max compaction lag"


def test_max_compaction_lag_ignores_clean_and_young_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20, 30], config=LogConfig(max_compaction_lag_ms=60_000))
    log.segments[0].first_timestamp_ms = NOW - 900_000  # clean
    log.segments[2].first_timestamp_ms = NOW - 10_000  # dirty but young
    measured = log_to_clean(log, now_ms=NOW, checkpoint_offset=20)
    assert measured.max_compaction_delay_ms == 0
    assert measured.due_reason is None


def test_expired_delete_horizon_makes_a_quiet_log_due(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20])
    record_pending_delete_horizon(log, NOW - 1)
    measured = log_to_clean(log, now_ms=NOW, checkpoint_offset=20)
    assert measured.dirty_bytes == 0
    assert measured.due_reason == "delete horizon"
    record_pending_delete_horizon(log, NOW + 1)
    assert log_to_clean(log, now_ms=NOW, checkpoint_offset=20).due_reason is None


# ----------------------------------------------------------------- many logs


def test_grab_filthiest_log_picks_highest_ratio_and_marks_it(tmp_path: Path) -> None:
    logs = [make_log(tmp_path, [0, 10, 20, 30, 40], name=f"t-{i}") for i in range(3)]
    for log, checkpoint in zip(logs, (10, 0, 20), strict=True):
        write_cleaner_checkpoint_fake(log, checkpoint)
    manager = CleanerManager()
    first = manager.grab_filthiest_log(logs, NOW)
    assert first is not None and first.log is logs[1]  # all dirty: ratio 1.0
    assert manager.in_progress(logs[1])
    second = manager.grab_filthiest_log(logs, NOW)
    assert second is not None and second.log is logs[0]  # 0.75 beats 0.5 (not due)
    assert manager.grab_filthiest_log(logs, NOW) is None
    manager.done(logs[1])
    third = manager.grab_filthiest_log(logs, NOW)
    assert third is not None and third.log is logs[1]


def test_overdue_log_qualifies_below_the_ratio(tmp_path: Path) -> None:
    config = LogConfig(max_compaction_lag_ms=1000)
    quiet = make_log(tmp_path, [0, 10, 20, 30], name="t-0", config=config)
    write_cleaner_checkpoint_fake(quiet, 20)
    quiet.segments[2].first_timestamp_ms = NOW - 5000
    manager = CleanerManager()
    chosen = manager.grab_filthiest_log([quiet], NOW)
    assert chosen is not None and chosen.due_reason == "max compaction lag"


def test_uncleanable_and_paused_logs_are_skipped(tmp_path: Path) -> None:
    a = make_log(tmp_path, [0, 10, 20], name="t-0")
    b = make_log(tmp_path, [0, 10, 20], name="t-1")
    manager = CleanerManager()
    manager.mark_uncleanable(a, "boom", now_ms=NOW)
    manager.pause(b)
    assert manager.grab_filthiest_log([a, b], NOW) is None
    assert manager.uncleanable() == {a.dir: "boom"}
    manager.resume(b)
    chosen = manager.grab_filthiest_log([a, b], NOW)
    assert chosen is not None and chosen.log is b
    manager.reset_uncleanable(a)
    chosen = manager.grab_filthiest_log([a, b], NOW)
    assert chosen is not None and chosen.log is a


def test_non_compacted_logs_are_never_chosen(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20], config=LogConfig(cleanup_policy="delete"))
    assert CleanerManager().grab_filthiest_log([log], NOW) is None


def test_a_log_that_fails_to_measure_is_marked_uncleanable(tmp_path: Path) -> None:
    good = make_log(tmp_path, [0, 10, 20], name="t-0")
    bad = make_log(tmp_path, [0, 10, 20], name="t-1")
    (bad.dir / CLEANER_CHECKPOINT).write_text("garbage\n")
    manager = CleanerManager()
    chosen = manager.grab_filthiest_log([bad, good], NOW)
    assert chosen is not None and chosen.log is good
    assert bad.dir in manager.uncleanable()


# ----------------------------------------------------------------- checkpoint file


def write_cleaner_checkpoint_fake(log: FakeLog, offset: int) -> None:
    write_cleaner_checkpoint(log, offset)


def test_checkpoint_round_trip_in_kafka_format(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10], name="orders-3", topic="orders", partition=3)
    assert read_cleaner_checkpoint(log) is None
    write_cleaner_checkpoint(log, 42)
    assert read_cleaner_checkpoint(log) == 42
    assert (log.dir / CLEANER_CHECKPOINT).read_text() == "0\n1\norders 3 42\n"


def test_corrupt_checkpoint_is_reported_not_ignored(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10])
    (log.dir / CLEANER_CHECKPOINT).write_text("0\n1\nt 0 notanumber\n")
    with pytest.raises(CorruptCheckpointError) as info:
        read_cleaner_checkpoint(log)
    assert info.value.path == log.dir / CLEANER_CHECKPOINT


def test_an_uncleanable_log_is_retried_after_a_doubling_backoff(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20], name="t-0")
    manager = CleanerManager(retry_backoff_ms=1000, retry_backoff_max_ms=3000)
    assert manager.mark_uncleanable(log, "ENOSPC", now_ms=NOW) == NOW + 1000
    assert manager.grab_filthiest_log([log], NOW + 999) is None
    chosen = manager.grab_filthiest_log([log], NOW + 1000)
    assert chosen is not None and chosen.log is log
    assert log.dir in manager.uncleanable()  # still counted until a pass succeeds
    assert manager.mark_uncleanable(log, "ENOSPC", now_ms=NOW + 1000) == NOW + 3000  # 2 s
    assert manager.grab_filthiest_log([log], NOW + 2999) is None
    assert manager.grab_filthiest_log([log], NOW + 3000) is not None
    assert manager.mark_uncleanable(log, "ENOSPC", now_ms=NOW + 3000) == NOW + 6000  # capped 3 s
    assert manager.retry_at_ms(log) == NOW + 6000
    assert manager.grab_filthiest_log([log], NOW + 6000) is not None
    manager.done(log, cleaned=True)
    assert manager.uncleanable() == {}
    assert manager.retry_at_ms(log) is None


def test_an_aborted_retry_does_not_clear_the_failure(tmp_path: Path) -> None:
    log = make_log(tmp_path, [0, 10, 20], name="t-0")
    manager = CleanerManager(retry_backoff_ms=10, retry_backoff_max_ms=10)
    manager.mark_uncleanable(log, "killed worker", now_ms=NOW)
    assert manager.grab_filthiest_log([log], NOW + 10) is not None
    manager.done(log)  # aborted: not a success
    assert log.dir in manager.uncleanable()
