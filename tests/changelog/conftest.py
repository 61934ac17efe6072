"""Fixtures for the changelog tests: partition directories, tiny configs, a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from changelog.config import LogConfig

if TYPE_CHECKING:
    from changelog.log.log import Log

START_MS = 1_700_000_000_000
"""Where :class:`FakeClock` starts (a realistic epoch time in milliseconds)."""


class FakeClock:
    """A settable millisecond clock: ``clock()`` reads it, ``clock.advance(ms)`` moves it."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at :data:`START_MS`."""
    return FakeClock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """A partition directory path (not created) named like Kafka's: ``changelog-0``."""
    return tmp_path / "changelog-0"


@pytest.fixture
def small_config() -> LogConfig:
    """Tiny segments and a dense index, so rolling and index lookups happen in small tests."""
    return LogConfig(
        segment_bytes=1024,
        index_interval_bytes=100,
        segment_index_bytes=1024,
        file_delete_delay_ms=0,
        retention_ms=-1,
        cleanup_policy="delete",  # a plain partition: keyless records are allowed (not when compacted)
    )


@pytest.fixture
def open_log(log_dir: Path, small_config: LogConfig, clock: FakeClock) -> Iterator[Log]:
    """A log on ``log_dir`` with ``small_config`` and the fake clock, closed afterwards."""
    from changelog.log.log import Log  # noqa: PLC0415 - keep segment-only tests independent of the log

    log = Log.open(log_dir, small_config, clock)
    try:
        yield log
    finally:
        log.close()


def records(start: int, count: int, *, value_size: int = 10) -> list[tuple[bytes, bytes]]:
    """``count`` (key, value) pairs numbered from ``start``."""
    return [
        (f"k{n}".encode(), f"v{n}".encode().ljust(value_size, b"."))
        for n in range(start, start + count)
    ]
