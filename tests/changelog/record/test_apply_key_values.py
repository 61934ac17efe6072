"""``apply_key_values``: the restore path's one-pass hand-over of a batch's records."""

from __future__ import annotations

from pathlib import Path

import pytest

from changelog.errors import CorruptRecordError
from changelog.record import batch as rb
from changelog.record.batch import apply_key_values, decode_key_values, encode_batch
from changelog.record.compression import GZIP, ZSTD, Compression

PATH = Path("/data/topic-0/00000000000000000000.log")
TS = 1_700_000_000_000


def _calls(batch: bytes) -> tuple[list[tuple[str, object, object]], int]:
    calls: list[tuple[str, object, object]] = []
    count = apply_key_values(
        batch,
        lambda key, value: calls.append(("put", key, value)),
        lambda key: calls.append(("delete", key, None)),
        path=PATH,
        position=0,
    )
    return calls, count


PAIRS: list[tuple[bytes | None, bytes | None]] = [
    (b"a", b"1"),
    (b"b", None),
    (b"a", b""),
    (None, b"x"),
    (b"c", b"3" * 300),
]


def _expected() -> list[tuple[str, object, object]]:
    return [("put", k, v) if v is not None else ("delete", k, None) for k, v in PAIRS]


def test_hands_every_record_to_put_or_delete_in_order() -> None:
    batch = encode_batch(7, PAIRS, timestamp_ms=TS)
    calls, count = _calls(batch)
    assert calls == _expected()
    assert count == len(PAIRS)
    assert [(k, v) for _o, k, v in decode_key_values(batch, path=PATH, position=0)] == PAIRS


@pytest.mark.parametrize("codec", [GZIP, ZSTD])
def test_a_compressed_batch_is_decompressed_first(codec: int) -> None:
    batch = encode_batch(7, PAIRS, timestamp_ms=TS, compression=Compression(codec=codec))
    calls, count = _calls(batch)
    assert calls == _expected()
    assert count == len(PAIRS)


def test_same_calls_without_the_compiled_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = encode_batch(7, PAIRS, timestamp_ms=TS)
    monkeypatch.setattr(rb, "_FAST", None)
    calls, count = _calls(batch)
    assert calls == _expected()
    assert count == len(PAIRS)


def test_a_corrupt_batch_names_its_place() -> None:
    batch = bytearray(encode_batch(0, PAIRS, timestamp_ms=TS))
    batch[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError) as info:
        _calls(bytes(batch))
    assert info.value.path == PATH
