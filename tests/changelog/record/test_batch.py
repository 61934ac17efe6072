"""Record batch v2 codec: golden bytes, round trips, fast path == reference, corruption detection."""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest
from aiokafka.record.default_records import _DefaultRecordBatchPy
from hypothesis import given
from hypothesis import strategies as st

from changelog import native
from changelog.errors import CorruptRecordError, InvalidRecordError, UnsupportedFormatError
from changelog.limits import NO_TIMESTAMP
from changelog.record import batch as rb
from changelog.record.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
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
    validate_batch,
)
from changelog.record.varint import read_varint, size_of_varint, write_varint

PATH = Path("/data/topic-0/00000000000000000000.log")
TS = 1_700_000_000_000  # 0x0000018BCFE56800

EncodeBatch = Callable[..., bytes]
EncodeRecords = Callable[..., bytes]

ENCODE_BATCH = [encode_batch, encode_batch_py]
ENCODE_RECORDS = [encode_records, encode_records_py]
DECODE = [decode_records, decode_records_py]


def crc32c_bitwise(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit: an independent oracle."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def restamp_crc(batch: bytes | bytearray) -> bytes:
    """Recompute the CRC after a deliberate edit, to test checks that come after the CRC."""
    buf = bytearray(batch)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


# --------------------------------------------------------------------------- golden bytes

# One record, hand-derived from the spec (zig-zag varints: 0 -> 00, 1 -> 02, 8 -> 10):
#   10            length 8 (attributes .. headers)
#   00            attributes
#   00            timestamp delta 0
#   00            offset delta 0
#   02 6b         key length 1, "k"
#   02 76         value length 1, "v"
#   00            header count 0
GOLDEN_RECORD = bytes.fromhex("10 00 00 00 02 6b 02 76 00")

# The header in front of it (big-endian):
GOLDEN_HEADER_BEFORE_CRC = bytes.fromhex(
    "00 00 00 00 00 00 00 05"  # base offset 5
    "00 00 00 3a"  # batch length 58 = 61 - 12 + 9
    "00 00 00 00"  # partition leader epoch 0 (a fresh partition's first leader)
    "02"  # magic 2
)
GOLDEN_HEADER_AFTER_CRC = bytes.fromhex(
    "00 00"  # attributes: no compression, CreateTime, not transactional, not control
    "00 00 00 00"  # last offset delta 0
    "00 00 01 8b cf e5 68 00"  # base timestamp 1_700_000_000_000
    "00 00 01 8b cf e5 68 00"  # max timestamp
    "ff ff ff ff ff ff ff ff"  # producer id -1
    "ff ff"  # producer epoch -1
    "ff ff ff ff"  # base sequence -1
    "00 00 00 01"  # records count 1
)


@pytest.mark.parametrize("encode", ENCODE_BATCH)
def test_golden_batch_bytes(encode: EncodeBatch) -> None:
    batch = encode(5, [(b"k", b"v")], timestamp_ms=TS)
    crc = crc32c_bitwise(GOLDEN_HEADER_AFTER_CRC + GOLDEN_RECORD)
    assert crc == 0xE99B8DD8  # pinned, so a change of polynomial or coverage shows here
    expected = (
        GOLDEN_HEADER_BEFORE_CRC + struct.pack(">I", crc) + GOLDEN_HEADER_AFTER_CRC + GOLDEN_RECORD
    )
    assert len(expected) == BATCH_HEADER_SIZE + len(GOLDEN_RECORD)
    assert batch == expected


# A record with a null key, an empty value, one header with a null value and a
# timestamp 10 ms before the batch's base timestamp (the delete horizon 1000):
#   12            length 9
#   00            attributes
#   13            timestamp delta -10 (zig-zag 19)
#   04            offset delta 2
#   01            key length -1: null
#   00            value length 0: empty, not a tombstone
#   02            header count 1
#   02 68         header key length 1, "h"
#   01            header value length -1: null
GOLDEN_RECORD_WITH_HEADER = bytes.fromhex("12 00 13 04 01 00 02 02 68 01")


@pytest.mark.parametrize("encode", ENCODE_RECORDS)
def test_golden_record_with_header_null_key_and_negative_delta(encode: EncodeRecords) -> None:
    record = Record(7, 990, None, b"", (("h", None),))
    batch = encode([record], base_offset=5, last_offset_delta=2, delete_horizon_ms=1000)
    assert batch[BATCH_HEADER_SIZE:] == GOLDEN_RECORD_WITH_HEADER
    assert batch[21:23] == bytes.fromhex("00 40")  # attribute bit 6: delete horizon
    assert batch[27:35] == struct.pack(">q", 1000)  # base timestamp holds the horizon
    assert batch[35:43] == struct.pack(">q", 990)  # max timestamp: the record's
    for decode in DECODE:
        assert decode(batch, path=PATH, position=0) == [record]


def test_crc_is_castagnoli_over_attributes_to_end() -> None:
    batch = encode_batch(0, [(b"key", b"value"), (None, None)], timestamp_ms=TS)
    (stored,) = struct.unpack_from(">I", batch, 17)
    assert stored == crc32c_bitwise(batch[21:])


def test_header_fields_and_derived_properties() -> None:
    batch = encode_batch(100, [(b"a", b"1"), (b"b", None), (None, b"")], timestamp_ms=TS)
    header = decode_header(batch, 0, path=PATH)
    assert (header.base_offset, header.batch_length, header.magic) == (100, len(batch) - 12, 2)
    assert (header.partition_leader_epoch, header.attributes, header.last_offset_delta) == (0, 0, 2)
    assert (header.base_timestamp, header.max_timestamp) == (TS, TS)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.records_count == 3
    assert header.size_in_bytes == len(batch)
    assert (header.last_offset, header.next_offset) == (102, 103)
    assert header.compression == 0
    assert header.timestamp_type == rb.CREATE_TIME
    assert not header.is_transactional
    assert not header.is_control
    assert not header.has_delete_horizon
    assert header.delete_horizon_ms is None


def test_constants_derive_from_the_struct() -> None:
    assert (BATCH_HEADER_SIZE, LOG_OVERHEAD, rb.MAGIC, NO_TIMESTAMP) == (61, 12, 2, -1)


def test_varint_zigzag_vectors() -> None:
    for value, encoded in [(0, "00"), (-1, "01"), (1, "02"), (-10, "13"), (200, "9003")]:
        out = bytearray()
        write_varint(value, out)
        assert out.hex() == encoded
        assert size_of_varint(value) == len(out)
        assert read_varint(bytes(out), 0) == (value, len(out))
    with pytest.raises(ValueError, match="past the end"):
        read_varint(b"\x80", 0)
    with pytest.raises(ValueError, match="longer than"):
        read_varint(b"\xff" * 11, 0)


# --------------------------------------------------------------------------- the fast path


def test_the_fast_codec_is_in_use_unless_pure() -> None:
    assert rb.fast_codec_available() is not native.PURE


def test_the_compiled_decoder_is_built_unless_pure() -> None:
    assert rb.compiled_decoder_available() is not native.PURE


@pytest.fixture
def pure_python_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the public functions as if neither our decoder nor aiokafka's builder were there."""
    monkeypatch.setattr(rb, "_FAST", None)
    monkeypatch.setattr(rb, "_DECODE", None)
    assert not rb.fast_codec_available()
    assert not rb.compiled_decoder_available()


@pytest.mark.usefixtures("pure_python_only")
def test_fallback_without_the_compiled_codec() -> None:
    pairs = [(b"k1", b"v1"), (b"k2", None)]
    batch = encode_batch(3, pairs, timestamp_ms=TS)
    assert batch == encode_batch_py(3, pairs, timestamp_ms=TS)
    assert decode_records(batch, path=PATH, position=0) == [
        Record(3, TS, b"k1", b"v1"),
        Record(4, TS, b"k2", None),
    ]
    assert decode_key_values(batch, path=PATH, position=0) == [(3, b"k1", b"v1"), (4, b"k2", None)]
    record = Record(9, TS, b"k", b"v", (("h", b"x"),))
    assert encode_records([record], base_offset=9, last_offset_delta=0) == encode_records_py(
        [record], base_offset=9, last_offset_delta=0
    )


blobs = st.none() | st.binary(max_size=40)
pair_lists = st.lists(st.tuples(blobs, blobs), min_size=1, max_size=30)
header_lists = st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3).map(tuple)
timestamps = st.integers(min_value=-1, max_value=2**45)


