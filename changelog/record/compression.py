"""The compression codecs of record batch v2, framed exactly as Kafka's Java client writes them.

Attribute bits 0-2 of a batch name its codec; when it is not ``none`` the
records section (everything after the 61-byte header) is one compressed
stream, and the CRC-32C covers the compressed bytes::

    id | name   | framing written here (Kafka 3.9, Java client and broker)  | read here
    ---+--------+-----------------------------------------------------------+--------------------------
     0 | none   | -                                                         | -
     1 | gzip   | one gzip member: header 1f 8b 08 00 00000000 00 ff (what  | any gzip members
       |        | JDK 16+ ``GZIPOutputStream`` writes), raw deflate at      | (concatenated too)
       |        | ``compression.gzip.level`` (-1 = zlib's 6), CRC-32 and    |
       |        | size trailer, little-endian                               |
     2 | snappy | xerial ``SnappyOutputStream``: 16-byte header 82 'SNAPPY' | xerial framing, or one
       |        | 00, int32 version 1, int32 compatible 1 (big-endian);     | raw snappy block (as
       |        | then per 32 KiB of input: int32 BE length, raw snappy     | xerial's reader does)
     3 | lz4    | Kafka's ``Lz4BlockOutputStream``: LZ4 frame, magic        | any LZ4 frame (block
       |        | 04 22 4d 18, FLG 60 (v1, independent blocks, no checksums,| checksums, content size
       |        | no content size), BD 40 (64 KiB blocks), header checksum  | and checksum allowed)
       |        | 82; per 64 KiB of input: uint32 LE length (bit 31 set:    |
       |        | stored uncompressed), block; end mark 00000000.  Levels 9 |
       |        | (the default), 1 and 2 are LZ4's fast compressor, the     |
       |        | others LZ4-HC at that level (as ``Lz4BlockOutputStream``) |
     4 | zstd   | one zstd frame at ``compression.zstd.level`` (default 3)  | zstd frames
       |        | as zstd-jni's stream writes it: no content size, the data |
       |        | blocks, then an empty last block                          |
    5-7| -      | (none)                                                    | UnsupportedFormatError

Bindings (measured in ``benchmarks/compression_bench.py``, choice in
``docs/performance.md``): gzip is the standard library's ``zlib``; snappy and
zstd are ``cramjam``; lz4 is ``python-lz4`` (its block API gives LZ4-HC
levels, which cramjam's lz4 block functions ignore, and its frame decoder
reads every frame flag).

Byte for byte: for the inputs of ``tests/changelog/record/test_compression.py``
every codec's output equals what Kafka 3.9.2's ``Compression.wrapForOutput``
writes (checked with Kafka's own classes through ``jshell``; the golden bytes
there come from that run).

Nothing here touches files or trusts anything: the caller checks the batch
CRC before it decompresses, so a stream that fails to decompress is data that
was written wrong, reported as :class:`~changelog.errors.CorruptRecordError`
with the file and the batch position.

Thread-safety: pure functions; :class:`Compression` is immutable.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Final

import attrs
import cramjam
import lz4.block
import lz4.frame

from changelog.config import COMPRESSION_TYPES, GZIP_LEVELS, LZ4_LEVELS, ZSTD_LEVELS, LogConfig
from changelog.errors import CorruptRecordError, InvalidConfigError, UnsupportedFormatError

__all__ = [
    "CODEC_IDS",
    "CODEC_NAMES",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "Compression",
    "compress",
    "compression_for",
    "decompress",
]

NONE: Final = 0
GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4

CODEC_NAMES: Final = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
"""Codec id (attribute bits 0-2) -> Kafka's name (``CompressionType.name``)."""
CODEC_IDS: Final = {name: codec for codec, name in CODEC_NAMES.items()}
assert ("producer", *CODEC_NAMES.values()) == COMPRESSION_TYPES

# Levels: Kafka's defaults and ranges (CompressionType.GZIP/LZ4/ZSTD), whose home is config.
GZIP_DEFAULT_LEVEL: Final = GZIP_LEVELS[0]  # Deflater.DEFAULT_COMPRESSION (zlib's 6)
LZ4_DEFAULT_LEVEL: Final = LZ4_LEVELS[0]
ZSTD_DEFAULT_LEVEL: Final = ZSTD_LEVELS[0]

# --------------------------------------------------------------------------- gzip

