"""Rebuilding a batch from the bytes of its kept records (``filtered_batch``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changelog.cleaner.recopy import filtered_batch
from changelog.errors import CorruptRecordError
from changelog.record.batch import Record, decode_header, decode_records, encode_records

_records = st.lists(
    st.tuples(
        st.integers(0, 3),  # offset gap
        st.integers(-(10**6), 10**9),  # timestamp jitter
        st.one_of(st.none(), st.binary(max_size=200)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
        ),
    ),
    min_size=1,
    max_size=30,
)


@given(_records, st.data())
def test_kept_records_decode_unchanged(
    spec: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    data: st.DataObject,
) -> None:
    base = 1_000
    offset = base
    records = []
    for gap, jitter, key, value, headers in spec:
        offset += gap
        records.append(Record(offset, 1_700_000_000_000 + jitter, key, value, tuple(headers)))
        offset += 1
    raw = encode_records(records, base_offset=base, last_offset_delta=records[-1].offset - base + 2)
    header = decode_header(raw, 0, path="x")
    keep = sorted(data.draw(st.sets(st.integers(0, len(records) - 1), min_size=1)))
    entries = [(r.offset, r.key, r.value) for r in records]
    out, max_ts, max_ts_offset = filtered_batch(raw, header, keep, entries, path="x", position=0)
    kept = [records[i] for i in keep]
    assert decode_records(out, path="x", position=0) == kept  # CRC checked by the decoder
    new_header = decode_header(out, 0, path="x")
    assert new_header.base_offset == header.base_offset
    assert new_header.last_offset == header.last_offset
    assert new_header.records_count == len(kept)
    assert new_header.max_timestamp == max_ts == max(r.timestamp_ms for r in kept)
    assert max_ts_offset == next(r.offset for r in kept if r.timestamp_ms == max_ts)
    if len(kept) == len(records):
        assert out == raw


def test_a_batch_whose_lengths_do_not_add_up_is_reported() -> None:
    records = [Record(i, 5, b"k", b"v", ()) for i in range(3)]
    raw = encode_records(records, base_offset=0, last_offset_delta=2)
    header = decode_header(raw, 0, path="x")
    entries = [(r.offset, r.key, r.value) for r in records]
    with pytest.raises(CorruptRecordError, match="do not add up"):
        filtered_batch(raw + b"\0", header, [0], entries, path="x", position=0)
