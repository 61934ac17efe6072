"""The cleaner on transactional logs: Kafka's rules for aborted data and markers.

Aborted data is removed and never shadows a committed value; a marker stays
while data of its transaction remains, is then stamped with a delete horizon,
and removed once that passed; nothing at or past the last stable offset is
cleaned; after every swap the ``.txnindex`` files are what the loader derives.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from changelog.log.log import Log
from changelog.record.control import ControlRecordType
from tests.changelog.conftest import FakeClock

ABORT = ControlRecordType.ABORT
COMMIT = ControlRecordType.COMMIT


def _config(delete_retention_ms: int = 86_400_000, segment_bytes: int = 400) -> LogConfig:
    return LogConfig(
        segment_bytes=segment_bytes,
        index_interval_bytes=64,
        min_cleanable_dirty_ratio=0.01,
        min_compaction_lag_ms=0,
        delete_retention_ms=delete_retention_ms,
        file_delete_delay_ms=0,
        cleanup_policy="compact",
    )


def _rows(
    log: Log, isolation: str = "read_committed"
) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.read(0, isolation=isolation)]  # type: ignore[arg-type]


def _markers(log: Log) -> list[tuple[int, int, bool]]:
    """``(offset, producer id, has a delete horizon)`` of every control batch with a marker."""
    return [
        (h.base_offset, h.producer_id, h.delete_horizon_ms is not None)
        for h, _ in log.read_batches(0, isolation="read_uncommitted")
        if h.is_control and h.records_count
    ]


def _latest(rows: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    state: dict[bytes, bytes | None] = {}
    for _offset, key, value in rows:
        assert key is not None
        state[key] = value
    return state


def _entries(log: Log) -> list[tuple[int, tuple[object, ...]]]:
    return [(s.base_offset, s.txn_index.entries) for s in log.segments]


def _dirty(log: Log, n: int) -> None:
    """New dirty data (a Kafka pass needs some), then a roll so that it is cleanable."""
    log.append([(b"filler", b"%d" % n)])
    log.roll()


def _build(log: Log) -> None:
    log.append([(b"shadow", b"committed")])  # 0
    log.append_transactional([(b"shadow", b"aborted")], producer_id=7, producer_epoch=0)
    log.append_transactional([(b"a", b"1")], producer_id=8, producer_epoch=0)
    log.append_marker(ABORT, producer_id=7, producer_epoch=0)
    log.append_transactional([(b"a", b"2"), (b"b", b"1")], producer_id=8, producer_epoch=0)
    log.append_marker(COMMIT, producer_id=8, producer_epoch=0)
    for n in range(12):  # roll a few segments of plain data
        log.append([(b"p%d" % (n % 4), b"x" * 40)])
    log.append_transactional([(b"c", b"late-abort")], producer_id=9, producer_epoch=0)
    log.append_marker(ABORT, producer_id=9, producer_epoch=0)
    log.roll()


def test_aborted_data_goes_and_never_shadows_a_committed_value(
    log_dir: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with Log.open(log_dir, _config(), clock) as log:
        _build(log)
        committed_before = _latest(_rows(log))
        assert committed_before[b"shadow"] == b"committed"
        assert clean_log(log, force=True) is not None
        uncommitted = _rows(log, "read_uncommitted")
        assert b"aborted" not in [v for _o, _k, v in uncommitted]
        assert b"late-abort" not in [v for _o, _k, v in uncommitted]
        assert _latest(_rows(log)) == committed_before
        assert _latest(uncommitted) == committed_before  # nothing aborted is left to read
        # First pass: every marker stays (the pass saw data of each transaction).
        assert [(pid, stamped) for _o, pid, stamped in _markers(log)] == [
            (7, False),
            (8, False),
            (9, False),
        ]
        after_swap = _entries(log)
    caplog.set_level(logging.WARNING)
    with Log.open(log_dir, _config(), clock) as again:  # the loader derives the same indexes
        assert _entries(again) == after_swap
        assert _latest(_rows(again)) == committed_before
    assert "rebuilt" not in caplog.text


def test_markers_are_stamped_then_removed_after_their_horizon(
    log_dir: Path, clock: FakeClock
) -> None:
    # One segment per roll, so every pass reads whole groups.
    config = _config(delete_retention_ms=1000, segment_bytes=1_000_000)
    with Log.open(log_dir, config, clock) as log:
        _build(log)
        for n in range(8):  # overwrite the committed keys so their data compacts away
            log.append([(k, b"new-%d" % n) for k in (b"a", b"b", b"shadow", b"c")])
        log.roll()
        clean_log(log, force=True)  # pass 1: data removed, markers kept
        assert [stamped for _o, _p, stamped in _markers(log)] == [False, False, False]
        clock.advance(10)
        _dirty(log, 1)
        clean_log(log, force=True)  # pass 2: no data left: stamped with now + 1000
        assert [stamped for _o, _p, stamped in _markers(log)] == [True, True, True]
        assert all(len(s.txn_index) == 0 for s in log.segments)
        clock.advance(500)
        _dirty(log, 2)
        clean_log(log, force=True)  # horizon not passed yet: kept
        assert len(_markers(log)) == 3
        clock.advance(1000)
        _dirty(log, 3)
        clean_log(log, force=True)  # pass 4: gone
        assert _markers(log) == []
        expected = {b"a": b"new-7", b"b": b"new-7", b"shadow": b"new-7", b"c": b"new-7"}
        assert {k: v for k, v in _latest(_rows(log)).items() if not k.startswith(b"p")} == {
            **expected,
            b"filler": b"3",
        }


def test_nothing_at_or_past_the_last_stable_offset_is_cleaned(
    log_dir: Path, clock: FakeClock
) -> None:
    with Log.open(log_dir, _config(), clock) as log:
        log.append([(b"k", b"v0")])
        log.append_transactional([(b"k", b"open")], producer_id=3, producer_epoch=0)
        lso = log.last_stable_offset
        for n in range(20):
            log.append([(b"k", b"v%d" % (n + 1))])
        log.roll()
        clean_log(log, force=True)
        assert lso == 1
        assert (1, b"k", b"open") in _rows(log, "read_uncommitted")
        log.append_marker(COMMIT, producer_id=3, producer_epoch=0)
        log.roll()
        clean_log(log, force=True)
        assert _latest(_rows(log))[b"k"] == b"v20"
        assert (1, b"k", b"open") not in _rows(log, "read_uncommitted")


def test_a_quiet_log_whose_only_removable_content_is_markers_is_due_until_they_are_gone(
    log_dir: Path, clock: FakeClock
) -> None:
    """No new write after the data went: the markers alone make the log due (as expired
    tombstones do), first for their stamp, then once their horizon passed; a fresh process
    (a reopened log, nothing remembered) finds them too."""
    config = _config(delete_retention_ms=1000, segment_bytes=1_000_000)
    with Log.open(log_dir, config, clock) as log:
        _build(log)
        for n in range(8):  # overwrite the committed keys so their data compacts away
            log.append([(k, b"new-%d" % n) for k in (b"a", b"b", b"shadow", b"c")])
        log.roll()
        assert clean_log(log, force=True) is not None  # pass 1: the data goes
        assert len(_markers(log)) == 3
        stats = clean_log(log)  # no new write: due for the stamp
        assert stats is not None and stats.due_reason == "delete horizon"
        assert [stamped for _o, _p, stamped in _markers(log)] == [True, True, True]
        assert clean_log(log) is None  # horizon not passed: not due
        clock.advance(1001)
    with Log.open(log_dir, config, clock) as log:  # a new process: nothing remembered
        stats = clean_log(log)
        assert stats is not None and stats.due_reason == "delete horizon"
        assert _markers(log) == []
        assert clean_log(log) is None  # nothing left to remove


def test_markers_without_data_left_make_a_reopened_log_due_for_their_stamp(
    log_dir: Path, clock: FakeClock
) -> None:
    config = _config(delete_retention_ms=1000, segment_bytes=1_000_000)
    with Log.open(log_dir, config, clock) as log:
        _build(log)
        for n in range(8):
            log.append([(k, b"new-%d" % n) for k in (b"a", b"b", b"shadow", b"c")])
        log.roll()
        clean_log(log, force=True)  # the data goes, the markers are not stamped yet
        assert [stamped for _o, _p, stamped in _markers(log)] == [False, False, False]
    with Log.open(log_dir, config, clock) as log:
        stats = clean_log(log)
        assert stats is not None and stats.due_reason == "delete horizon"
        assert [stamped for _o, _p, stamped in _markers(log)] == [True, True, True]