@given(
    base_offset=st.integers(min_value=0, max_value=2**62),
    pairs=pair_lists,
    timestamp=timestamps,
)
def test_encode_batch_fast_equals_reference(
    base_offset: int, pairs: list[tuple[bytes | None, bytes | None]], timestamp: int
) -> None:
    fast = encode_batch(base_offset, pairs, timestamp_ms=timestamp)
    assert fast == encode_batch_py(base_offset, pairs, timestamp_ms=timestamp)
    expected = [
        Record(base_offset + i, timestamp, key, value) for i, (key, value) in enumerate(pairs)
    ]
    assert decode_records(fast, path=PATH, position=0) == expected
    assert decode_records_py(fast, path=PATH, position=0) == expected
    assert decode_key_values(fast, path=PATH, position=0) == [
        (r.offset, r.key, r.value) for r in expected
    ]
    # An independent decoder (aiokafka's pure-Python reader) agrees too.
    other = _DefaultRecordBatchPy(fast)
    assert other.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value) for r in other] == [
        (r.offset, r.timestamp_ms, r.key, r.value) for r in expected
    ]


@st.composite
def record_batches(draw: st.DrawFn) -> tuple[list[Record], int, int, int | None, int]:
    base_offset = draw(st.integers(min_value=0, max_value=2**40))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=1000), max_size=20))
    offsets = []
    delta = draw(st.integers(min_value=0, max_value=5))
    for gap in gaps:
        offsets.append(base_offset + delta)
        delta += gap
    last_offset_delta = (offsets[-1] - base_offset if offsets else 0) + draw(
        st.integers(min_value=0, max_value=50)
    )
    records = [
        Record(offset, draw(timestamps), draw(blobs), draw(blobs), draw(header_lists))
        for offset in offsets
    ]
    horizon = draw(st.none() | st.integers(min_value=0, max_value=2**45))
    epoch = draw(st.integers(min_value=-1, max_value=2**31 - 1))
    return records, base_offset, last_offset_delta, horizon, epoch