_GZIP_HEADER: Final = bytes.fromhex(
    "1f8b 08 00 00000000 00 ff"
)  # magic, deflate, no flags, mtime 0, xfl 0, OS unknown
_GZIP_TRAILER: Final = struct.Struct("<II")  # CRC-32 of the input, input size mod 2**32
_DEFLATE_WBITS: Final = -15  # raw deflate, 32 KiB window (Java's Deflater(level, nowrap=true))
_GZIP_WBITS: Final = 31  # zlib: expect a gzip header and trailer
_DEFLATE_MEM_LEVEL: Final = 8  # zlib's DEF_MEM_LEVEL, what Java's Deflater uses


def _gzip_compress(data: bytes, level: int) -> bytes:
    deflater = zlib.compressobj(
        level, zlib.DEFLATED, _DEFLATE_WBITS, _DEFLATE_MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY
    )
    body = deflater.compress(data) + deflater.flush()
    return b"".join(
        (_GZIP_HEADER, body, _GZIP_TRAILER.pack(zlib.crc32(data), len(data) & 0xFFFFFFFF))
    )


def _gzip_decompress(data: bytes) -> bytes:
    parts: list[bytes] = []
    rest = data
    while True:  # concatenated members, as Java's GZIPInputStream reads them
        inflater = zlib.decompressobj(_GZIP_WBITS)
        parts.append(inflater.decompress(rest))
        if not inflater.eof:
            raise ValueError("gzip stream ends before its trailer")
        rest = inflater.unused_data
        if not rest:
            return b"".join(parts)


# --------------------------------------------------------------------------- snappy (xerial)

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES: Final = 32 * 1024  # SnappyOutputStream.DEFAULT_BLOCK_SIZE
_XERIAL_LENGTH: Final = struct.Struct(">i")


def _snappy_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
        parts.append(_XERIAL_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < len(_XERIAL_HEADER):
        raise ValueError("xerial snappy header is torn")
    parts: list[bytes] = []
    view = memoryview(data)
    position = len(_XERIAL_HEADER)
    while position < len(data):
        if position + _XERIAL_LENGTH.size > len(data):
            raise ValueError(f"xerial block length torn at byte {position}")
        (length,) = _XERIAL_LENGTH.unpack_from(data, position)
        position += _XERIAL_LENGTH.size
        if length < 0 or position + length > len(data):
            raise ValueError(f"xerial block of {length} bytes overruns the stream")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[position : position + length])))
        position += length
    return b"".join(parts)


# --------------------------------------------------------------------------- lz4 (Kafka framing)

_LZ4_FRAME_HEADER: Final = bytes.fromhex("04224d18" + "60" + "40" + "82")
"""Magic, FLG (version 1, independent blocks), BD (64 KiB), xxh32(FLG BD) >> 8 & 0xff."""
_LZ4_BLOCK_BYTES: Final = 64 * 1024
_LZ4_BLOCK_LENGTH: Final = struct.Struct("<I")
_LZ4_STORED: Final = 0x80000000  # Lz4BlockOutputStream.LZ4_FRAME_INCOMPRESSIBLE_MASK
_LZ4_END_MARK: Final = bytes(4)
_LZ4_HC_MIN_LEVEL: Final = 3
"""Below it Kafka's LZ4-HC (lz4-java) writes what the fast compressor writes (measured)."""


def _lz4_compress(data: bytes, level: int) -> bytes:
    fast = level == LZ4_DEFAULT_LEVEL or level < _LZ4_HC_MIN_LEVEL  # LZ4's fast compressor
    mode = "default" if fast else "high_compression"
    parts = [_LZ4_FRAME_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _LZ4_BLOCK_BYTES):
        chunk = view[start : start + _LZ4_BLOCK_BYTES]
        packed: bytes = lz4.block.compress(chunk, mode=mode, compression=level, store_size=False)
        if len(packed) >= len(chunk):  # incompressible: stored as is
            parts.append(_LZ4_BLOCK_LENGTH.pack(len(chunk) | _LZ4_STORED))
            parts.append(bytes(chunk))
        else:
            parts.append(_LZ4_BLOCK_LENGTH.pack(len(packed)))
            parts.append(packed)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_decompress(data: bytes) -> bytes:
    out: bytes = lz4.frame.decompress(data)
    return out


# --------------------------------------------------------------------------- zstd


def _zstd_compress(data: bytes, level: int) -> bytes:
    # As zstd-jni's ZstdOutputStream on close: a flush (the block so far, not the last),
    # then the end of the frame (an empty last block); no content size in the header.
    stream = cramjam.zstd.Compressor(level=level)
    stream.compress(data)
    return bytes(stream.flush()) + bytes(stream.finish())


