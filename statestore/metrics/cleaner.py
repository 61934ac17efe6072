"""The background cleaner's metrics (Kafka's ``LogCleaner`` and ``LogCleanerManager`` gauges).

Everything here is read from the :class:`~changelog.cleaner.service.CleanerService`
when a snapshot is taken; the cleaner records nothing extra on its own path
except the sums in :attr:`CleanerService.totals` and the last stats per thread.
The "last pass of each cleaner thread" of Kafka's gauges is
:meth:`CleanerService.last_stats` (one entry per thread that has cleaned).

Thread-safety: the gauges read the service's thread-safe accessors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from changelog.cleaner.manager import log_to_clean
from changelog.cleaner.service import CleanerService
from statestore.metrics.definitions import by_name
from statestore.metrics.registry import MetricsRegistry

__all__ = ["register_cleaner_metrics"]


def register_cleaner_metrics(
    registry: MetricsRegistry, service: CleanerService, logs: Callable[[], Iterable[Any]]
) -> None:
    """Register the cleaner gauges of ``service``; ``logs()`` returns the logs it cleans."""

    def gauge(name: str, read: Callable[[], float | int | None]) -> None:
        registry.gauge(by_name(name), read)

    def total(name: str, field: str) -> None:
        registry.counter_from(by_name(name), lambda: int(getattr(service.totals, field)))

    def last(read: Callable[[list[Any]], float | int]) -> Callable[[], float | int | None]:
        def value() -> float | int | None:
            stats = service.last_stats()
            return read(stats) if stats else None

        return value

    gauge(
        "max-buffer-utilization-percent",
        last(lambda stats: 100 * max(s.buffer_utilization for s in stats)),
    )
    gauge(
        "cleaner-recopy-percent",
        last(
            lambda stats: int(
                100 * sum(s.bytes_written for s in stats) / max(sum(s.bytes_read for s in stats), 1)
            )
        ),
    )
    gauge("max-clean-time-secs", last(lambda stats: max(s.duration_s for s in stats)))
    gauge("max-compaction-delay-secs", lambda: service.manager.max_compaction_delay_ms / 1000)
    gauge("DeadThreadCount", lambda: service.dead_thread_count)
    total("cleaner-passes-total", "passes")
    total("cleaner-records-read-total", "records_read")
    total("cleaner-bytes-read-total", "bytes_read")
    total("cleaner-records-written-total", "records_written")
    total("cleaner-bytes-written-total", "bytes_written")
    total("cleaner-tombstones-removed-total", "tombstones_removed")
    total("cleaner-expired-records-removed-total", "expired_records_removed")

    def since_last_clean() -> int | None:
        last_ms = service.totals.last_pass_ms
        return None if last_ms is None else max(service.now_ms() - last_ms, 0)

    def since_last_run() -> int | None:
        last_ms = service.manager.time_of_last_run_ms
        return None if last_ms is None else max(service.now_ms() - last_ms, 0)

    gauge("time-since-last-clean-ms", since_last_clean)
    gauge("max-dirty-percent", lambda: int(100 * service.manager.dirtiest_log_cleanable_ratio))
    gauge("time-since-last-run-ms", since_last_run)
    gauge("uncleanable-partitions-count", lambda: len(service.manager.uncleanable()))

    def uncleanable_bytes() -> int:
        marked = set(service.manager.uncleanable())
        total_bytes = 0
        for log in logs():
            if log.dir in marked and not log.closed:
                total_bytes += log_to_clean(log, now_ms=service.now_ms()).dirty_bytes
        return total_bytes

    gauge("uncleanable-bytes", uncleanable_bytes)