@given(record_batches())
def test_encode_records_fast_equals_reference(
    case: tuple[list[Record], int, int, int | None, int],
) -> None:
    records, base_offset, last_offset_delta, horizon, epoch = case
    kwargs = {
        "base_offset": base_offset,
        "last_offset_delta": last_offset_delta,
        "delete_horizon_ms": horizon,
        "partition_leader_epoch": epoch,
    }
    fast = encode_records(records, **kwargs)  # type: ignore[arg-type]
    assert fast == encode_records_py(records, **kwargs)  # type: ignore[arg-type]
    header = decode_header(fast, 0, path=PATH)
    assert header.last_offset == base_offset + last_offset_delta
    assert header.records_count == len(records)
    assert header.partition_leader_epoch == epoch
    assert header.delete_horizon_ms == horizon
    assert header.max_timestamp == max((r.timestamp_ms for r in records), default=NO_TIMESTAMP)
    assert decode_records(fast, path=PATH, position=0) == records
    assert decode_records_py(fast, path=PATH, position=0) == records


def test_empty_batch_keeps_its_offset_range() -> None:
    for encode in ENCODE_RECORDS:
        batch = encode([], base_offset=40, last_offset_delta=9, max_timestamp_ms=TS)
        header = decode_header(batch, 0, path=PATH)
        assert (header.records_count, header.last_offset, header.next_offset) == (0, 49, 50)
        assert (header.base_timestamp, header.max_timestamp) == (TS, TS)
        assert len(batch) == BATCH_HEADER_SIZE
        for decode in DECODE:
            assert decode(batch, path=PATH, position=0) == []
        validate_batch(batch, 0, header, path=PATH)