def _zstd_decompress(data: bytes) -> bytes:
    return bytes(cramjam.zstd.decompress(data))


# --------------------------------------------------------------------------- public face

_DECOMPRESSORS: Final[dict[int, Callable[[bytes], bytes]]] = {
    GZIP: _gzip_decompress,
    SNAPPY: _snappy_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}


def _check_level(name: str, value: int, levels: tuple[int, range]) -> None:
    default, allowed = levels
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfigError(name, value, "must be an integer")
    if value not in allowed and value != default:
        raise InvalidConfigError(
            name, value, f"must be in [{allowed.start}, {allowed.stop - 1}] or {default}"
        )


@attrs.frozen(kw_only=True)
class Compression:
    """A codec and its level: what an encoder compresses a batch's records with.

    ``codec`` is a codec id (:data:`NONE`, :data:`GZIP`, :data:`SNAPPY`,
    :data:`LZ4`, :data:`ZSTD`); ``level`` is Kafka's level for the codecs that
    have one (``compression.gzip.level``, ``compression.lz4.level``,
    ``compression.zstd.level``), ``None`` for the codec's default.  Immutable.
    """

    codec: int = NONE
    level: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.codec not in CODEC_NAMES:
            raise InvalidConfigError("compression codec", self.codec, "must be 0-4")
        if self.level is None:
            return
        if self.codec == GZIP:
            _check_level("compression_gzip_level", self.level, GZIP_LEVELS)
        elif self.codec == LZ4:
            _check_level("compression_lz4_level", self.level, LZ4_LEVELS)
        elif self.codec == ZSTD:
            _check_level("compression_zstd_level", self.level, ZSTD_LEVELS)
        else:
            raise InvalidConfigError(
                "compression level", self.level, f"{self.name} has no compression level"
            )

    @property
    def name(self) -> str:
        """Kafka's name of the codec (``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd``)."""
        return CODEC_NAMES[self.codec]

    @classmethod
    def of(cls, name: str, level: int | None = None) -> Compression:
        """The codec called ``name`` (Kafka's spelling) at ``level``."""
        if name not in CODEC_IDS:
            raise InvalidConfigError(
                "compression_type", name, f"must be one of {', '.join(COMPRESSION_TYPES)}"
            )
        return cls(codec=CODEC_IDS[name], level=level)


_LEVEL_SETTING: Final = {
    GZIP: "compression_gzip_level",
    LZ4: "compression_lz4_level",
    ZSTD: "compression_zstd_level",
}


def compression_for(config: LogConfig) -> Compression | None:
    """What appends to a log with ``config`` compress with (``None``: uncompressed).

    ``compression_type`` ``producer`` keeps the producer's codec; our appends are
    encoded here from ``(key, value)`` pairs, uncompressed, so it means ``none``.
    """
    name = config.compression_type
    if name in ("producer", "none"):
        return None
    codec = CODEC_IDS[name]
    setting = _LEVEL_SETTING.get(codec)
    return Compression(codec=codec, level=None if setting is None else getattr(config, setting))


def compress(data: bytes, compression: Compression) -> bytes:
    """``data`` (a batch's records section) compressed as Kafka frames it for the codec."""
    codec = compression.codec
    level = compression.level
    if codec == NONE:
        return data
    if codec == GZIP:
        gzip_level = GZIP_DEFAULT_LEVEL if level is None else level
        return _gzip_compress(data, gzip_level)
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        return _lz4_compress(data, LZ4_DEFAULT_LEVEL if level is None else level)
    return _zstd_compress(data, ZSTD_DEFAULT_LEVEL if level is None else level)


def decompress(codec: int, data: bytes, *, path: Path | str, position: int) -> bytes:
    """The records section of a batch compressed with ``codec``.

    ``path`` and ``position`` (the batch's) name the place in errors: an
    unknown codec id (5-7) raises :class:`UnsupportedFormatError`, a stream
    that does not decompress :class:`CorruptRecordError`.
    """
    if codec == NONE:
        return data
    decoder = _DECOMPRESSORS.get(codec)
    if decoder is None:
        raise UnsupportedFormatError(path, position, f"unknown compression codec id {codec}")
    try:
        return decoder(data)
    except (ValueError, RuntimeError, zlib.error, cramjam.DecompressionError) as exc:
        raise CorruptRecordError(
            path, position, f"{CODEC_NAMES[codec]} records do not decompress: {exc}"
        ) from exc
