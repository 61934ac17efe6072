"""Retention selection (Kafka's deleteRetentionMs/SizeBreachedSegments and log-start breach)."""

from __future__ import annotations

import attrs

from changelog.config import LogConfig
from changelog.log.retention import (
    log_start_offset_breached,
    retention_bytes_breached,
    retention_ms_breached,
    segments_to_delete,
)


@attrs.frozen
class Seg:
    base_offset: int
    size_bytes: int
    largest_timestamp_ms: int


SEGS = [Seg(0, 100, 1000), Seg(10, 100, 2000), Seg(20, 100, 3000), Seg(30, 50, 4000)]


def test_log_start_breach_deletes_segments_wholly_below() -> None:
    assert log_start_offset_breached(SEGS, 0) == 0
    assert log_start_offset_breached(SEGS, 9) == 0
    assert log_start_offset_breached(SEGS, 10) == 1
    assert log_start_offset_breached(SEGS, 25) == 2
    assert log_start_offset_breached(SEGS, 30) == 3
    assert log_start_offset_breached(SEGS, 99) == 3  # never the active segment


def test_retention_bytes_like_kafka() -> None:
    assert retention_bytes_breached(SEGS, -1) == 0
    assert retention_bytes_breached(SEGS, 351) == 0  # log smaller than the limit
    assert retention_bytes_breached(SEGS, 350) == 0  # excess 0: nothing fits
    assert retention_bytes_breached(SEGS, 250) == 1  # excess 100
    assert retention_bytes_breached(SEGS, 199) == 1  # excess 151: the second does not fit
    assert retention_bytes_breached(SEGS, 150) == 2
    assert retention_bytes_breached(SEGS, 0) == 3  # the active segment stays


def test_retention_ms_against_largest_timestamp() -> None:
    assert retention_ms_breached(SEGS, -1, 10_000) == 0
    assert retention_ms_breached(SEGS, 1000, 2000) == 0  # 2000 - 1000 is not > 1000
    assert retention_ms_breached(SEGS, 1000, 2001) == 1
    assert retention_ms_breached(SEGS, 1000, 3500) == 2
    assert retention_ms_breached(SEGS, 0, 10_000) == 3  # the active segment stays


def test_retention_ms_stops_at_first_young_segment() -> None:
    segs = [Seg(0, 1, 5000), Seg(1, 1, 1000), Seg(2, 1, 1000)]
    assert retention_ms_breached(segs, 100, 3000) == 0


def test_policy_compact_applies_only_log_start_breach() -> None:
    config = LogConfig(cleanup_policy="compact", retention_ms=0, retention_bytes=0)
    assert segments_to_delete(SEGS, config=config, log_start_offset=10, now_ms=10**9) == 1


def test_policy_delete_combines_passes_in_order() -> None:
    config = LogConfig(cleanup_policy="delete", retention_ms=1500, retention_bytes=260)
    # log start breach: 1 (start 10); size on the rest (250 bytes) is under 260; time: seg 10 (2000)
    assert segments_to_delete(SEGS, config=config, log_start_offset=10, now_ms=3600) == 2
    config = LogConfig(cleanup_policy="compact,delete", retention_ms=-1, retention_bytes=150)
    assert segments_to_delete(SEGS, config=config, log_start_offset=0, now_ms=0) == 2