def test_transactional_and_producer_fields() -> None:
    record = Record(0, TS, b"k", b"v")
    for encode in ENCODE_RECORDS:
        batch = encode(
            [record],
            base_offset=0,
            last_offset_delta=0,
            producer_id=77,
            producer_epoch=3,
            base_sequence=12,
            is_transactional=True,
        )
        header = decode_header(batch, 0, path=PATH)
        assert header.is_transactional
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 12)


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    records = [Record(0, 5, b"a", b""), Record(1, 6, b"b", b"")]
    batch = bytearray(encode_records_py(records, base_offset=0, last_offset_delta=1))
    struct.pack_into(">h", batch, 21, 0x08)  # LogAppendTime, as a broker with that topic setting
    struct.pack_into(">q", batch, 35, TS)
    stamped = restamp_crc(batch)
    assert decode_header(stamped, 0, path=PATH).timestamp_type == rb.LOG_APPEND_TIME
    for decode in DECODE:
        assert [r.timestamp_ms for r in decode(stamped, path=PATH, position=0)] == [TS, TS]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("encode", ENCODE_BATCH)
@pytest.mark.parametrize(
    "pairs",
    [
        [],
        [("k", b"v")],
        [(b"k", "v")],
        [(b"k", 1)],
        [(bytearray(b"k"), b"v")],
        [(b"k", memoryview(b"v"))],
        [(b"k",)],
        [(b"k", b"v", b"x")],
        [b"kv"],
        [None],
        b"kv",
        "kv",
    ],
)
def test_encode_batch_rejects_bad_pairs(encode: EncodeBatch, pairs: object) -> None:
    with pytest.raises(InvalidRecordError):
        encode(0, pairs, timestamp_ms=TS)


@pytest.mark.parametrize("encode", ENCODE_BATCH)
@pytest.mark.parametrize(
    ("base_offset", "timestamp"),
    [(-1, TS), (2**63, TS), (0, -2), (0, 2**63), ("0", TS), (0, 1.5), (True, TS)],
)
def test_encode_batch_rejects_bad_offsets_and_timestamps(
    encode: EncodeBatch, base_offset: object, timestamp: object
) -> None:
    with pytest.raises(InvalidRecordError):
        encode(base_offset, [(b"k", b"v")], timestamp_ms=timestamp)


@pytest.mark.parametrize("encode", ENCODE_RECORDS)
@pytest.mark.parametrize(
    ("records", "kwargs"),
    [
        ([Record(5, TS, b"k", b"v"), Record(5, TS, b"k", b"v")], {}),  # offsets repeat
        ([Record(6, TS, b"k", b"v"), Record(5, TS, b"k", b"v")], {}),  # offsets go back
        ([Record(4, TS, b"k", b"v")], {}),  # before the base offset
        ([Record(20, TS, b"k", b"v")], {}),  # after last offset delta
        ([Record(5, -5, b"k", b"v")], {}),  # negative timestamp
        ([Record(5, TS, "k", b"v")], {}),  # type: ignore[arg-type]
        ([Record(5, TS, b"k", b"v", (("h", "x"),))], {}),  # type: ignore[arg-type]
        ([Record(5, TS, b"k", b"v", [("h", b"x")])], {}),  # type: ignore[arg-type]
        ([(5, TS, b"k", b"v")], {}),
        ([Record(5, TS, b"k", b"v")], {"max_timestamp_ms": TS}),  # only for empty batches
        ([Record(5, TS, b"k", b"v")], {"is_transactional": True}),  # no producer id
        ([Record(5, TS, b"k", b"v")], {"producer_id": 1}),  # no epoch / sequence
        ([Record(5, TS, b"k", b"v")], {"delete_horizon_ms": -1}),
        ([Record(5, TS, b"k", b"v")], {"partition_leader_epoch": -2}),
        ([], {"last_offset_delta": 2**31}),
        ([], {"base_offset": -1}),
    ],
)
def test_encode_records_rejects_bad_input(
    encode: EncodeRecords, records: list[Record], kwargs: dict[str, object]
) -> None:
    arguments: dict[str, object] = {"base_offset": 5, "last_offset_delta": 10, **kwargs}
    with pytest.raises(InvalidRecordError):
        encode(records, **arguments)


