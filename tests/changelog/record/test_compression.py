"""Compression codecs: Kafka's framing byte for byte, round trips, typed errors on bad streams.

The golden hex strings are what Kafka 3.9.2's own ``Compression.wrapForOutput``
wrote for the same inputs (run once with ``jshell`` on Kafka's classpath; see
``docs/formats.md``, "Compression"), so they pin "as Kafka writes it", not
merely "as we wrote it last time".
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
import zlib

import cramjam
import lz4.block
import lz4.frame
import pytest
from hypothesis import given
from hypothesis import strategies as st

from changelog.config import COMPRESSION_TYPES, LogConfig
from changelog.errors import CorruptRecordError, InvalidConfigError, UnsupportedFormatError
from changelog.record.compression import (
    CODEC_NAMES,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    Compression,
    compress,
    compression_for,
    decompress,
)

PATH = "/data/t-0/00000000000000000000.log"
DATA = b"".join(b"key-%03d value-%05d " % (i % 50, i) for i in range(3000))  # ~60 KB, compressible


def roundtrip(data: bytes, compression: Compression) -> bytes:
    return decompress(compression.codec, compress(data, compression), path=PATH, position=0)


def test_names_are_kafkas() -> None:
    assert CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    assert COMPRESSION_TYPES == ("producer", "none", "gzip", "snappy", "lz4", "zstd")


# --------------------------------------------------------------------------- golden bytes


def test_gzip_golden_bytes() -> None:
    """JDK 16+ GZIPOutputStream framing around zlib's raw deflate at level 6."""
    out = compress(b"aaaaaaaaaa", Compression(codec=GZIP))
    deflated = zlib.compressobj(6, zlib.DEFLATED, -15, 8)
    body = deflated.compress(b"aaaaaaaaaa") + deflated.flush()
    assert out == (
        bytes.fromhex("1f8b 08 00 00000000 00 ff")
        + body
        + struct.pack("<II", zlib.crc32(b"aaaaaaaaaa"), 10)
    )
    assert out.hex() == "1f8b08000000000000ff4b4c840100f0cd114c0a000000"  # Kafka's
    assert gzip.decompress(out) == b"aaaaaaaaaa"


def test_gzip_level_changes_the_deflate_stream() -> None:
    fast = compress(DATA, Compression(codec=GZIP, level=1))
    best = compress(DATA, Compression(codec=GZIP, level=9))
    assert fast != best and len(best) < len(fast)
    assert gzip.decompress(fast) == gzip.decompress(best) == DATA


def test_snappy_golden_bytes() -> None:
    """xerial SnappyOutputStream: magic header, then [int32 BE length][raw snappy] per 32 KiB."""
    out = compress(b"hello hello hello", Compression(codec=SNAPPY))
    raw = bytes(cramjam.snappy.compress_raw(b"hello hello hello"))
    assert out.hex() == (  # Kafka's
        "82534e4150505900000000010000000100000013114068656c6c6f2068656c6c6f2068656c6c6f"
    )
    assert (
        out
        == bytes.fromhex("82 534e415050 59 00 00000001 00000001")
        + struct.pack(">i", len(raw))
        + raw
    )
    blocks = compress(DATA, Compression(codec=SNAPPY))
    position, sizes = 16, []
    while position < len(blocks):
        (length,) = struct.unpack_from(">i", blocks, position)
        sizes.append(
            len(cramjam.snappy.decompress_raw(blocks[position + 4 : position + 4 + length]))
        )
        position += 4 + length
    assert sizes[:-1] == [32 * 1024] * (len(sizes) - 1) and sum(sizes) == len(DATA)


