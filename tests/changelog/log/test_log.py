"""Log: append/read/roll/flush/truncate/retention/replace_segments/close, black-box."""

from __future__ import annotations

import errno
import itertools
import os
import subprocess
import sys
import threading
from pathlib import Path

import attrs
import pytest

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from changelog.errors import (
    CleanerAbortedError,
    InvalidConfigError,
    InvalidRecordError,
    LogClosedError,
    LogFailedError,
    LogLockedError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from changelog.fs import files
from changelog.fs.checkpoint import RECOVERY_POINT_CHECKPOINT
from changelog.fs.files import CLEAN_SHUTDOWN_FILE
from changelog.log.log import Log, parse_topic_partition
from changelog.record.batch import encode_records
from changelog.segment.segment import LogSegment
from tests.changelog.conftest import FakeClock, records


def kv(
    log: Log, start: int = 0, max_offset: int | None = None
) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.read(start, max_offset=max_offset)]


def fill(log: Log, batches: int, per_batch: int = 3) -> None:
    for n in range(batches):
        log.append(records(n * per_batch, per_batch))


# ----------------------------------------------------------------- opening


def test_topic_and_partition_from_the_directory_name(tmp_path: Path) -> None:
    assert parse_topic_partition(tmp_path / "orders-3") == ("orders", 3)
    assert parse_topic_partition(tmp_path / "my-app-store-changelog-12") == (
        "my-app-store-changelog",
        12,
    )
    for bad in ("orders", "orders-", "-3", "orders-x", "orders-٣"):
        with pytest.raises(InvalidConfigError):
            parse_topic_partition(tmp_path / bad)
    with pytest.raises(InvalidConfigError):
        Log.open(tmp_path / "nopartition")
    assert not (tmp_path / "nopartition").exists()


def test_open_creates_directory_and_one_empty_segment(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    with Log.open(log_dir, small_config, clock) as log:
        assert log.dir == log_dir
        assert (log.topic, log.partition) == ("changelog", 0)
        assert log.config is small_config
        assert log.clock is clock
        assert [s.base_offset for s in log.segments] == [0]
        assert log.active_segment is log.segments[-1]
        assert (log.log_start_offset, log.log_end_offset) == (0, 0)
        assert list(log.read()) == []
    assert (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert (log_dir / "00000000000000000000.log").exists()


def test_second_opener_gets_lock_error(log_dir: Path) -> None:
    with Log.open(log_dir):
        with pytest.raises(LogLockedError) as info:
            Log.open(log_dir)
        assert str(os.getpid()) in str(info.value)
        code = (
            "import sys\nfrom changelog.log.log import Log\nfrom changelog.errors import LogLockedError\n"
            "try:\n    Log.open(sys.argv[1])\nexcept LogLockedError:\n    sys.exit(7)\n"
        )
        child = subprocess.run(
            [sys.executable, "-c", code, str(log_dir)], check=False, capture_output=True
        )
        assert child.returncode == 7, child.stderr
    with Log.open(log_dir):
        pass


# ----------------------------------------------------------------- append and read


def test_append_assigns_dense_offsets_and_reads_back(open_log: Log, clock: FakeClock) -> None:
    info = open_log.append([(b"a", b"1"), (b"b", None), (None, b"3")])
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert info.timestamp_ms == clock()
    assert info.flushed
    info2 = open_log.append([(b"c", b"4")], timestamp_ms=42)
    assert (info2.first_offset, info2.last_offset, info2.timestamp_ms) == (3, 3, 42)
    assert open_log.log_end_offset == 4
    got = list(open_log.read())
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in got] == [
        (0, b"a", b"1", clock()),
        (1, b"b", None, clock()),
        (2, None, b"3", clock()),
        (3, b"c", b"4", 42),
    ]
    assert all(r.headers == () for r in got)


def test_read_from_middle_of_batch_and_max_offset(open_log: Log) -> None:
    open_log.append(records(0, 5))
    open_log.append(records(5, 5))
    assert [o for o, _, _ in kv(open_log, 2)] == list(range(2, 10))
    assert [o for o, _, _ in kv(open_log, 2, max_offset=7)] == list(range(2, 7))
    assert kv(open_log, 10) == []
    assert kv(open_log, 3, max_offset=3) == []
    headers = [h.base_offset for h, _ in open_log.read_batches(6)]
    assert headers == [5]


def test_read_out_of_range(open_log: Log) -> None:
    open_log.append(records(0, 2))
    with pytest.raises(OffsetOutOfRangeError) as info:
        list(open_log.read(3))
    assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 2)
    with pytest.raises(OffsetOutOfRangeError):
        list(open_log.read(-1))


