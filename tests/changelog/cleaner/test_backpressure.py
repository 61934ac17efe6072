"""Backpressure: a writer faster than the cleaner is held to the bound on the dirty tail.

The cleaner here is throttled (``io_max_bytes_per_second``) so that it is slower than the
writer; the writer calls :meth:`CleanerService.pace` after every append, as a committer
does.  The bound is checked after every ``pace`` against the log's own files (the cleaner
checkpoint and the segments), and against a model of the records a full restore replays.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from changelog.cleaner.manager import log_to_clean
from changelog.cleaner.service import CleanerService
from changelog.config import CleanerConfig, LogConfig
from changelog.log.log import Log
from changelog.log.log_dir import peek_batch_headers

pytestmark = pytest.mark.timeout(120)

MIN_BYTES = 16 * 1024
KEYS = 20
RECORDS_PER_APPEND = 50


def _config(ratio: float) -> LogConfig:
    return LogConfig(
        file_delete_delay_ms=0,
        flush_messages=10**9,
        roll_dirty_ratio=0.25,
        roll_dirty_min_bytes=4 * 1024,
        backpressure_dirty_ratio=ratio,
        backpressure_min_bytes=MIN_BYTES,
    )


SLOW_CLEANER = CleanerConfig(io_max_bytes_per_second=400_000, backoff_ms=60_000)
"""Throttled, and backing off for a minute when nothing is due: only a roll or a waiting
committer wakes it."""


def _append(log: Log, round_: int) -> int:
    info = log.append(
        [
            (b"k%02d" % (i % KEYS), b"value-%06d-%02d" % (round_, i))
            for i in range(RECORDS_PER_APPEND)
        ]
    )
    return info.size_bytes


def _tail_and_clean(log: Log) -> tuple[int, int]:
    """(bytes from the first dirty offset to the end, bytes below it), from the files."""
    measured = log_to_clean(log, now_ms=log_now(log))
    size = sum(segment.size_bytes for segment in log.segments)
    return size - measured.clean_bytes, measured.clean_bytes


def log_now(_log: Log) -> int:
    return int(time.time() * 1000)


def _replayed_records(directory: Path) -> int:
    return sum(h.records_count for _p, _pos, h in peek_batch_headers(directory) if not h.is_control)


def test_a_writer_faster_than_the_cleaner_is_held_to_the_bound(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "bp-0", _config(1.0))
    service = CleanerService([log], SLOW_CLEANER, worker="thread")
    service.start()
    try:
        batch_bytes = 0
        for round_ in range(300):
            batch_bytes = max(batch_bytes, _append(log, round_))
            service.pace([log])
            tail, clean = _tail_and_clean(log)
            # one append may land between the check and the wait: it is the only slack
            assert tail <= clean + MIN_BYTES + batch_bytes, (round_, tail, clean)
            # a model of what a full restore replays: the live keys once in the clean part,
            # and a tail that is at most about as large again plus the fixed allowance
            allowance_records = (MIN_BYTES + batch_bytes) // 20
            assert _replayed_records(log.dir) <= 2 * KEYS + allowance_records + 2 * KEYS
        assert service.pace_waits > 0, "the throttled cleaner never made the writer wait"
        assert len(service.history) > 0
    finally:
        service.close()
        log.close()


def test_without_backpressure_the_same_writer_outruns_the_cleaner(tmp_path: Path) -> None:
    """The control: the same workload with ``backpressure_dirty_ratio=0`` passes the bound."""
    log = Log.open(tmp_path / "nobp-0", _config(0.0))
    service = CleanerService([log], SLOW_CLEANER, worker="thread")
    service.start()
    try:
        worst = 0
        for round_ in range(300):
            batch_bytes = _append(log, round_)
            assert service.pace([log]) == 0.0
            tail, clean = _tail_and_clean(log)
            worst = max(worst, tail - (clean + MIN_BYTES + batch_bytes))
        assert service.pace_waits == 0
        assert worst > 0, "the workload never outran the cleaner: the test above proves nothing"
    finally:
        service.close()
        log.close()


def test_pace_does_not_wait_for_what_the_cleaner_may_not_clean(tmp_path: Path) -> None:
    """A cleaning barrier at the log start (a store's incremental restore holds one) leaves
    nothing cleanable: a commit must not wait for a pass that cannot come."""
    log = Log.open(tmp_path / "barrier-0", _config(1.0))
    log.cleaning_barrier_offset = 0
    service = CleanerService([log], SLOW_CLEANER, worker="thread")
    service.start()
    try:
        for round_ in range(200):
            _append(log, round_)
            assert service.pace([log]) == 0.0
        tail, clean = _tail_and_clean(log)
        assert tail > clean + 4 * MIN_BYTES  # over the bound, and yet no wait
        assert service.pace_waits == 0
    finally:
        service.close()
        log.close()


def test_pace_does_not_wait_on_a_service_that_is_not_running(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "idle-0", _config(1.0))
    service = CleanerService([log], SLOW_CLEANER, worker="thread")
    try:
        for round_ in range(200):
            _append(log, round_)
        started = time.monotonic()
        assert service.pace([log]) == 0.0  # created, not started
        service.start()
        service.close()
        assert service.pace([log]) == 0.0  # closed
        assert time.monotonic() - started < 5
        assert service.pace_waits == 0
    finally:
        service.close()
        log.close()