def test_lz4_golden_bytes() -> None:
    """Kafka's Lz4BlockOutputStream: FLG 0x60, BD 0x40, HC 0x82, 64 KiB blocks, end mark."""
    out = compress(b"abcabcabcabcabcabcabc", Compression(codec=LZ4))
    block = lz4.block.compress(b"abcabcabcabcabcabcabc", mode="default", store_size=False)
    assert out.hex() == "04224d186040820c00000039616263030050626361626300000000"  # Kafka's
    assert out == bytes.fromhex("04224d18 60 40 82") + struct.pack(
        "<I", len(block)
    ) + block + bytes(4)
    # The header checksum is xxh32(FLG BD) >> 8 & 0xff, as lz4's own frame writer computes it.
    reference = lz4.frame.compress(
        b"x",
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    assert reference[:7] == out[:7]
    assert lz4.frame.decompress(out) == b"abcabcabcabcabcabcabc"


def test_lz4_stores_an_incompressible_block_raw() -> None:
    noise = os.urandom(1000)
    out = compress(noise, Compression(codec=LZ4))
    assert out[7:11] == struct.pack("<I", 1000 | 0x80000000)
    assert out[11:1011] == noise and out[1011:] == bytes(4)
    assert lz4.frame.decompress(out) == noise


# Kafka's output for 60,000 bytes of ``(ord("key-value-"[i % 10]) + (i // 1000) % 7)``:
# (size, first 16 hex digits of sha256 of the hex text), per codec and level.
KAFKA_BIG = {
    ("gzip", 1): (618, "618bed905f0cdb61"),
    ("gzip", None): (316, "17a5c111dd5da462"),
    ("gzip", 9): (289, "c9418cf3cedb7f9a"),
    ("snappy", None): (3186, "d7686ac8e7f7f9cf"),
    ("lz4", None): (670, "14120eda72bae2f7"),
    ("lz4", 1): (670, "14120eda72bae2f7"),
    ("lz4", 2): (670, "14120eda72bae2f7"),
    ("lz4", 3): (354, "ec956910669e1f37"),
    ("lz4", 4): (354, "2683c25ca99e088e"),
    ("lz4", 10): (723, "5ba3cab41aa0b177"),
    ("lz4", 12): (351, "b3c4beaeabf43bef"),
    ("lz4", 17): (351, "b3c4beaeabf43bef"),
    ("zstd", None): (194, "6201ba1ab000ab57"),
}


@pytest.mark.parametrize(("name", "level"), sorted(KAFKA_BIG, key=str))
def test_larger_input_matches_kafka_byte_for_byte(name: str, level: int | None) -> None:
    big = bytes((ord("key-value-"[i % 10]) + (i // 1000) % 7) & 0xFF for i in range(60000))
    out = compress(big, Compression.of(name, level)).hex()
    assert (len(out) // 2, hashlib.sha256(out.encode()).hexdigest()[:16]) == KAFKA_BIG[name, level]


def test_lz4_levels_other_than_9_are_hc() -> None:
    default = compress(DATA, Compression(codec=LZ4))
    hc = compress(DATA, Compression(codec=LZ4, level=12))
    fast_blocks = lz4.block.compress(DATA[: 64 * 1024], mode="default", store_size=False)
    assert default[11 : 11 + len(fast_blocks)] == fast_blocks
    assert len(hc) < len(default)
    assert lz4.frame.decompress(hc) == DATA


def test_zstd_golden_bytes() -> None:
    """zstd-jni's stream on close: no content size, the data block, an empty last block."""
    out = compress(b"abcabcabcabcabcabcabc", Compression(codec=ZSTD))
    assert out.hex() == "28b52ffd00584c00001861626301007a6e08010000"  # Kafka's
    out = compress(DATA, Compression(codec=ZSTD))
    assert out[:4] == bytes.fromhex("28b52ffd")
    assert bytes(cramjam.zstd.decompress(out)) == DATA


# --------------------------------------------------------------------------- what other writers write


def test_reads_frames_other_writers_make() -> None:
    # lz4 with block and content checksums and a content size (librdkafka's LZ4F writer)
    framed = lz4.frame.compress(DATA, block_checksum=True, content_checksum=True, store_size=True)
    assert decompress(LZ4, framed, path=PATH, position=0) == DATA
    # gzip members concatenated, and a member with a name and mtime
    two = gzip.compress(b"ab", mtime=12345) + gzip.compress(b"cd")
    assert decompress(GZIP, two, path=PATH, position=0) == b"abcd"
    # snappy without xerial framing (one raw block)
    raw = bytes(cramjam.snappy.compress_raw(DATA))
    assert decompress(SNAPPY, raw, path=PATH, position=0) == DATA
    # zstd from a streaming compressor (no content size in the frame header)
    streaming = cramjam.zstd.Compressor(level=3)
    streaming.compress(DATA[:1000])
    streaming.compress(DATA[1000:])
    assert decompress(ZSTD, bytes(streaming.finish()), path=PATH, position=0) == DATA


@given(
    data=st.binary(max_size=200_000) | st.binary(max_size=64).map(lambda b: b * 2000),
    compression=st.sampled_from(
        [
            Compression(codec=NONE),
            Compression(codec=GZIP),
            Compression(codec=GZIP, level=1),
            Compression(codec=SNAPPY),
            Compression(codec=LZ4),
            Compression(codec=LZ4, level=1),
            Compression(codec=LZ4, level=17),
            Compression(codec=ZSTD),
            Compression(codec=ZSTD, level=-5),
            Compression(codec=ZSTD, level=19),
        ]
    ),
)
def test_round_trip(data: bytes, compression: Compression) -> None:
    assert roundtrip(data, compression) == data


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_a_stream_that_does_not_decompress_is_corrupt(codec: int) -> None:
    good = compress(DATA, Compression(codec=codec))
    for bad in (b"garbage!" * 4, good[: len(good) // 2]):
        with pytest.raises(CorruptRecordError) as info:
            decompress(codec, bad, path=PATH, position=1234)
        assert str(info.value.path) == PATH and info.value.position == 1234


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_ids_are_unsupported(codec: int) -> None:
    with pytest.raises(UnsupportedFormatError, match=f"codec id {codec}"):
        decompress(codec, b"x", path=PATH, position=0)


@pytest.mark.parametrize(
    ("name", "level"),
    [
        ("gzip", 0),
        ("gzip", 10),
        ("gzip", -2),
        ("lz4", 0),
        ("lz4", 18),
        ("zstd", 23),
        ("zstd", -131073),
        ("snappy", 1),
        ("none", 1),
        ("brotli", None),
        ("producer", None),
    ],
)
def test_bad_codec_or_level_is_refused(name: str, level: int | None) -> None:
    with pytest.raises(InvalidConfigError):
        Compression.of(name, level)


def test_kafkas_level_ranges_are_accepted() -> None:
    for name, levels in (("gzip", [-1, 1, 9]), ("lz4", [1, 9, 17]), ("zstd", [-131072, 3, 22])):
        for level in levels:
            assert Compression.of(name, level).level == level


def test_compression_from_the_log_config() -> None:
    assert compression_for(LogConfig()) is None
    assert compression_for(LogConfig(compression_type="producer")) is None
    assert compression_for(LogConfig(compression_type="snappy")) == Compression(codec=SNAPPY)
    config = LogConfig(compression_type="zstd", compression_zstd_level=7, compression_lz4_level=3)
    assert compression_for(config) == Compression(codec=ZSTD, level=7)
    assert compression_for(LogConfig(compression_type="gzip")) == Compression(codec=GZIP, level=-1)
    for bad in (
        {"compression_type": "brotli"},
        {"compression_gzip_level": 0},
        {"compression_lz4_level": 18},
    ):
        with pytest.raises(InvalidConfigError):
            LogConfig(**bad)  # type: ignore[arg-type]