def test_bad_records_write_nothing(open_log: Log) -> None:
    open_log.append(records(0, 1))
    size = open_log.active_segment.size_bytes
    for bad in ([], [("k", b"v")], [(b"k", 3)], [(b"k",)], "kv", [None]):
        with pytest.raises(InvalidRecordError):
            open_log.append(bad)  # type: ignore[arg-type]
    assert open_log.log_end_offset == 1
    assert open_log.active_segment.size_bytes == size


def test_too_large_batch_writes_nothing(log_dir: Path, clock: FakeClock) -> None:
    with Log.open(log_dir, LogConfig(max_message_bytes=200), clock) as log:
        with pytest.raises(RecordTooLargeError) as info:
            log.append([(b"k", b"v" * 300)])
        assert info.value.limit == 200
        assert log.log_end_offset == 0
        assert log.active_segment.size_bytes == 0
        log.append([(b"k", b"v" * 10)])
        assert log.log_end_offset == 1


def test_read_is_a_snapshot(open_log: Log) -> None:
    open_log.append(records(0, 2))
    reader = open_log.read()
    first = next(reader)
    open_log.append(records(2, 2))
    open_log.roll()
    open_log.append(records(4, 2))
    assert [first.offset] + [r.offset for r in reader] == [0, 1]
    assert [o for o, _, _ in kv(open_log)] == list(range(6))


def test_closed_log_refuses_use(log_dir: Path) -> None:
    log = Log.open(log_dir)
    log.close()
    log.close()
    assert log.closed
    for action in (
        lambda: log.append(records(0, 1)),
        lambda: list(log.read()),
        log.roll,
        log.flush,
        lambda: log.truncate_to(0),
        log.delete_old_segments,
    ):
        with pytest.raises(LogClosedError):
            action()


# ----------------------------------------------------------------- rolling


def test_rolls_on_segment_bytes_and_reads_across_segments(open_log: Log) -> None:
    fill(open_log, 40)
    segments = open_log.segments
    assert len(segments) > 3
    assert all(s.size_bytes <= 1024 for s in segments)
    bases = [s.base_offset for s in segments]
    assert bases == sorted(bases) and bases[0] == 0
    for previous, segment in itertools.pairwise(segments):
        assert previous.read_next_offset() == segment.base_offset
    assert [o for o, _, _ in kv(open_log)] == list(range(120))
    for start in (0, 1, bases[2], bases[2] - 1, bases[2] + 1, 119, 120):
        assert [o for o, _, _ in kv(open_log, start)] == list(range(start, 120))


def test_explicit_roll_and_empty_roll_is_noop(open_log: Log) -> None:
    assert open_log.roll() is open_log.active_segment
    open_log.append(records(0, 2))
    new = open_log.roll()
    assert new.base_offset == 2
    assert open_log.roll() is new
    assert [s.base_offset for s in open_log.segments] == [0, 2]
    assert open_log.recovery_point == 2


def test_rolls_on_segment_ms(log_dir: Path, clock: FakeClock) -> None:
    config = LogConfig(segment_ms=1000)
    with Log.open(log_dir, config, clock) as log:
        log.append(records(0, 1))
        clock.advance(1000)
        log.append(records(1, 1))
        assert len(log.segments) == 1
        clock.advance(1)
        log.append(records(2, 1))
        assert [s.base_offset for s in log.segments] == [0, 2]


def test_time_roll_measures_record_timestamps_not_the_clock(
    log_dir: Path, clock: FakeClock
) -> None:
    """Kafka's ``LogSegment.shouldRoll``: the incoming batch's max timestamp minus the
    first batch's, so batches stamped years before the clock (a backfill, a versioned
    store fed old event times) share one segment until *their* times span ``segment_ms``."""
    config = LogConfig(segment_ms=1000)
    old = clock() - 5 * 365 * 24 * 3600 * 1000
    with Log.open(log_dir, config, clock) as log:
        for n in range(200):
            log.append(records(n, 1), timestamp_ms=old + n * 5)  # spans 995 ms
            clock.advance(60_000)  # the clock runs far past segment_ms meanwhile
        assert [s.base_offset for s in log.segments] == [0]
        log.append(records(200, 1), timestamp_ms=old + 1001)
        assert [s.base_offset for s in log.segments] == [0, 200]
        # a batch stamped at the clock measures from the old first batch too: one roll,
        # and the old times after it do not roll again
        log.append(records(201, 1))
        for n in range(202, 220):
            log.append(records(n, 1), timestamp_ms=old + 2000 + n)
        assert [s.base_offset for s in log.segments] == [0, 200, 201]