# --------------------------------------------------------------------------- corruption


def two_batches() -> tuple[bytes, bytes]:
    first = encode_batch(0, [(b"a", b"1"), (b"b", b"2")], timestamp_ms=TS)
    second = encode_records(
        [Record(2, TS, b"key", b"value", (("h", b"x"),)), Record(4, TS + 1, None, None)],
        base_offset=2,
        last_offset_delta=3,
    )
    return first, second


def test_iter_batches_walks_to_exactly_the_end() -> None:
    first, second = two_batches()
    buf = first + second
    assert [(pos, h.base_offset) for pos, h in iter_batches(buf, path=PATH)] == [
        (0, 0),
        (len(first), 2),
    ]
    assert [pos for pos, _ in iter_batches(buf, path=PATH, start_position=len(first))] == [
        len(first)
    ]
    assert list(iter_batches(buf, path=PATH, start_position=len(buf))) == []
    assert list(iter_batches(b"", path=PATH)) == []
    with pytest.raises(ValueError, match="outside"):
        list(iter_batches(buf, path=PATH, start_position=len(buf) + 1))


def test_iter_batches_reads_an_mmap(tmp_path: Path) -> None:
    first, second = two_batches()
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(first + second)
    with log.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:
        positions = [pos for pos, _ in iter_batches(view, path=log)]
    assert positions == [0, len(first)]


def test_every_flipped_bit_under_the_crc_is_detected() -> None:
    first, second = two_batches()
    for byte in range(21, len(second)):
        for bit in range(8):
            corrupt = bytearray(second)
            corrupt[byte] ^= 1 << bit
            buf = first + bytes(corrupt)
            with pytest.raises(CorruptRecordError) as info:
                list(iter_batches(buf, path=PATH))
            assert info.value.position == len(first)
            assert info.value.path == PATH
            for decode in DECODE:
                with pytest.raises(CorruptRecordError) as info:
                    decode(bytes(corrupt), path=PATH, position=4096)
                assert info.value.position == 4096


def test_crc_mismatch_reports_expected_and_actual() -> None:
    first, _ = two_batches()
    corrupt = bytearray(first)
    corrupt[-1] ^= 0xFF
    header = decode_header(corrupt, 0, path=PATH)
    with pytest.raises(CorruptRecordError, match="CRC-32C") as info:
        validate_batch(corrupt, 0, header, path=PATH)
    assert info.value.expected == header.crc
    assert info.value.actual == crc32c.crc32c(bytes(corrupt[21:]))


def test_base_offset_and_leader_epoch_are_outside_the_crc() -> None:
    """As in Kafka: a broker assigns both without recomputing the CRC."""
    first, _ = two_batches()
    patched = bytearray(first)
    struct.pack_into(">qii", patched, 0, 1000, len(first) - 12, 7)
    assert [h.base_offset for _, h in iter_batches(bytes(patched), path=PATH)] == [1000]


def test_a_torn_tail_is_reported_at_its_position() -> None:
    first, second = two_batches()
    for cut in range(1, len(second)):
        batches = iter_batches(first + second[:cut], path=PATH)
        assert next(batches)[0] == 0
        with pytest.raises(CorruptRecordError) as info:
            next(batches)
        assert info.value.position == len(first)
        assert "torn" in info.value.reason


@pytest.mark.parametrize(
    "garbage",
    [b"\x00" * 100, b"\xff" * 100, b"\x00" * 12, bytes(range(80))],
    ids=["zeros", "ones", "zero-length", "counting"],
)
def test_garbage_after_a_good_batch(garbage: bytes) -> None:
    first, _ = two_batches()
    with pytest.raises(CorruptRecordError) as info:
        list(iter_batches(first + garbage, path=PATH))
    assert info.value.position == len(first)


