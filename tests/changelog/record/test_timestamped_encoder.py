"""The log's append with one timestamp per record: the same bytes and errors as ``encode_records``.

``encode_append_batch(..., timestamps=...)`` encodes without a ``Record`` per
record; what it must write is what :func:`encode_records` writes for the
records those pairs and timestamps make (the reference here), with and
without a producer and compression.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changelog.errors import InvalidRecordError
from changelog.limits import NO_TIMESTAMP
from changelog.record.batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Record,
    encode_append_batch,
    encode_records,
)
from changelog.record.compression import GZIP, ZSTD, Compression

optional_bytes = st.none() | st.binary(max_size=40)
pairs_and_stamps = st.lists(
    st.tuples(optional_bytes, optional_bytes, st.integers(0, 2**63 - 1)), min_size=1, max_size=30
)
producers = st.sampled_from([None, (7, 1, 0), (9, 3, 100)])
compressions = st.sampled_from([None, Compression(codec=GZIP), Compression(codec=ZSTD)])


def _reference(
    entries: list[tuple[bytes | None, bytes | None, int]],
    producer: tuple[int, int, int] | None,
    compression: Compression | None,
) -> bytes:
    ids = producer or (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
    return encode_records(
        [Record(i, stamp, key, value) for i, (key, value, stamp) in enumerate(entries)],
        base_offset=0,
        last_offset_delta=len(entries) - 1,
        producer_id=ids[0],
        producer_epoch=ids[1],
        base_sequence=ids[2],
        is_transactional=producer is not None,
        compression=compression,
    )


@given(pairs_and_stamps, producers, compressions)
def test_the_bytes_are_encode_records_bytes(
    entries: list[tuple[bytes | None, bytes | None, int]],
    producer: tuple[int, int, int] | None,
    compression: Compression | None,
) -> None:
    encoded = encode_append_batch(
        [(key, value) for key, value, _ in entries],
        timestamp_ms=0,
        compression=compression,
        require_keys=False,
        producer=producer,
        timestamps=[stamp for _, _, stamp in entries],
    )
    assert bytes(encoded) == _reference(entries, producer, compression)


def test_a_first_timestamp_of_none_yet_is_encoded_as_before() -> None:
    entries: list[tuple[bytes | None, bytes | None, int]] = [
        (b"a", b"1", NO_TIMESTAMP),
        (b"b", None, 5),
    ]
    encoded = encode_append_batch(
        [(k, v) for k, v, _ in entries],
        timestamp_ms=0,
        compression=None,
        require_keys=True,
        timestamps=[t for _, _, t in entries],
    )
    assert bytes(encoded) == _reference(entries, None, None)


@pytest.mark.parametrize(
    ("pairs", "timestamps", "message"),
    [
        ([(b"a", "text")], [1], "record 0 must be a (key, value) pair"),
        ([(b"a", b"1"), 7], [1, 2], "record 1 must be a (key, value) pair"),
        ([(b"a", b"1")], [2**63], "timestamps"),
        ([(b"a", b"1"), (b"b", b"2")], [1, "2"], "timestamps"),
        ([(b"a", b"1")], [1, 2], "2 timestamps for 1 records"),
    ],
)
def test_bad_records_and_timestamps_raise_before_anything_is_encoded(
    pairs: list[object], timestamps: list[object], message: str
) -> None:
    with pytest.raises(InvalidRecordError, match=message.replace("(", r"\(").replace(")", r"\)")):
        encode_append_batch(
            pairs,  # type: ignore[arg-type]
            timestamp_ms=0,
            compression=None,
            require_keys=False,
            timestamps=timestamps,  # type: ignore[arg-type]
        )
