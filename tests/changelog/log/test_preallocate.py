"""The active segment's preallocated ``.log`` (``LogConfig.preallocate``): zeros ahead of the
data, ``fdatasync`` on the append path, trimmed at roll and clean close, cut after a crash.

A crash leaves the zeros past the last batch: the loader cuts them as the end of the log
(pass L8).  A write cut short by a power cut inside them leaves whole 512-byte sectors
zero: cut too.  Anything else after the last batch (a whole batch damaged, bytes that
are not a batch, damage that does not stop at a sector) is refused, as without zeros.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from changelog.config import LogConfig
from changelog.errors import CorruptRecordError, LogFailedError, LogStorageError
from changelog.fs import files
from changelog.log.load_plan import plan_load
from changelog.log.log import Log
from changelog.segment.segment import LARGE_APPEND_BYTES
from tests.changelog.conftest import FakeClock, records

SECTOR = 512


@pytest.fixture
def config() -> LogConfig:
    """No roll by size in these tests (segments of 64 KiB), extents of 4 KiB."""
    return LogConfig(
        segment_bytes=64 * 1024,
        preallocate_extent_bytes=4096,
        index_interval_bytes=100,
        cleanup_policy="delete",
        retention_ms=-1,
    )


def _state(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]


def _active_path(log_dir: Path) -> Path:
    return max(log_dir.glob("*.log"))


def _write_crashed_log(
    log_dir: Path, config: LogConfig, clock: FakeClock, count: int = 12, *, last_value: int = 10
) -> tuple[list[tuple[int, bytes | None, bytes | None]], int, int]:
    """Appends ``count`` batches (the last one of ``last_value``-byte values), then a crash:
    returns the content, and the last batch's position and size."""
    log = Log.open(log_dir, config, clock)
    for i in range(count - 1):
        log.append(records(i, 2))
    position = log.active_segment.size_bytes
    info = log.append(records(count, 1, value_size=last_value))
    content = _state(log)
    log.abandon()
    return content, position, info.size_bytes


def _zero(path: Path, start: int, end: int) -> None:
    with path.open("r+b") as f:
        f.seek(start)
        f.write(bytes(end - start))


