"""What one cleaning pass did: Kafka's ``CleanerStats`` and its log summary."""

from __future__ import annotations

import attrs

__all__ = ["CleanerStats", "CleanerTotals"]


@attrs.define(kw_only=True)
class CleanerStats:
    """What one pass did (Kafka's ``CleanerStats``), returned by :func:`clean_log`.

    ``bytes_read``/``records_read`` count the recopy phase (every batch of the
    segments considered, rewritten or not); ``bytes_kept`` counts what is in
    the log afterwards (written plus left untouched).  Durations are wall-clock
    seconds from ``time.monotonic``.

    Invariants (once the pass returned): ``records_kept <= records_read``;
    ``first_dirty_offset <= end_offset <= first_uncleanable_offset``.
    (``bytes_kept`` may exceed ``bytes_read`` a little in a pass that only
    stamps delete horizons: timestamps become deltas from the horizon.)

    Thread-safety: filled in by one pass; read it after the pass returns.
    """

    log_name: str = ""
    first_dirty_offset: int = 0
    end_offset: int = 0
    first_uncleanable_offset: int = 0
    due_reason: str | None = None
    map_records_read: int = 0
    map_bytes_read: int = 0
    records_read: int = 0
    bytes_read: int = 0
    records_written: int = 0
    bytes_written: int = 0
    records_kept: int = 0
    bytes_kept: int = 0
    tombstones_removed: int = 0
    expired_records_removed: int = 0
    """Data records removed because they had expired (``LogConfig.record_ttl_ms``)."""
    invalid_records: int = 0
    segments_rewritten: int = 0
    segments_untouched: int = 0
    segments_skipped: int = 0
    """Of ``segments_untouched``, those not even read in step 2: the offset map proved them
    unchanged (``changelog.cleaner.clean.SegmentEvidence``)."""
    groups_swapped: int = 0
    buffer_utilization: float = 0.0
    pending_delete_horizon_ms: int | None = None
    map_duration_s: float = 0.0
    duration_s: float = 0.0

    @property
    def records_removed(self) -> int:
        """Records read in the recopy phase and not kept."""
        return self.records_read - self.records_kept

    @property
    def mb_per_s_read(self) -> float:
        """Megabytes (10**6) read in both phases per second of the whole pass."""
        return (
            (self.bytes_read + self.map_bytes_read) / 1e6 / self.duration_s
            if self.duration_s
            else 0.0
        )

    @property
    def mb_per_s_written(self) -> float:
        """Megabytes written per second of the whole pass."""
        return self.bytes_written / 1e6 / self.duration_s if self.duration_s else 0.0

    @property
    def size_reduction(self) -> float:
        """Fraction of the recopied bytes removed (0.25: a quarter smaller)."""
        return 1.0 - self.bytes_kept / self.bytes_read if self.bytes_read else 0.0

    def summary(self) -> str:
        """A multi-line summary like the one Kafka's cleaner logs."""
        total = self.duration_s or 1e-9
        recopy = max(self.duration_s - self.map_duration_s, 0.0)
        fewer = 1.0 - self.records_kept / self.records_read if self.records_read else 0.0
        return (
            f"cleaned log {self.log_name} (dirty section = [{self.first_dirty_offset}, "
            f"{self.end_offset}), due to {self.due_reason})\n"
            f"\t{(self.bytes_read + self.map_bytes_read) / 1e6:,.1f} MB of log processed in "
            f"{self.duration_s:,.2f} seconds ({self.mb_per_s_read:,.1f} MB/sec).\n"
            f"\tIndexed {self.map_bytes_read / 1e6:,.1f} MB in {self.map_duration_s:.2f} seconds "
            f"({100 * self.map_duration_s / total:.1f}% of total time)\n"
            f"\tBuffer utilization: {100 * self.buffer_utilization:.1f}%\n"
            f"\tCleaned {self.bytes_read / 1e6:,.1f} MB in {recopy:.2f} seconds "
            f"({100 * recopy / total:.1f}% of total time)\n"
            f"\tStart size: {self.bytes_read / 1e6:,.1f} MB ({self.records_read:,d} messages)\n"
            f"\tEnd size: {self.bytes_kept / 1e6:,.1f} MB ({self.records_kept:,d} messages)\n"
            f"\t{100 * self.size_reduction:.1f}% size reduction ({100 * fewer:.1f}% fewer messages); "
            f"{self.segments_rewritten} segments rewritten, {self.segments_untouched} untouched, "
            f"{self.tombstones_removed} tombstones removed"
        )


@attrs.define(kw_only=True)
class CleanerTotals:
    """Sums over the passes of a :class:`~changelog.cleaner.service.CleanerService` (for metrics).

    ``bytes_read`` counts both phases (offset map and recopy), like the
    summary's "MB of log processed".  Thread-safety: the service updates it
    under its lock and hands out copies.
    """

    passes: int = 0
    records_read: int = 0
    bytes_read: int = 0
    records_written: int = 0
    bytes_written: int = 0
    tombstones_removed: int = 0
    expired_records_removed: int = 0
    last_pass_ms: int | None = None
    """The service clock when the last pass completed (``None``: no pass yet)."""

    def add(self, stats: CleanerStats, now_ms: int) -> None:
        """Count one completed pass."""
        self.passes += 1
        self.records_read += stats.records_read
        self.bytes_read += stats.bytes_read + stats.map_bytes_read
        self.records_written += stats.records_written
        self.bytes_written += stats.bytes_written
        self.tombstones_removed += stats.tombstones_removed
        self.expired_records_removed += stats.expired_records_removed
        self.last_pass_ms = now_ms
