"""Compressed record batches: Kafka's own batches byte for byte, round trips, mixed codecs.

``KAFKA_BATCHES`` are whole batches Kafka 3.9.2 built from :data:`RECORDS` (and
the golden streams of ``test_compression.py`` came the same way), with::

    jshell --class-path "$(cat .cache/kafka/3.9.2/classpath.txt)" <<'EOF'
    import org.apache.kafka.common.compress.Compression;
    import org.apache.kafka.common.record.*;
    // for c in Compression.NONE, Compression.gzip().build(), ... snappy, lz4, zstd:
    MemoryRecords m = MemoryRecords.withRecords(RecordBatch.MAGIC_VALUE_V2, 0L, c,
        TimestampType.CREATE_TIME, -1L, (short) -1, -1, 0, false, records);
    // print m.buffer() as hex; for streams: c.wrapForOutput(out, MAGIC_VALUE_V2)
    EOF

Our encoders must produce the same bytes and our decoders the same records.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelog.errors import CorruptRecordError
from changelog.record.batch import (
    LOG_APPEND_TIME,
    Compression,
    Record,
    decode_header,
    decode_key_values,
    decode_records,
    decode_records_py,
    encode_batch,
    encode_batch_py,
    encode_records,
    encode_records_py,
    iter_batches,
    uncompressed_batch,
)
from changelog.record.compression import CODEC_NAMES

PATH = "/data/t-0/00000000000000000000.log"
TS = 1_700_000_000_000
PAIRS: list[tuple[bytes | None, bytes | None]] = [
    (b"k", b"v"),
    (b"k2", None),
    (b"key-3", b"value-value-value"),
]
HEADERS = ((), (), (("h", b"x"),))
RECORDS = [
    Record(offset, TS, key, value, headers)
    for offset, ((key, value), headers) in enumerate(zip(PAIRS, HEADERS, strict=True))
]
KAFKA_BATCHES = {
    "none": (
        "0000000000000000000000640000000002f909de200000000000020000018bcfe568000000018bcfe56800ff"
        "ffffffffffffffffffffffffff0000000310000000026b02760010000002046b320100400000040a6b65792d"
        "332276616c75652d76616c75652d76616c75650202680278"
    ),
    "gzip": (
        "00000000000000000000006d0000000002c432c67c0001000000020000018bcfe568000000018bcfe56800ff"
        "ffffffffffffffffffffffffff000000031f8b08000000000000ff1360606060ca662a631000d22cd9468c0c"
        "0e0c0c2c5cd9a995bac64a658939a5a9ba48241353065305009024567e33000000"
    ),
    "snappy": (
        "00000000000000000000007a0000000002a9ee00c40002000000020000018bcfe568000000018bcfe56800ff"
        "ffffffffffffffffffffffffff0000000382534e415050590000000001000000010000003533c81000000002"
        "6b02760010000002046b320100400000040a6b65792d332276616c75652d76616c75652d76616c7565020268"
        "0278"
    ),
    "lz4": (
        "00000000000000000000006d000000000241e23cf50003000000020000018bcfe568000000018bcfe56800ff"
        "ffffffffffffffffffffffffff0000000304224d186040822d000000f71410000000026b0276001000000204"
        "6b320100400000040a6b65792d332276616c75652d060050020268027800000000"
    ),
    "zstd": (
        "00000000000000000000006c000000000265eac1670004000000020000018bcfe568000000018bcfe56800ff"
        "ffffffffffffffffffffffffff0000000328b52ffd00587c0100840210000000026b02760010000002046b32"
        "0100400000040a6b65792d332276616c75652d020268027801008b519e010000"
    ),
}
CODECS = sorted(KAFKA_BATCHES, key=["none", "gzip", "snappy", "lz4", "zstd"].index)


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("encode", [encode_batch, encode_batch_py])
def test_we_build_kafkas_batch(name: str, encode: object) -> None:
    built = encode(0, PAIRS, timestamp_ms=TS, headers=HEADERS, compression=Compression.of(name))  # type: ignore[operator]
    assert built.hex() == KAFKA_BATCHES[name]


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("encode", [encode_records, encode_records_py])
def test_encode_records_builds_kafkas_batch(name: str, encode: object) -> None:
    built = encode(RECORDS, base_offset=0, last_offset_delta=2, compression=Compression.of(name))  # type: ignore[operator]
    assert built.hex() == KAFKA_BATCHES[name]


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("decode", [decode_records, decode_records_py])
def test_we_read_kafkas_batch(name: str, decode: object) -> None:
    batch = bytes.fromhex(KAFKA_BATCHES[name])
    header = decode_header(batch, 0, path=PATH, validate=True)
    assert CODEC_NAMES[header.compression] == name
    assert decode(batch, path=PATH, position=0) == RECORDS  # type: ignore[operator]
    assert decode_key_values(batch, path=PATH, position=0) == [
        (r.offset, r.key, r.value) for r in RECORDS
    ]


def test_mixed_codecs_in_one_buffer() -> None:
    """Batches of every codec back to back, as a partition holds them: all read, in order."""
    log = b"".join(
        encode_batch(i * 3, PAIRS, timestamp_ms=TS + i, compression=Compression.of(name))
        for i, name in enumerate(CODECS)
    )
    seen = []
    for position, header in iter_batches(log, path=PATH):
        raw = log[position : position + header.size_in_bytes]
        seen.append(
            (
                CODEC_NAMES[header.compression],
                [r.offset for r in decode_records(raw, path=PATH, position=position)],
            )
        )
    assert seen == [(name, [i * 3, i * 3 + 1, i * 3 + 2]) for i, name in enumerate(CODECS)]


def test_many_small_records_compress_below_the_uncompressed_bound() -> None:
    """1,000 records in fewer bytes than 7 per record: legal only when compressed."""
    pairs: list[tuple[bytes | None, bytes | None]] = [(b"k", b"v")] * 1000
    batch = encode_batch(0, pairs, timestamp_ms=TS, compression=Compression.of("zstd"))
    assert len(batch) - 61 < 7 * 1000  # the bound an uncompressed batch must meet
    assert len(decode_records(batch, path=PATH, position=0)) == 1000


def test_uncompressed_view_is_for_decoding_only() -> None:
    batch = bytes.fromhex(KAFKA_BATCHES["lz4"])
    header = decode_header(batch, 0, path=PATH)
    plain = uncompressed_batch(batch, header, path=PATH, position=0)
    assert bytes(plain)[61:] == bytes.fromhex(KAFKA_BATCHES["none"])[61:]
    assert decode_header(plain, 0, path=PATH).compression == 0
    assert uncompressed_batch(
        bytes.fromhex(KAFKA_BATCHES["none"]),
        decode_header(bytes.fromhex(KAFKA_BATCHES["none"]), 0, path=PATH),
        path=PATH,
        position=0,
    ) == bytes.fromhex(KAFKA_BATCHES["none"])


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_a_damaged_stream_under_a_valid_crc_is_corrupt(name: str) -> None:
    import crc32c  # noqa: PLC0415

    batch = bytearray.fromhex(KAFKA_BATCHES[name])
    del batch[-3:]  # the stream's tail
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    for decode in (decode_records, decode_records_py, decode_key_values):
        with pytest.raises(CorruptRecordError) as info:
            decode(bytes(batch), path=PATH, position=4096)
        assert info.value.position == 4096


def test_empty_and_log_append_time_batches() -> None:
    empty = encode_records(
        [],
        base_offset=5,
        last_offset_delta=3,
        max_timestamp_ms=TS,
        compression=Compression.of("gzip"),
    )
    assert decode_header(empty, 0, path=PATH).compression == 0  # writeEmptyHeader: uncompressed
    stamped = encode_records(
        RECORDS,
        base_offset=0,
        last_offset_delta=2,
        timestamp_type=LOG_APPEND_TIME,
        compression=Compression.of("lz4"),
    )
    header = decode_header(stamped, 0, path=PATH, validate=True)
    assert header.timestamp_type == LOG_APPEND_TIME and header.compression == 3
    control = encode_records(RECORDS[:1], base_offset=0, last_offset_delta=0, is_control=True)
    assert decode_header(control, 0, path=PATH, validate=True).is_control


record_strategy = st.lists(
    st.tuples(
        st.binary(max_size=40),
        st.none() | st.binary(max_size=300) | st.binary(max_size=8).map(lambda b: b * 50),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2).map(
            tuple
        ),
    ),
    min_size=1,
    max_size=40,
)
compression_strategy = st.sampled_from(
    [Compression.of(n) for n in CODECS]
    + [Compression.of("gzip", 1), Compression.of("lz4", 12), Compression.of("zstd", 19)]
)


@settings(max_examples=60, deadline=None)
@given(
    records=record_strategy,
    compression=compression_strategy,
    base=st.integers(0, 2**40),
    ts=st.integers(0, 2**41),
)
def test_round_trip_across_codecs(
    records: list[tuple[bytes, bytes | None, tuple[tuple[str, bytes | None], ...]]],
    compression: Compression,
    base: int,
    ts: int,
) -> None:
    pairs: list[tuple[bytes | None, bytes | None]] = [(k, v) for k, v, _ in records]
    headers = [h for _, _, h in records]
    fast = encode_batch(base, pairs, timestamp_ms=ts, headers=headers, compression=compression)
    assert fast == encode_batch_py(
        base, pairs, timestamp_ms=ts, headers=headers, compression=compression
    )
    expected = [Record(base + i, ts, k, v, h) for i, (k, v, h) in enumerate(records)]
    assert decode_records(fast, path=PATH, position=0) == expected
    assert decode_records_py(fast, path=PATH, position=0) == expected
    again = encode_records(
        expected, base_offset=base, last_offset_delta=len(records) - 1, compression=compression
    )
    assert again == encode_records_py(
        expected, base_offset=base, last_offset_delta=len(records) - 1, compression=compression
    )
    assert decode_records(again, path=PATH, position=0) == expected