def test_rolls_on_full_index(log_dir: Path, clock: FakeClock) -> None:
    config = LogConfig(
        index_interval_bytes=0, segment_index_bytes=36
    )  # time index: 3 slots, 2 usable
    with Log.open(log_dir, config, clock) as log:
        for n in range(10):
            log.append(records(n, 1), timestamp_ms=1000 + n)
        assert len(log.segments) > 2
        assert [o for o, _, _ in kv(log)] == list(range(10))


# ----------------------------------------------------------------- flush policy


def test_flush_messages_policy(log_dir: Path, clock: FakeClock) -> None:
    with Log.open(log_dir, LogConfig(flush_messages=5), clock) as log:
        assert not log.append(records(0, 2)).flushed
        assert log.recovery_point == 0
        assert not log.append(records(2, 2)).flushed
        assert log.append(records(4, 1)).flushed
        assert log.recovery_point == 5
        assert not log.append(records(5, 1)).flushed
        log.flush()
        assert log.recovery_point == 6


def test_flush_ms_policy(log_dir: Path, clock: FakeClock) -> None:
    with Log.open(log_dir, LogConfig(flush_messages=10**9, flush_ms=100), clock) as log:
        assert not log.append(records(0, 1)).flushed
        clock.advance(99)
        assert not log.append(records(1, 1)).flushed
        clock.advance(1)
        assert log.append(records(2, 1)).flushed


# ----------------------------------------------------------------- close and reopen