def test_appends_write_into_zeros_and_the_file_grows_by_extents(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    with Log.open(log_dir, config, clock) as log:
        log.append(records(0, 1))
        segment = log.active_segment
        path = segment.log_path
        assert segment.allocated_bytes == segment.size_bytes + 4096 == path.stat().st_size
        allocated = segment.allocated_bytes
        while segment.size_bytes + 200 < allocated:
            log.append(records(1, 1, value_size=100))
            assert path.stat().st_size == allocated  # written inside the zeros
        log.append(records(2, 1, value_size=300))
        assert segment.allocated_bytes == segment.size_bytes + 4096 == path.stat().st_size
        assert path.read_bytes()[segment.size_bytes :] == bytes(4096)


def test_the_append_path_flushes_with_fdatasync(
    log_dir: Path, config: LogConfig, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def counting(name: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def call(fd: int) -> None:
            calls.append(name)
            real(fd)

        return call

    with Log.open(log_dir, config, clock) as log:
        log.append(records(0, 1))
        monkeypatch.setattr(os, "fsync", counting("fsync", os.fsync))
        monkeypatch.setattr(os, "fdatasync", counting("fdatasync", os.fdatasync))
        for i in range(5):
            log.append(records(i, 1))
        assert calls == ["fdatasync"] * 5


def test_a_clean_close_and_a_roll_trim_the_zeros(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    log = Log.open(log_dir, config, clock)
    log.append(records(0, 3))
    first = log.active_segment
    assert first.log_path.stat().st_size > first.size_bytes
    log.roll()
    assert first.log_path.stat().st_size == first.size_bytes
    log.append(records(3, 3))
    active = log.active_segment
    assert active.log_path.stat().st_size > active.size_bytes
    content = _state(log)
    size = active.size_bytes
    log.close()
    assert active.log_path.stat().st_size == size
    plan = plan_load(log_dir, topic="changelog", partition=0, config=config)
    assert not plan.changes
    with Log.open(log_dir, config, clock) as log:
        assert _state(log) == content


def test_a_crash_leaves_zeros_that_the_loader_cuts(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    content, position, size = _write_crashed_log(log_dir, config, clock)
    active = _active_path(log_dir)
    end = position + size
    tail = active.stat().st_size - end
    assert 0 < tail <= 4096
    assert active.read_bytes()[end:] == bytes(tail)
    plan = plan_load(log_dir, topic="changelog", partition=0, config=config)
    (truncate,) = [step for step in plan.steps if step.action == "truncate"]
    assert truncate.position == end
    assert f"zero-filled tail of {tail} bytes" in truncate.reason
    with Log.open(log_dir, config, clock) as log:
        assert _state(log) == content
        assert active.stat().st_size == end  # cut, then allocated again by the next append
        log.append(records(100, 1))
        content = _state(log)
    with Log.open(log_dir, config, clock) as log:
        assert _state(log) == content


def test_a_write_cut_at_a_sector_inside_the_zeros_is_a_torn_tail(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    content, position, size = _write_crashed_log(log_dir, config, clock, last_value=1500)
    active = _active_path(log_dir)
    sector = -(-(position + 100) // SECTOR) * SECTOR
    assert position < sector < position + size
    _zero(active, sector, position + size)  # the sectors the power cut did not let it reach
    plan = plan_load(log_dir, topic="changelog", partition=0, config=config)
    (truncate,) = [step for step in plan.steps if step.action == "truncate"]
    assert truncate.position == position
    assert "torn tail" in truncate.reason
    with Log.open(log_dir, config, clock) as log:
        assert _state(log) == content[:-1]
        assert active.stat().st_size == position


def test_a_whole_batch_damaged_before_the_zeros_is_refused(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    _content, position, size = _write_crashed_log(log_dir, config, clock, last_value=1500)
    active = _active_path(log_dir)
    with active.open("r+b") as f:
        f.seek(position + size // 2)
        f.write(b"\xff")
    before = active.read_bytes()
    with pytest.raises(CorruptRecordError) as info:
        Log.open(log_dir, config, clock)
    assert info.value.position == position
    assert "not shaped like an interrupted write" in str(info.value)
    assert active.read_bytes() == before


def test_damage_that_does_not_stop_at_a_sector_is_refused(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    """The last bytes of a small batch zeroed (the batch ends inside the sector they are in):
    no disk leaves that, so it is damage, not a torn write."""
    _content, position, size = _write_crashed_log(log_dir, config, clock, last_value=100)
    active = _active_path(log_dir)
    end = position + size
    if end // SECTOR != (end - 20) // SECTOR or (end - 20) % SECTOR == 0:
        pytest.fail(f"the batch [{position}, {end}) must not end at a sector boundary")
    _zero(active, end - 20, end)
    with pytest.raises(CorruptRecordError) as info:
        Log.open(log_dir, config, clock)
    assert info.value.position == position


def test_bytes_in_the_zeros_after_the_last_batch_are_refused(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    _content, position, size = _write_crashed_log(log_dir, config, clock)
    active = _active_path(log_dir)
    with active.open("r+b") as f:
        f.seek(position + size + 1000)
        f.write(b"\x07" * 10)
    with pytest.raises(CorruptRecordError) as info:
        Log.open(log_dir, config, clock)
    assert info.value.position == position + size


def _fill_extent(log: Log) -> None:
    log.append(records(0, 1))
    segment = log.active_segment
    while segment.size_bytes + 200 < segment.allocated_bytes:
        log.append(records(1, 1, value_size=100))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_no_room_for_the_zeros_appends_without_them(
    log_dir: Path, config: LogConfig, clock: FakeClock, code: int
) -> None:
    log = Log.open(log_dir, config, clock)
    _fill_extent(log)
    segment = log.active_segment
    failed: list[str] = []

    def no_room(step: str, _path: Path) -> None:
        if step == "segment.preallocate":
            failed.append(step)
            raise OSError(code, os.strerror(code))

    with files.inject_faults(no_room):
        log.append(records(2, 1, value_size=300))  # needs the next extent: acknowledged
        log.append(records(3, 1, value_size=300))  # the segment does not try again
    assert failed == ["segment.preallocate"]
    assert segment.allocated_bytes == segment.size_bytes == segment.log_path.stat().st_size
    content = _state(log)
    log.abandon()
    with Log.open(log_dir, config, clock) as log:
        assert _state(log) == content


@pytest.mark.parametrize(
    ("failing_step", "code"),
    [("segment.append", errno.ENOSPC), ("segment.preallocate", errno.EIO)],
    ids=["no-room-for-the-batch", "io-error-writing-the-zeros"],
)
def test_a_failed_write_fails_the_append_and_loses_nothing(
    log_dir: Path, config: LogConfig, clock: FakeClock, failing_step: str, code: int
) -> None:
    """No room for the batch itself, or an I/O error writing the next extent's zeros."""
    log = Log.open(log_dir, config, clock)
    _fill_extent(log)
    content = _state(log)
    size = log.active_segment.size_bytes

    def fail(step: str, _path: Path) -> None:
        if step == failing_step:
            raise OSError(code, os.strerror(code))

    with files.inject_faults(fail), pytest.raises(LogStorageError) as info:
        log.append(records(2, 1, value_size=300))
    assert info.value.errno == code
    with pytest.raises(LogFailedError):
        log.append(records(3, 1))
    with Log.open(log_dir, config, clock) as log:
        assert _state(log) == content
        assert log.active_segment.size_bytes == size
        log.append(records(4, 1))


def test_without_preallocation_the_file_ends_at_its_last_batch(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    plain = attrs.evolve(config, preallocate=False)
    log = Log.open(log_dir, plain, clock)
    for i in range(5):
        log.append(records(i, 1))
        assert log.active_segment.log_path.stat().st_size == log.active_segment.size_bytes
    log.abandon()
    assert not plan_load(log_dir, topic="changelog", partition=0, config=plain).steps[1:]


def test_a_header_cut_at_a_sector_inside_the_zeros_is_a_torn_tail(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    """The power cut stopped the write inside the batch's header: the rest of the header
    (its magic byte, its length's last bytes) is zeros, not a batch shape."""
    log = Log.open(log_dir, config, clock)
    i = 0
    while not SECTOR - 10 <= log.active_segment.size_bytes % SECTOR <= SECTOR - 4:
        log.append(records(i, 1, value_size=1 + i % 7))  # until a header straddles a sector,
        i += 1  # with its length field cut
        assert i < 500
    content = _state(log)
    position = log.active_segment.size_bytes
    log.append(records(1000, 1, value_size=200))
    log.abandon()
    active = _active_path(log_dir)
    sector = -(-position // SECTOR) * SECTOR
    _zero(active, sector, sector + 400)
    plan = plan_load(log_dir, topic="changelog", partition=0, config=config)
    (truncate,) = [step for step in plan.steps if step.action == "truncate"]
    assert truncate.position == position
    with Log.open(log_dir, config, clock) as log:
        assert _state(log) == content


def test_a_large_append_grows_the_file_without_zeros(
    log_dir: Path, config: LogConfig, clock: FakeClock
) -> None:
    """Zeros would double what a bulk writer sends to the disk: a large append past the
    preallocated space is written as it is; a small one after it preallocates again."""
    big = attrs.evolve(config, segment_bytes=1024 * 1024, max_message_bytes=1024 * 1024)
    with Log.open(log_dir, big, clock) as log:
        log.append(records(0, 1))
        segment = log.active_segment
        log.append(records(1, 1, value_size=LARGE_APPEND_BYTES + 4096))
        assert segment.allocated_bytes == segment.size_bytes == segment.log_path.stat().st_size
        log.append(records(2, 1))
        assert segment.allocated_bytes == segment.size_bytes + 4096


def test_the_zeros_after_a_crash_are_no_warning(
    log_dir: Path, config: LogConfig, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Every crash of a preallocating log leaves them: an operator reading the log after it
    sees the cut at INFO, not a warning about garbage or torn writes."""
    content, position, size = _write_crashed_log(log_dir, config, clock)
    tail = _active_path(log_dir).stat().st_size - (position + size)
    with caplog.at_level(logging.DEBUG, logger="changelog"):
        with Log.open(log_dir, config, clock) as log:
            assert _state(log) == content
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any(
        f"cutting {tail} zero bytes after the last batch" in r.getMessage()
        and r.levelno == logging.INFO
        for r in caplog.records
    )


def test_a_torn_write_in_the_zeros_is_still_a_warning(
    log_dir: Path, config: LogConfig, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    content, position, size = _write_crashed_log(log_dir, config, clock, last_value=1500)
    active = _active_path(log_dir)
    sector = -(-(position + 100) // SECTOR) * SECTOR
    _zero(active, sector, position + size)
    with caplog.at_level(logging.DEBUG, logger="changelog"):
        with Log.open(log_dir, config, clock) as log:
            assert _state(log) == content[:-1]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("truncating" in w and f"position {position} of" in w for w in warnings), warnings
