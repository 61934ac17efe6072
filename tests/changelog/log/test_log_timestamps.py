"""Per-record timestamps on append: each record keeps its own CreateTime, the segment the largest."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelog import Log, LogConfig
from changelog.errors import InvalidRecordError
from changelog.record.batch import decode_records, encode_append_batch
from changelog.record.compression import compression_for
from changelog.record.control import ControlRecordType


def _records(log: Log) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp_ms, r.key, r.value) for r in log.read(0)]


def test_each_record_keeps_its_timestamp(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0", clock=lambda: 7) as log:
        info = log.append({b"a": b"1", b"b": None, b"c": b"3"}, timestamps=[50, 9, 1000])
        assert info.timestamp_ms == 1000
        log.append([(b"d", b"4")])
        assert _records(log) == [
            (0, 50, b"a", b"1"),
            (1, 9, b"b", None),
            (2, 1000, b"c", b"3"),
            (3, 7, b"d", b"4"),
        ]
        assert log.offset_for_timestamp(1000) == 2


def test_timestamps_survive_reopen(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0") as log:
        log.append([(b"a", b"1"), (b"b", b"2")], timestamps=[3, 2])
    with Log.open(tmp_path / "t-0") as log:
        assert [(r.timestamp_ms, r.key) for r in log.read(0)] == [(3, b"a"), (2, b"b")]


def test_transactional_batch_keeps_record_timestamps(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0") as log:
        log.append_transactional(
            [(b"a", b"1"), (b"b", b"2")], producer_id=5, producer_epoch=0, timestamps=[11, 22]
        )
        log.append_marker(ControlRecordType.COMMIT, producer_id=5, producer_epoch=0)
        assert [(r.timestamp_ms, r.key) for r in log.read(0)] == [(11, b"a"), (22, b"b")]


@pytest.mark.parametrize(
    ("timestamp_ms", "timestamps", "match"),
    [
        (None, [1], "1 timestamps for 2 records"),
        (5, [1, 2], "not both"),
        (None, [1, -5], "timestamps"),
        (None, [1, "x"], "timestamps"),
    ],
)
def test_bad_timestamps_write_nothing(
    tmp_path: Path, timestamp_ms: int | None, timestamps: list[object], match: str
) -> None:
    with Log.open(tmp_path / "t-0") as log:
        with pytest.raises(InvalidRecordError, match=match):
            log.append([(b"a", b"1"), (b"b", b"2")], timestamp_ms, timestamps=timestamps)  # type: ignore[arg-type]
        assert log.log_end_offset == 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=6),
            st.none() | st.binary(max_size=6),
            st.integers(min_value=0, max_value=2**40),
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from(["none", "gzip", "zstd"]),
    st.booleans(),
)
def test_encode_with_timestamps_round_trips(
    entries: list[tuple[bytes, bytes | None, int]], codec: str, transactional: bool
) -> None:
    batch = encode_append_batch(
        [(k, v) for k, v, _ in entries],
        timestamp_ms=0,
        compression=compression_for(LogConfig(compression_type=codec)),
        require_keys=True,
        producer=(3, 1, 0) if transactional else None,
        timestamps=[t for _, _, t in entries],
    )
    records = decode_records(bytes(batch), path="mem", position=0)
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in records] == [
        (i, k, v, t) for i, (k, v, t) in enumerate(entries)
    ]
