"""Filtering one batch (Kafka's ``MemoryRecords.filterTo``): copy, rebuild in its codec, empty, drop."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelog.record.batch import (
    LOG_APPEND_TIME,
    BatchHeader,
    Compression,
    Record,
    decode_header,
    decode_records,
    encode_records,
)
from changelog.record.filter import (
    BatchRetention,
    Entry,
    Retained,
    empty_batch,
    filter_batch,
)

PATH = "/data/t-0/00000000000000000000.log"
NOW = 1_800_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@attrs.define
class KeepSome:
    """A RecordFilter keeping the entries at ``keep``; tombstones ask for a horizon."""

    keep: list[int]
    retention: BatchRetention = BatchRetention.DELETE_EMPTY
    now_ms: int = NOW
    delete_retention_ms: int = 1000
    seen: list[BatchHeader] = attrs.Factory(list)

    def batch_retention(self, header: BatchHeader) -> BatchRetention:
        self.seen.append(header)
        return self.retention

    def retain(self, header: BatchHeader, entries: list[Entry]) -> Retained:
        keep = [i for i in self.keep if i < len(entries)]
        return Retained(keep, any(entries[i][2] is None for i in keep))


_records = st.lists(
    st.tuples(
        st.integers(0, 3),  # offset gap
        st.integers(-(10**6), 10**9),  # timestamp jitter
        st.binary(max_size=50),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
        ),
    ),
    min_size=1,
    max_size=30,
)


def build(spec: list, codec: str, **kwargs: object) -> tuple[bytes, list[Record]]:
    base = 1_000
    offset = base
    records = []
    for gap, jitter, key, value, headers in spec:
        offset += gap
        records.append(Record(offset, 1_700_000_000_000 + jitter, key, value, tuple(headers)))
        offset += 1
    raw = encode_records(
        records,
        base_offset=base,
        last_offset_delta=records[-1].offset - base + 2,
        compression=Compression.of(codec),
        **kwargs,  # type: ignore[arg-type]
    )
    return raw, records


@settings(max_examples=80, deadline=None)
@given(_records, st.sampled_from(CODECS), st.data())
def test_kept_records_are_what_the_filter_kept(spec: list, codec: str, data: st.DataObject) -> None:
    raw, records = build(spec, codec)
    header = decode_header(raw, 0, path=PATH)
    keep = sorted(data.draw(st.sets(st.integers(0, len(records) - 1))))
    result = filter_batch(raw, header, KeepSome(keep), path=PATH, position=0)
    kept = [records[i] for i in keep]
    if len(kept) == len(records) and not any(r.value is None for r in kept):
        assert result.copied and result.data == raw
        return
    if not kept:
        assert result.data == b"" and result.records_kept == 0
        return
    new_header = decode_header(result.data, 0, path=PATH, validate=True)
    assert new_header.compression == header.compression  # rewritten in its own codec
    assert new_header.base_offset == header.base_offset
    assert new_header.last_offset == header.last_offset
    assert new_header.records_count == len(kept) == result.records_kept
    stamped = any(r.value is None for r in kept)
    assert new_header.delete_horizon_ms == (NOW + 1000 if stamped else None)
    assert [
        (r.offset, r.key, r.value, r.headers)
        for r in decode_records(result.data, path=PATH, position=0)
    ] == [(r.offset, r.key, r.value, r.headers) for r in kept]
    assert result.max_timestamp == max(r.timestamp_ms for r in kept)
    if not stamped:  # the horizon replaces the base timestamp; timestamps stay otherwise
        assert [r.timestamp_ms for r in decode_records(result.data, path=PATH, position=0)] == [
            r.timestamp_ms for r in kept
        ]


@pytest.mark.parametrize("codec", CODECS)
def test_an_emptied_batch_is_kept_only_when_told(codec: str) -> None:
    raw, _records = build(
        [(0, 0, b"k", b"v", [])] * 3, codec, producer_id=7, producer_epoch=1, base_sequence=0
    )
    header = decode_header(raw, 0, path=PATH)
    dropped = filter_batch(raw, header, KeepSome([]), path=PATH, position=0)
    assert dropped.data == b"" and dropped.last_offset == header.last_offset
    kept = filter_batch(
        raw, header, KeepSome([], BatchRetention.RETAIN_EMPTY), path=PATH, position=0
    )
    empty = decode_header(kept.data, 0, path=PATH, validate=True)
    assert kept.data == empty_batch(header)
    assert (empty.records_count, empty.compression, empty.size_in_bytes) == (0, 0, 61)
    assert (empty.base_offset, empty.last_offset) == (header.base_offset, header.last_offset)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (7, 1, 0)
    assert empty.base_timestamp == empty.max_timestamp == header.max_timestamp
    # A batch that keeps everything is copied even when it may be kept empty.
    whole = filter_batch(
        raw, header, KeepSome([0, 1, 2], BatchRetention.RETAIN_EMPTY), path=PATH, position=0
    )
    assert whole.copied and whole.data == raw


def test_delete_skips_the_records() -> None:
    raw, _ = build([(0, 0, b"k", b"v", [])], "gzip")
    header = decode_header(raw, 0, path=PATH)
    broken = raw[:-4] + b"\0\0\0\0"  # the records would not decompress: never looked at
    flt = KeepSome([0], BatchRetention.DELETE)
    assert filter_batch(broken, header, flt, path=PATH, position=0).data == b""
    assert flt.seen == [header]


def test_dry_run_builds_nothing_but_says_whether_it_would_copy() -> None:
    raw, _ = build([(0, 0, b"k", b"v", [])] * 4, "lz4")
    header = decode_header(raw, 0, path=PATH)
    same = filter_batch(raw, header, KeepSome([0, 1, 2, 3]), path=PATH, position=0, build=False)
    assert same.copied and same.data == raw
    less = filter_batch(raw, header, KeepSome([1]), path=PATH, position=0, build=False)
    assert not less.copied and less.data == b"" and less.records_kept == 1


def test_log_append_time_and_control_flags_survive_a_rebuild() -> None:
    raw, _records = build(
        [(0, i, b"k%d" % i, b"v", []) for i in range(3)], "snappy", timestamp_type=LOG_APPEND_TIME
    )
    header = decode_header(raw, 0, path=PATH)
    out = filter_batch(raw, header, KeepSome([0, 2]), path=PATH, position=0)
    new = decode_header(out.data, 0, path=PATH, validate=True)
    assert new.timestamp_type == LOG_APPEND_TIME and new.compression == 2
    assert {r.timestamp_ms for r in decode_records(out.data, path=PATH, position=0)} == {
        header.max_timestamp
    }
