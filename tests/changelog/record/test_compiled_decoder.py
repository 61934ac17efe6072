"""The compiled record decoder (``_records.c``: ``decode``) reads what the reference reads.

Golden bytes derived by hand from the spec pin each tuple shape; Hypothesis holds the
compiled decoder equal to the pure-Python reference (``decode_body`` and the ``*_py``
functions) on valid batches, and on damaged ones: both refuse, naming the same place.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changelog.errors import CorruptRecordError
from changelog.record import batch as rb
from changelog.record.batch import (
    BATCH_HEADER_SIZE,
    Record,
    decode_key_values,
    decode_record_tuples,
    decode_records,
    decode_records_py,
    encode_records_py,
    key_value_pairs,
)
from changelog.record.body import decode_body

PATH = Path("/data/topic-0/00000000000000000000.log")

# Two records, hand-derived from the spec (zig-zag varints: 0 -> 00, 1 -> 02, -1 -> 01):
#   10 00 00 00 02 6b 02 76 00      length 8, attributes, ts delta 0, offset delta 0,
#                                   key "k", value "v", no headers
#   12 00 13 04 01 00 02 02 68 01   length 9, attributes, ts delta -10, offset delta 2,
#                                   null key, empty value, one header "h" -> null
GOLDEN = bytes.fromhex("10 00 00 00 02 6b 02 76 0012 00 13 04 01 00 02 02 68 01")


def _decode(shape: int, base_offset: int = 0, base_timestamp: int = 0) -> list[tuple[object, ...]]:
    from changelog.record import _records  # noqa: PLC0415 - the extension itself

    return _records.decode(GOLDEN, 0, len(GOLDEN), 2, shape, base_offset, base_timestamp)


@pytest.mark.compiled
def test_golden_bytes_in_every_shape() -> None:
    assert _decode(0) == [(b"k", b"v"), (None, b"")]
    assert _decode(1, 100) == [(100, b"k", b"v"), (102, None, b"")]
    assert _decode(2, 100, 1000) == [
        (100, 1000, b"k", b"v", ()),
        (102, 990, None, b"", (("h", None),)),
    ]


@pytest.mark.compiled
@pytest.mark.parametrize(
    ("damaged", "position"),
    [
        (GOLDEN[:-1], 9),  # the second record is cut short
        (GOLDEN + b"\x00", 19),  # a byte after the last record
        (GOLDEN[:9] + b"\x12\x00\x13\x04\x03" + GOLDEN[14:], 9),  # key length -2
    ],
)
def test_golden_damage_is_a_value_error_naming_the_record(damaged: bytes, position: int) -> None:
    from changelog.record import _records  # noqa: PLC0415

    with pytest.raises(ValueError) as info:
        _records.decode(damaged, 0, len(damaged), 2, 0)
    assert info.value.args[1] == position


blobs = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=6), blobs), max_size=3).map(tuple)


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, list[Record]]:
    base_offset = draw(st.integers(min_value=0, max_value=2**40))
    base_ts = draw(st.integers(min_value=2**21, max_value=2**41))
    deltas = sorted(draw(st.sets(st.integers(min_value=0, max_value=500), min_size=1, max_size=20)))
    records = [
        Record(
            base_offset + delta,
            base_ts + draw(st.integers(min_value=-(2**20), max_value=2**20)),
            draw(blobs),
            draw(blobs),
            draw(headers),
        )
        for delta in deltas
    ]
    batch = encode_records_py(records, base_offset=base_offset, last_offset_delta=deltas[-1])
    return batch, records


@given(batches())
def test_every_public_decoder_reads_what_the_reference_reads(
    case: tuple[bytes, list[Record]],
) -> None:
    batch, records = case
    assert decode_records(batch, path=PATH, position=0) == records
    assert decode_records_py(batch, path=PATH, position=0) == records
    assert decode_key_values(batch, path=PATH, position=0) == [
        (r.offset, r.key, r.value) for r in records
    ]
    assert key_value_pairs(batch, path=PATH, position=0) == [(r.key, r.value) for r in records]
    assert decode_record_tuples(batch, path=PATH, position=0) == [
        (r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in records
    ]


def _reference(batch: bytes, count: int) -> list[object] | CorruptRecordError:
    header = rb.BatchHeader(*rb.HEADER.unpack_from(batch, 0))
    try:
        return decode_body(
            batch,
            BATCH_HEADER_SIZE,
            len(batch),
            count,
            base_offset=header.base_offset,
            base_timestamp=header.base_timestamp,
            log_append_time=None,
            make=lambda o, t, k, v, h: (o, t, k, v, h),
            path=PATH,
            file_position=4096,
        )
    except CorruptRecordError as exc:
        return exc


def _compiled(batch: bytes, count: int) -> list[object] | CorruptRecordError:
    header = rb.BatchHeader(*rb.HEADER.unpack_from(batch, 0))
    try:
        return rb._decode(batch, header, 2, PATH, 4096)
    except CorruptRecordError as exc:
        return exc


@pytest.mark.compiled
@given(batches(), st.data())
def test_damaged_records_are_refused_alike(
    case: tuple[bytes, list[Record]], data: st.DataObject
) -> None:
    batch = bytearray(case[0])
    records_section = len(batch) - BATCH_HEADER_SIZE
    at = BATCH_HEADER_SIZE + data.draw(st.integers(min_value=0, max_value=records_section - 1))
    action = data.draw(st.sampled_from(["flip", "cut", "grow"]))
    if action == "flip":
        batch[at] ^= data.draw(st.integers(min_value=1, max_value=255))
    elif action == "cut":
        del batch[at:]
    else:
        batch[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    damaged = bytes(batch)
    count = len(case[1])
    reference, compiled = _reference(damaged, count), _compiled(damaged, count)
    if isinstance(reference, CorruptRecordError):
        assert isinstance(compiled, CorruptRecordError), compiled
        assert (compiled.path, compiled.position) == (PATH, reference.position)
    else:
        assert compiled == reference, (compiled, reference)
