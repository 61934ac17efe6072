"""The cleaner's metrics are Kafka's computations over the cleaner's own stats and choices."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog.cleaner.manager import log_to_clean
from changelog.cleaner.service import CleanerService
from changelog.config import CleanerConfig, LogConfig
from changelog.log.log import Log
from statestore.metrics import MetricsRegistry, nest_samples, register_cleaner_metrics

T0 = 1_700_000_000_000


@attrs.define
class Clock:
    now: int = T0

    def __call__(self) -> int:
        return self.now


def open_log(root: Path, name: str, clock: Clock, **settings: Any) -> Log:
    config = LogConfig(segment_bytes=2048, file_delete_delay_ms=0, flush_messages=10**9, **settings)
    return Log.open(root / name, config, clock=clock)


def fill(log: Log, keys: int, rounds: int, tombstones: bool = False) -> None:
    for round_ in range(rounds):
        log.append([(b"k%d" % i, b"v%d" % round_) for i in range(keys)])
    if tombstones:
        log.append([(b"k%d" % i, None) for i in range(keys)])
    log.roll()


def cleaner_metrics(registry: MetricsRegistry) -> dict[str, Any]:
    return nest_samples(registry.samples())["cleaner"]  # type: ignore[no-any-return]


def test_cleaner_metrics_follow_each_pass(tmp_path: Path) -> None:
    clock = Clock()
    dirty = open_log(tmp_path, "a-0", clock)
    calm = open_log(tmp_path, "b-0", clock)
    fill(dirty, keys=20, rounds=30)
    fill(calm, keys=20, rounds=1)
    logs = [dirty, calm]
    service = CleanerService(logs, CleanerConfig(), clock, worker="thread")
    registry = MetricsRegistry()
    register_cleaner_metrics(registry, service, lambda: logs)
    before = cleaner_metrics(registry)
    assert before["cleaner-passes-total"] == 0
    assert "time-since-last-run-ms" not in before  # never ran
    assert "max-clean-time-secs" not in before  # no pass yet
    ratios = [log_to_clean(log, now_ms=clock.now).dirty_ratio for log in logs]

    stats = service.run_once()
    assert stats is not None
    clock.now += 250
    after = cleaner_metrics(registry)
    assert after["max-dirty-percent"] == int(100 * max(ratios))
    assert after["time-since-last-run-ms"] == 250
    assert after["time-since-last-clean-ms"] == 250
    assert after["cleaner-passes-total"] == 1
    assert after["cleaner-records-read-total"] == stats.records_read
    assert after["cleaner-bytes-read-total"] == stats.bytes_read + stats.map_bytes_read
    assert after["cleaner-records-written-total"] == stats.records_written
    assert after["cleaner-bytes-written-total"] == stats.bytes_written
    assert after["cleaner-recopy-percent"] == int(100 * stats.bytes_written / stats.bytes_read)
    assert after["max-buffer-utilization-percent"] == 100 * stats.buffer_utilization
    assert after["max-clean-time-secs"] == stats.duration_s
    assert after["max-compaction-delay-secs"] == 0.0
    assert after["uncleanable-partitions-count"] == 0
    assert after["DeadThreadCount"] == 0

    second = service.run_once()
    totals = cleaner_metrics(registry)
    passes = 1 if second is None else 2
    assert totals["cleaner-passes-total"] == passes
    expected_read = stats.records_read + (0 if second is None else second.records_read)
    assert totals["cleaner-records-read-total"] == expected_read


def test_tombstones_removed_and_uncleanable_logs(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, "t-0", clock, delete_retention_ms=0)
    broken = open_log(tmp_path, "u-0", clock)
    fill(log, keys=10, rounds=3, tombstones=True)
    fill(broken, keys=10, rounds=20)
    logs = [log, broken]
    service = CleanerService(logs, CleanerConfig(), clock, worker="thread")
    registry = MetricsRegistry()
    register_cleaner_metrics(registry, service, lambda: logs)
    service.manager.mark_uncleanable(broken, "test: a failed pass", now_ms=clock.now)
    removed = 0
    while (stats := service.run_once()) is not None:
        removed += stats.tombstones_removed
        clock.now += 1
    m = cleaner_metrics(registry)
    assert removed == 10  # the first pass stamps the delete horizon, a later one removes them
    assert m["cleaner-tombstones-removed-total"] == removed
    assert m["uncleanable-partitions-count"] == 1
    assert m["uncleanable-bytes"] == log_to_clean(broken, now_ms=clock.now).dirty_bytes > 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_dead_thread_count_counts_cleaner_threads_that_died(
    tmp_path: Path, monkeypatch: Any
) -> None:
    clock = Clock()
    logs = [open_log(tmp_path, "d-0", clock)]
    service = CleanerService(logs, CleanerConfig(threads=2, backoff_ms=10), clock, worker="thread")
    registry = MetricsRegistry()
    register_cleaner_metrics(registry, service, lambda: logs)
    assert cleaner_metrics(registry)["DeadThreadCount"] == 0  # not started

    def die(*_args: Any, **_kwargs: Any) -> None:
        raise SystemExit  # ends a worker thread silently (threading ignores SystemExit)

    monkeypatch.setattr(service, "run_once", die)
    service.start()
    try:
        deadline = time.monotonic() + 10
        while cleaner_metrics(registry)["DeadThreadCount"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cleaner_metrics(registry)["DeadThreadCount"] == 2  # the retention thread lives
    finally:
        service.close()
    assert cleaner_metrics(registry)["DeadThreadCount"] == 0  # closed: not "dead"
