"""The append path's roll headroom: an append inside it skips ``should_roll``, and must roll
exactly where a log that asks ``should_roll`` on every append rolls.

Two logs take the same appends (random sizes, timestamps that move forward, stand still, or
go back, a clock that moves), one with the headroom and one whose segments report none (so it
asks on every append); their segments must start at the same offsets after every step.
Bounds the tiny configuration reaches within a few dozen appends: segment bytes, the offset
and time indexes filling, segment age (with and without a jitter, the same for both logs), and the dirty-ratio roll.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelog.config import LogConfig
from changelog.log.log import Log
from changelog.segment import segment as segment_module
from changelog.segment.segment import LogSegment
from tests.changelog.conftest import FakeClock

_CONFIGS = {
    "bytes": LogConfig(
        segment_bytes=2048, index_interval_bytes=64, retention_ms=-1, cleanup_policy="delete"
    ),
    "indexes": LogConfig(
        segment_bytes=16384,
        index_interval_bytes=0,  # an entry for every batch after the first
        segment_index_bytes=96,  # 12 offset entries, 8 time entries
        retention_ms=-1,
        cleanup_policy="delete",
    ),
    "age": LogConfig(segment_ms=50, retention_ms=-1, cleanup_policy="delete"),
    "age with jitter": LogConfig(
        segment_ms=80, segment_jitter_ms=40, retention_ms=-1, cleanup_policy="delete"
    ),
    "dirty ratio": LogConfig(
        segment_bytes=4096,
        roll_dirty_ratio=0.5,
        roll_dirty_min_bytes=300,
        retention_ms=-1,
        cleanup_policy="delete",
    ),
}

_APPEND = st.tuples(
    st.integers(min_value=1, max_value=4),  # records
    st.integers(min_value=0, max_value=120),  # value bytes
    st.integers(min_value=-30, max_value=40),  # timestamp step (back, still, forward)
    st.integers(min_value=0, max_value=30),  # clock step
)


def _bases(log: Log) -> list[int]:
    return [segment.base_offset for segment in log.segments]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(_CONFIGS))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(appends=st.lists(_APPEND, min_size=1, max_size=60))
def test_the_headroom_rolls_where_should_roll_does(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    appends: list[tuple[int, int, int, int]],
) -> None:
    config = _CONFIGS[name]
    root: Path = tmp_path_factory.mktemp("headroom")
    clock = FakeClock()
    # the same jitter for both logs' segments (Kafka draws it at random per segment)
    monkeypatch.setattr(segment_module, "roll_jitter_ms", lambda c: c.segment_jitter_ms // 2)
    with (
        Log.open(root / "guarded-0", config, clock) as guarded,
        Log.open(root / "asking-0", config, clock) as asking,
    ):
        real = LogSegment.roll_headroom

        def headroom(segment: LogSegment) -> tuple[int, int, int, int, int] | None:
            # the asking log's segments never grant headroom: should_roll on every append
            return (
                None if str(segment.log_path).startswith(str(root / "asking-0")) else real(segment)
            )

        monkeypatch.setattr(LogSegment, "roll_headroom", headroom)
        stamp = clock.now_ms
        for number, (count, value_bytes, stamp_step, clock_step) in enumerate(appends):
            stamp = max(0, stamp + stamp_step)
            clock.advance(clock_step)
            records = [(f"k{number}-{i}".encode(), b"v" * value_bytes) for i in range(count)]
            guarded.append(records, stamp)
            asking.append(records, stamp)
            assert _bases(guarded) == _bases(asking), f"after append {number}"
        assert guarded.log_end_offset == asking.log_end_offset