def legacy_message(magic: int) -> bytes:
    """A v0/v1 message: offset, size, then crc (zlib CRC-32 of magic..end), magic, attributes,
    [timestamp], key and value (int32 lengths)."""
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", TS)
    body += struct.pack(">i", 1) + b"k" + struct.pack(">i", 1) + b"v"
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_unsupported(magic: int) -> None:
    legacy = legacy_message(magic)
    with pytest.raises(UnsupportedFormatError, match=f"v{magic}") as info:
        decode_header(legacy, 0, path=PATH)
    assert info.value.position == 0
    first, _ = two_batches()
    with pytest.raises(UnsupportedFormatError) as info:
        list(iter_batches(first + legacy, path=PATH))
    assert info.value.position == len(first)


@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_looking_torn_or_garbled_message_is_corrupt(magic: int) -> None:
    legacy = legacy_message(magic)
    garbled = bytearray(legacy)
    garbled[-1] ^= 0x01
    for bad in [legacy[:-1], bytes(garbled)]:
        with pytest.raises(CorruptRecordError, match="garbage or a torn write"):
            decode_header(bad, 0, path=PATH)


def test_unknown_magic_is_corrupt() -> None:
    first, _ = two_batches()
    bad = bytearray(first)
    bad[16] = 3
    with pytest.raises(CorruptRecordError) as info:
        decode_header(bad, 0, path=PATH)
    assert (info.value.expected, info.value.actual) == (2, 3)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_ids_are_unsupported(codec: int) -> None:
    first, _ = two_batches()
    compressed = bytearray(first)
    struct.pack_into(">h", compressed, 21, codec)
    valid = restamp_crc(compressed)
    with pytest.raises(UnsupportedFormatError, match="codec id"):
        decode_header(valid, 0, path=PATH)
    with pytest.raises(UnsupportedFormatError):
        list(iter_batches(valid, path=PATH))
    for decode in DECODE:
        with pytest.raises(UnsupportedFormatError):
            decode(valid, path=PATH, position=0)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_codec_bits_over_records_that_do_not_decompress(codec: int) -> None:
    """A valid CRC over a codec id whose records are not that codec's stream: corrupt, typed."""
    first, _ = two_batches()
    compressed = bytearray(first)
    struct.pack_into(">h", compressed, 21, codec)
    valid = restamp_crc(compressed)
    assert decode_header(valid, 0, path=PATH).compression == codec
    for decode in DECODE:
        with pytest.raises(CorruptRecordError) as info:
            decode(valid, path=PATH, position=77)
        assert info.value.position == 77


@pytest.mark.parametrize(
    ("offset", "value"),
    [
        (57, 3),  # records_count too high: the records run out
        (57, 1),  # records_count too low: bytes left over
        (61, 0x7E),  # first record's length varint far too big
        (65, 0x7F),  # first record's key length says 63 bytes: more than the record holds
    ],
)
def test_bad_framing_under_a_valid_crc(offset: int, value: int) -> None:
    first, _ = two_batches()
    bad = bytearray(first)
    if offset == 57:
        struct.pack_into(">i", bad, offset, value)
    else:
        bad[offset] = value
    valid_crc = restamp_crc(bad)
    for decode in DECODE:
        with pytest.raises(CorruptRecordError) as info:
            decode(valid_crc, path=PATH, position=100)
        assert info.value.position is not None
        assert info.value.position >= 100


def test_header_sanity_checks() -> None:
    first, _ = two_batches()
    for offset, fmt, value, words in [
        (8, ">i", 10, "smaller than"),  # batch length below the header size
        (57, ">i", -1, "negative"),  # records count
        (23, ">i", -1, "negative"),  # last offset delta
        (57, ">i", 1000, "cannot fit"),  # more records than bytes
    ]:
        bad = bytearray(first)
        struct.pack_into(fmt, bad, offset, value)
        with pytest.raises(CorruptRecordError, match=words):
            decode_header(bad, 0, path=PATH)


