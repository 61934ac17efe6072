"""``key_value_pairs``: the restore path's ``(key, value)`` list of one batch, in log order."""

from __future__ import annotations

from pathlib import Path

import pytest

from changelog.errors import CorruptRecordError
from changelog.record import batch as rb
from changelog.record.batch import (
    decode_key_values,
    decode_record_tuples,
    decode_records,
    encode_batch,
    key_value_pairs,
)
from changelog.record.compression import GZIP, ZSTD, Compression

PATH = Path("/data/topic-0/00000000000000000000.log")
TS = 1_700_000_000_000

PAIRS: list[tuple[bytes | None, bytes | None]] = [
    (b"a", b"1"),
    (b"b", None),
    (b"a", b""),
    (None, b"x"),
    (b"c", b"3" * 300),
]


def _pairs(batch: bytes) -> list[tuple[bytes | None, bytes | None]]:
    return key_value_pairs(batch, path=PATH, position=0)


def test_every_record_in_log_order_as_decode_key_values_without_offsets() -> None:
    batch = encode_batch(7, PAIRS, timestamp_ms=TS)
    assert _pairs(batch) == PAIRS
    assert [(k, v) for _o, k, v in decode_key_values(batch, path=PATH, position=0)] == PAIRS


@pytest.mark.parametrize("codec", [GZIP, ZSTD])
def test_a_compressed_batch_is_decompressed_first(codec: int) -> None:
    batch = encode_batch(7, PAIRS, timestamp_ms=TS, compression=Compression(codec=codec))
    assert _pairs(batch) == PAIRS


def test_the_same_pairs_without_the_compiled_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = encode_batch(7, PAIRS, timestamp_ms=TS)
    monkeypatch.setattr(rb, "_DECODE", None)
    assert _pairs(batch) == PAIRS


@pytest.mark.parametrize("compiled", [True, False])
def test_record_tuples_are_the_records_fields(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = encode_batch(7, PAIRS, timestamp_ms=TS)
    records = decode_records(batch, path=PATH, position=0)
    if not compiled:
        monkeypatch.setattr(rb, "_DECODE", None)
    assert decode_record_tuples(batch, path=PATH, position=0) == [
        (r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in records
    ]
    assert [t[:2] for t in decode_record_tuples(batch, path=PATH, position=0)] == [
        (7 + i, TS) for i in range(len(PAIRS))
    ]


@pytest.mark.parametrize("compiled", [True, False])
def test_a_corrupt_batch_names_its_place(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = bytearray(encode_batch(0, PAIRS, timestamp_ms=TS))
    batch[-3] ^= 0xFF
    if not compiled:
        monkeypatch.setattr(rb, "_DECODE", None)
    with pytest.raises(CorruptRecordError) as info:
        _pairs(bytes(batch))
    assert info.value.path == PATH