def test_close_and_reopen_keeps_everything(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    with Log.open(log_dir, small_config, clock) as log:
        fill(log, 30)
        before = kv(log)
        bases = [s.base_offset for s in log.segments]
    assert (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert (log_dir / RECOVERY_POINT_CHECKPOINT).read_text().splitlines()[2] == "changelog 0 90"
    with Log.open(log_dir, small_config, clock) as log:
        assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
        assert kv(log) == before
        assert [s.base_offset for s in log.segments] == bases
        assert log.log_end_offset == 90
        assert log.recovery_point == 90
        log.append(records(90, 1))
        assert log.read(90).__next__().offset == 90


# ----------------------------------------------------------------- truncation


def test_truncate_to(open_log: Log) -> None:
    fill(open_log, 30)
    with pytest.raises(OffsetOutOfRangeError):
        open_log.truncate_to(91)
    assert open_log.truncate_to(90) == 90
    assert open_log.truncate_to(60) == 60
    assert open_log.log_end_offset == 60
    assert all(s.base_offset <= 60 for s in open_log.segments)
    assert [o for o, _, _ in kv(open_log)] == list(range(60))
    assert open_log.truncate_to(10) == 9  # offset 10 is inside the batch 9..11
    assert [o for o, _, _ in kv(open_log)] == list(range(9))
    info = open_log.append(records(9, 1))
    assert info.first_offset == 9
    assert open_log.recovery_point <= 10


def test_truncate_survives_reopen(log_dir: Path, small_config: LogConfig, clock: FakeClock) -> None:
    with Log.open(log_dir, small_config, clock) as log:
        fill(log, 30)
        log.truncate_to(30)
        log.abandon()
    with Log.open(log_dir, small_config, clock) as log:
        assert log.log_end_offset == 30
        assert [o for o, _, _ in kv(log)] == list(range(30))


# ----------------------------------------------------------------- retention


def test_retention_by_time(log_dir: Path, clock: FakeClock) -> None:
    config = LogConfig(
        segment_bytes=1024, cleanup_policy="delete", retention_ms=10_000, file_delete_delay_ms=0
    )
    with Log.open(log_dir, config, clock) as log:
        fill(log, 30)
        segments = log.segments
        assert len(segments) >= 3
        assert log.delete_old_segments() == 0
        clock.advance(10_000)
        assert log.delete_old_segments() == 0  # not older than retention_ms yet
        clock.advance(1)
        deleted = log.delete_old_segments()
        assert deleted == len(segments) - 1  # everything but the active segment
        assert log.segments == [segments[-1]]
        assert log.log_start_offset == segments[-1].base_offset
        assert log.log_end_offset == 90
        with pytest.raises(OffsetOutOfRangeError):
            list(log.read(0))
        assert [o for o, _, _ in kv(log, log.log_start_offset)] == list(
            range(log.log_start_offset, 90)
        )
        assert not any(p.name.endswith(".deleted") for p in log_dir.iterdir())
    with Log.open(log_dir, config, clock) as log:
        assert log.log_start_offset == segments[-1].base_offset


def test_retention_by_time_is_per_segment_largest_timestamp(
    log_dir: Path, clock: FakeClock
) -> None:
    config = LogConfig(cleanup_policy="delete", retention_ms=500, file_delete_delay_ms=0)
    with Log.open(log_dir, config, clock) as log:
        log.append(records(0, 1), timestamp_ms=1000)
        log.roll()
        log.append(records(1, 1), timestamp_ms=2000)
        log.roll()
        log.append(records(2, 1), timestamp_ms=3000)
        clock.now_ms = 2400
        assert log.delete_old_segments() == 1
        assert log.log_start_offset == 1
        clock.now_ms = 10**9
        assert log.delete_old_segments() == 1
        assert log.delete_old_segments() == 0  # the active segment stays
        assert log.log_end_offset == 3


def test_retention_by_size(log_dir: Path, clock: FakeClock) -> None:
    config = LogConfig(
        segment_bytes=1024, cleanup_policy="delete", retention_bytes=2048, file_delete_delay_ms=0
    )
    with Log.open(log_dir, config, clock) as log:
        fill(log, 60)
        total = log.size_bytes
        assert total > 4096
        deleted = log.delete_old_segments()
        assert deleted > 0
        assert log.size_bytes >= 2048
        assert log.size_bytes - log.segments[0].size_bytes < 2048
        assert log.log_start_offset == log.segments[0].base_offset


def test_compact_policy_keeps_old_segments(open_log: Log, clock: FakeClock) -> None:
    fill(open_log, 30)
    clock.advance(10**12)
    assert open_log.delete_old_segments() == 0


def test_file_delete_delay(log_dir: Path, clock: FakeClock) -> None:
    config = LogConfig(cleanup_policy="delete", retention_ms=0, file_delete_delay_ms=5000)
    with Log.open(log_dir, config, clock) as log:
        log.append(records(0, 1))
        log.roll()
        log.append(records(1, 1))
        clock.advance(1)
        assert log.delete_old_segments() == 1
        deleted = sorted(p.name for p in log_dir.iterdir() if p.name.endswith(".deleted"))
        assert deleted == [
            "00000000000000000000.index.deleted",
            "00000000000000000000.log.deleted",
            "00000000000000000000.timeindex.deleted",
        ]
        clock.advance(4999)
        log.delete_old_segments()
        assert any(p.name.endswith(".deleted") for p in log_dir.iterdir())
        clock.advance(1)
        log.delete_old_segments()
        assert not any(p.name.endswith(".deleted") for p in log_dir.iterdir())


# ----------------------------------------------------------------- replace_segments


def _cleaned_copy(log: Log, old: list[LogSegment], keep: set[int]) -> LogSegment:
    """A ``.cleaned`` segment holding only the records of ``old`` whose offsets are in ``keep``."""
    new = LogSegment.create(
        log.dir, old[0].base_offset, config=log.config, file_suffix=files.CLEANED_SUFFIX
    )
    for segment in old:
        for position, header, data in segment.batches():
            from changelog.record.batch import decode_records  # noqa: PLC0415

            kept = [
                r
                for r in decode_records(data, path=segment.log_path, position=position)
                if r.offset in keep
            ]
            batch = encode_records(
                kept, base_offset=header.base_offset, last_offset_delta=header.last_offset_delta
            )
            new.append(
                batch,
                largest_offset=header.last_offset,
                largest_timestamp_ms=header.max_timestamp,
                offset_of_max_timestamp=header.last_offset,
            )
    return new


def test_replace_segments_and_read_from_gap(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    with Log.open(log_dir, small_config, clock) as log:
        fill(log, 30)
        old = log.segments[:3]
        end = old[-1].read_next_offset()
        keep = {o for o in range(end) if o % 3 == 2}
        reader = log.read()  # a snapshot from before the swap
        first = next(reader)
        new = _cleaned_copy(log, old, keep)
        log.replace_segments([new], old)
        assert log.segments[0] is new
        assert all(s.closed for s in old)
        expected = sorted(keep) + list(range(end, 90))
        assert [o for o, _, _ in kv(log)] == expected
        assert [o for o, _, _ in kv(log, 3)] == [o for o in expected if o >= 3]
        assert next(log.read(3)).offset == 5  # from inside a gap: the next record
        assert [first.offset] + [r.offset for r in reader] == list(range(90))  # unaffected
        names = {p.name for p in log_dir.iterdir()}
        assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in names)
    with Log.open(log_dir, small_config, clock) as log:
        assert [o for o, _, _ in kv(log)] == expected


def test_replace_segments_refuses_stale_or_active(open_log: Log) -> None:
    fill(open_log, 30)
    active = open_log.active_segment
    new = LogSegment.create(
        open_log.dir,
        active.base_offset + 1000,
        config=open_log.config,
        file_suffix=files.CLEANED_SUFFIX,
    )
    with pytest.raises(CleanerAbortedError):
        open_log.replace_segments([new], [active])
    assert not new.log_path.exists()
    assert open_log.active_segment is active


def test_clean_delegates_to_the_cleaner(open_log: Log) -> None:
    fill(open_log, 5)
    open_log.cleaning_barrier_offset = 3
    assert open_log.cleaning_barrier_offset == 3
    clean_log(open_log, force=True)  # runs whatever the cleaner decides; must not corrupt the log
    assert [o for o, _, _ in kv(open_log)][-1] == 14


# ----------------------------------------------------------------- threads


def test_concurrent_appends_and_reads(open_log: Log) -> None:
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                seen = [r.offset for r in open_log.read()]
                assert seen == list(range(len(seen)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for n in range(100):
            open_log.append(records(n * 2, 2))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors
    assert [o for o, _, _ in kv(open_log)] == list(range(200))


# ----------------------------------------------------------------- storage failures


def _failing(step_name: str) -> files.FaultHook:
    def hook(step: str, path: Path) -> None:
        if step == step_name:
            raise LogStorageError(path, step, OSError(errno.EIO, "Input/output error"))

    return hook


@pytest.mark.parametrize("step", ["segment.append", "index.append"])
def test_failed_write_fails_the_log_until_reopened(
    log_dir: Path, small_config: LogConfig, clock: FakeClock, step: str
) -> None:
    """Nothing is acknowledged on top of a partial write: the log refuses every call, the
    failed batch is cut back, and reopening recovers exactly the acknowledged batches."""
    log = Log.open(log_dir, attrs.evolve(small_config, index_interval_bytes=0), clock)
    log.append(records(0, 2))
    log.append(records(2, 2))
    size = log.active_segment.size_bytes
    with files.inject_faults(_failing(step)), pytest.raises(LogStorageError):
        log.append(records(4, 2))
    assert log.failed is not None
    with pytest.raises(LogFailedError) as info:
        log.append(records(4, 2))
    assert info.value.cause is log.failed
    assert log.active_segment.size_bytes == size
    log.close()  # a no-op
    with Log.open(log_dir, small_config, clock) as reopened:
        assert [o for o, _, _ in kv(reopened)] == [0, 1, 2, 3]
        reopened.append(records(4, 2))
        assert [o for o, _, _ in kv(reopened)] == [0, 1, 2, 3, 4, 5]


def test_failed_fsync_abandons_the_log(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    log = Log.open(log_dir, small_config, clock)
    log.append(records(0, 2))
    with files.inject_faults(_failing("segment.flush")), pytest.raises(LogStorageError) as info:
        log.append(records(2, 2))
    assert info.value.errno == errno.EIO
    with pytest.raises(LogClosedError, match="failed"):
        log.append(records(4, 1))
    with pytest.raises(LogClosedError):
        list(log.read())
    log.close()  # a no-op: nothing more is written
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    with Log.open(log_dir, small_config, clock) as reopened:  # recovery runs; the lock was released
        assert reopened.log_end_offset in (2, 4)


def test_offset_for_timestamp_across_segments(open_log: Log) -> None:
    for n in range(30):
        open_log.append(records(n * 3, 3), timestamp_ms=1000 + n * 10)
    assert len(open_log.segments) > 2
    assert open_log.offset_for_timestamp(0) == 0
    assert open_log.offset_for_timestamp(1000) == 0
    assert open_log.offset_for_timestamp(1001) == 3
    assert open_log.offset_for_timestamp(1150) == 45
    assert open_log.offset_for_timestamp(1290) == 87
    assert open_log.offset_for_timestamp(1291) is None