def test_decode_header_bounds_against_end() -> None:
    first, _ = two_batches()
    header_only = first[:BATCH_HEADER_SIZE]
    with pytest.raises(CorruptRecordError, match="torn"):
        decode_header(header_only, 0, path=PATH)
    assert decode_header(header_only, 0, path=PATH, end=len(first)).records_count == 2
    with pytest.raises(CorruptRecordError, match="torn batch header"):
        decode_header(first[:16], 0, path=PATH)


def test_decode_needs_exactly_one_batch() -> None:
    first, second = two_batches()
    for decode in [*DECODE, decode_key_values]:
        with pytest.raises(CorruptRecordError, match="exactly one batch"):
            decode(first + second, path=PATH, position=0)


def test_decode_without_validation_skips_only_the_crc() -> None:
    first, _ = two_batches()
    bad = bytearray(first)
    bad[-2] ^= 0x01  # inside the last value's bytes: framing stays intact
    for decode in DECODE:
        records = decode(bytes(bad), path=PATH, position=0, validate=False)
        assert records[-1].value == b"3"
    assert [h.base_offset for _, h in iter_batches(bytes(bad), path=PATH, validate=False)] == [0]


def test_validating_decode_checks_the_crc_before_the_fields_under_it() -> None:
    """Length bounds, then the CRC, then the fields and compression bits it covers."""
    first, second = two_batches()
    buf = first + second
    for offset, fmt, value in [
        (21, ">h", 5),  # codec bits: without the CRC this reads as "unknown codec"
        (21, ">h", 7),
        (57, ">i", -1),  # records_count: without the CRC this reads as "negative"
        (23, ">i", -1),  # last_offset_delta
    ]:
        bad = bytearray(buf)
        struct.pack_into(fmt, bad, len(first) + offset, value)
        with pytest.raises(CorruptRecordError, match="CRC-32C") as info:
            decode_header(bad, len(first), path=PATH, validate=True, file_position=9000)
        assert info.value.position == 9000
        with pytest.raises(CorruptRecordError, match="CRC-32C") as info:
            list(iter_batches(bytes(bad), path=PATH))
        assert info.value.position == len(first)
        with pytest.raises((CorruptRecordError, UnsupportedFormatError)):
            decode_header(bad, len(first), path=PATH)  # header only: the CRC is not checked
    # A validating decode needs the whole batch; a bounds error names the file position.
    with pytest.raises(CorruptRecordError, match="buffer ends inside it") as info:
        decode_header(first[:-1], 0, path=PATH, end=len(first), validate=True, file_position=7)
    assert info.value.position == 7
    with pytest.raises(CorruptRecordError, match="torn") as info:
        decode_header(first[:-1], 0, path=PATH, validate=True, file_position=7)
    assert info.value.position == 7
    assert decode_header(buf, len(first), path=PATH, validate=True).base_offset == 2


def test_batch_extents_and_declared_size() -> None:
    first, second = two_batches()
    assert rb.declared_size(first) == len(first)
    assert rb.declared_size(first + second, len(first)) == len(second)
    assert rb.batch_extents(first + second, path=PATH) == [
        (len(first), 1, TS),
        (len(second), 5, TS + 1),
    ]
    assert rb.batch_extents(b"", path=PATH) == []
    with pytest.raises(CorruptRecordError) as info:
        rb.batch_extents(first + second[:-1], path=PATH)
    assert info.value.position == len(first)


def test_a_first_record_without_timestamp_sets_the_base_timestamp() -> None:
    """Kafka bases timestamp deltas on the first record even when its timestamp is -1
    (NO_TIMESTAMP); the compiled builder would skip it, so both paths must agree."""
    records = [Record(0, NO_TIMESTAMP, None, None), Record(1, 0, None, None)]
    for encode in ENCODE_RECORDS:
        batch = encode(records, base_offset=0, last_offset_delta=1)
        assert decode_header(batch, 0, path=PATH).base_timestamp == NO_TIMESTAMP
        assert decode_records(batch, path=PATH, position=0) == records
