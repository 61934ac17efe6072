"""Reading record batches v2 out of a buffer: framing, the CRC, and the order of the checks.

Private helper of :mod:`changelog.record.batch`, which re-exports the public
names; the header layout it reads is in :mod:`changelog.record.header`.

Every reader checks a batch in the same order: (1) the bytes up to the magic
are there, the magic is 2 (0 and 1 go to the legacy check: unsupported if the
legacy CRC holds, garbage otherwise) and the batch length fits between the
61-byte header and ``end`` (none of this is under the CRC); (2) the CRC-32C,
when the whole batch is at hand; (3) the fields under the CRC (negative
offsets or counts, more records than bytes in an uncompressed batch); (4) the
compression bits (ids 5-7 name no codec).  So a flipped bit under the CRC is
always a :class:`CorruptRecordError` naming the file and position, never an
:class:`UnsupportedFormatError` ("unknown codec"), and nothing under the CRC
is believed before it is checked.  Decompressing the records is not a step
here: :mod:`changelog.record.batch` does it when the records are decoded.

After a crash nothing here is trusted without the CRC: ``.log`` files are
re-read batch by batch through :func:`iter_batches` (or a segment reader using
:func:`decode_header` with ``validate``), and the indexes rebuilt from them.

Thread-safety: every function is pure and thread-safe.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import crc32c

from changelog.errors import CorruptRecordError, UnsupportedFormatError
from changelog.record.header import (
    BATCH_HEADER_SIZE,
    HEADER,
    HEADER_FIELDS,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    Buffer,
    field_offset,
    field_struct,
)

__all__ = [
    "batch_extents",
    "checked_batch",
    "declared_size",
    "decode_header",
    "iter_batches",
    "validate_batch",
]

_MAGIC_OFFSET: Final = field_offset("magic")
_CRC_OFFSET: Final = field_offset("crc")
_ATTRIBUTES_OFFSET: Final = field_offset("attributes")
_HEADER_SIZE_UP_TO_MAGIC: Final = _MAGIC_OFFSET + 1
_PREFIX: Final = struct.Struct(">" + "".join(code for _, code in HEADER_FIELDS[:4]))
_CRC: Final = field_struct("crc")
_BATCH_LENGTH_FROM_START: Final = struct.Struct(f">{field_offset('batch_length')}xi")
_FIELD_INDEX: Final = {name: index for index, (name, _) in enumerate(HEADER_FIELDS)}
_BASE_OFFSET_INDEX: Final = _FIELD_INDEX["base_offset"]
_LAST_OFFSET_DELTA_INDEX: Final = _FIELD_INDEX["last_offset_delta"]
_MAX_TIMESTAMP_INDEX: Final = _FIELD_INDEX["max_timestamp"]
_MIN_BATCH_LENGTH: Final = BATCH_HEADER_SIZE - LOG_OVERHEAD
_MIN_RECORD_SIZE: Final = 7  # length, attributes, ts delta, offset delta, key, value, headers
_LEGACY_MAGICS: Final = (0, 1)
_LAST_CODEC: Final = 4  # zstd
# A legacy (v0/v1) message after offset and size: crc uint32 (zlib CRC-32 of
# magic..end), magic int8, attributes int8, [timestamp int64 in v1], key, value.
_LEGACY_CRC: Final = struct.Struct(">I")
_LEGACY_MIN_MESSAGE_SIZE: Final = 4 + 1 + 1 + 4 + 4  # crc, magic, attributes, key and value lengths


def _frame(buf: Buffer, position: int, end: int, path: Path | str, where: int) -> int:
    """Size of the batch at ``buf[position]``: step (1), the checks the CRC cannot make.

    ``end`` bounds the batch (it may lie past ``len(buf)`` when only the
    header is at hand); errors name ``where``.
    """
    available = end - position
    if available < _HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError(
            path, where, f"torn batch header: {available} bytes where at least 17 are needed"
        )
    _base_offset, batch_length, _epoch, magic = _PREFIX.unpack_from(buf, position)
    if magic in _LEGACY_MAGICS:
        _reject_legacy(
            buf, position=position, end=end, size=batch_length, magic=magic, path=path, where=where
        )
    if magic != MAGIC:
        raise CorruptRecordError(path, where, "unknown magic byte", expected=MAGIC, actual=magic)
    if batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            path,
            where,
            f"batch_length {batch_length} is smaller than the {_MIN_BATCH_LENGTH}-byte header",
        )
    size: int = batch_length + LOG_OVERHEAD
    if size > available:
        raise CorruptRecordError(
            path,
            where,
            f"torn batch: its header says {size} bytes but only {available} remain",
        )
    return size


def _fields(buf: Buffer, position: int, path: Path | str, where: int) -> BatchHeader:
    """The header at ``buf[position]`` (framed already), step (3): fields under the CRC."""
    header = BatchHeader(*HEADER.unpack_from(buf, position))
    if header.base_offset < 0 or header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError(
            path,
            where,
            f"negative base_offset {header.base_offset}, last_offset_delta "
            f"{header.last_offset_delta} or records_count {header.records_count}",
        )
    if (
        not header.compression
        and header.records_count * _MIN_RECORD_SIZE > header.batch_length - _MIN_BATCH_LENGTH
    ):
        raise CorruptRecordError(
            path,
            where,
            f"records_count {header.records_count} cannot fit in "
            f"{header.batch_length - _MIN_BATCH_LENGTH} bytes of records",
        )
    return header


def _reject_legacy(
    buf: Buffer,
    *,
    position: int,
    end: int,
    size: int,
    magic: int,
    path: Path | str,
    where: int,
) -> None:
    """A v0/v1 message is unsupported if its own CRC holds; otherwise it is garbage.

    Zeros or a torn tail also have a 0 in the magic byte; the legacy CRC tells
    a real old-format message from those, so a torn tail stays a
    :class:`CorruptRecordError` that the loader may truncate.
    """
    stop = position + LOG_OVERHEAD + size
    if size >= _LEGACY_MIN_MESSAGE_SIZE and stop <= min(end, len(buf)):
        (stored,) = _LEGACY_CRC.unpack_from(buf, position + LOG_OVERHEAD)
        if zlib.crc32(memoryview(buf)[position + _MAGIC_OFFSET : stop]) == stored:
            raise UnsupportedFormatError(
                path,
                where,
                f"message format v{magic} (magic {magic}); only record batch v2 is read",
            )
    raise CorruptRecordError(
        path, where, f"magic byte {magic} but not a valid message (garbage or a torn write)"
    )


def _check_compression(header: BatchHeader, path: Path | str, where: int) -> None:
    """Step (4): a codec id Kafka knows (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    if header.compression > _LAST_CODEC:
        raise UnsupportedFormatError(
            path, where, f"unknown compression codec id {header.compression} (Kafka knows 0-4)"
        )


def _check_crc(
    buf: Buffer, position: int, size: int, *, stored: int, path: Path | str, where: int
) -> None:
    """Step (2): the CRC-32C of bytes 21..``size`` of the batch at ``buf[position]``."""
    if position + size > len(buf):
        raise CorruptRecordError(path, where, "torn batch: buffer ends inside it")
    actual = crc32c.crc32c(memoryview(buf)[position + _ATTRIBUTES_OFFSET : position + size])
    if actual != stored:
        raise CorruptRecordError(
            path,
            where,
            "record batch fails its CRC-32C check",
            expected=stored,
            actual=actual,
        )


def _read(
    buf: Buffer, position: int, end: int, *, path: Path | str, where: int, validate: bool
) -> BatchHeader:
    """Steps (1)-(4) for the batch at ``buf[position]``; ``validate=False`` skips the CRC."""
    size = _frame(buf, position, end, path, where)
    if validate:
        (stored,) = _CRC.unpack_from(buf, position + _CRC_OFFSET)
        _check_crc(buf, position, size, stored=stored, path=path, where=where)
    header = _fields(buf, position, path, where)
    _check_compression(header, path, where)
    return header


def decode_header(
    buf: Buffer,
    position: int,
    *,
    path: Path | str,
    end: int | None = None,
    validate: bool = False,
    file_position: int | None = None,
) -> BatchHeader:
    """Decode and bounds-check the batch header at ``buf[position]``.

    The whole batch must lie before ``end`` (default ``len(buf)``; a caller
    holding only the header bytes passes where the file ends).  With
    ``validate`` the whole batch must be in ``buf`` and its CRC is checked
    right after its length, before any field under the CRC is believed.
    Errors name ``path`` and ``file_position`` (default ``position``: pass
    where ``buf[position]`` lies in the file when ``buf`` is a chunk of it).
    A short, torn or garbage batch, or a CRC mismatch, raises
    :class:`CorruptRecordError`; magic 0/1 with a valid legacy CRC, or a
    codec id above 4, raises :class:`UnsupportedFormatError`.  Without
    ``validate`` a flipped attribute bit may look like an unknown codec: check
    the CRC (:func:`validate_batch`) before believing that.
    """
    where = position if file_position is None else file_position
    return _read(
        buf, position, len(buf) if end is None else end, path=path, where=where, validate=validate
    )


def declared_size(buf: Buffer, position: int = 0) -> int:
    """The size the batch at ``buf[position]`` declares (``batch_length + 12``), unchecked.

    Needs the 12 bytes of base offset and batch length; for framing a buffer
    whose batches are then checked by :func:`decode_header`.
    """
    size: int = _BATCH_LENGTH_FROM_START.unpack_from(buf, position)[0] + LOG_OVERHEAD
    return size


def batch_extents(buf: Buffer, *, path: Path | str) -> list[tuple[int, int, int]]:
    """``(size, last_offset, max_timestamp)`` of each batch in ``buf``, in order.

    ``buf`` must be whole v2 batches back to back (what an encoder produced):
    step (1) only, no CRC.  Anything else raises :class:`CorruptRecordError`
    naming ``path`` and the position in ``buf``.
    """
    extents: list[tuple[int, int, int]] = []
    end = len(buf)
    position = 0
    while position < end:
        size = _frame(buf, position, end, path, position)
        fields = HEADER.unpack_from(buf, position)
        extents.append(
            (
                size,
                fields[_BASE_OFFSET_INDEX] + fields[_LAST_OFFSET_DELTA_INDEX],
                fields[_MAX_TIMESTAMP_INDEX],
            )
        )
        position += size
    return extents


def validate_batch(buf: Buffer, position: int, header: BatchHeader, *, path: Path | str) -> None:
    """Check the CRC-32C of the batch at ``buf[position]`` (bytes 21..end of the batch).

    On mismatch raises :class:`CorruptRecordError` with the stored CRC as
    ``expected`` and the computed one as ``actual``.
    """
    _check_crc(buf, position, header.size_in_bytes, stored=header.crc, path=path, where=position)


def iter_batches(
    buf: Buffer,
    *,
    path: Path | str,
    start_position: int = 0,
    validate: bool = True,
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch from ``start_position`` to exactly ``len(buf)``.

    ``buf`` is typically a whole ``.log`` file (an ``mmap`` works).  With
    ``validate`` each batch's CRC is checked right after its length bounds,
    before its fields and compression bits are believed.  Anything that is
    not a whole valid batch, including a partial batch at the end, raises
    :class:`CorruptRecordError` naming its position; callers decide whether
    that is a torn tail to truncate (everything before it was yielded).
    """
    end = len(buf)
    if not 0 <= start_position <= end:
        raise ValueError(f"start_position {start_position} is outside [0, {end}]")
    position = start_position
    while position < end:
        header = _read(buf, position, end, path=path, where=position, validate=validate)
        yield position, header
        position += header.size_in_bytes


def checked_batch(batch: Buffer, path: Path | str, position: int, validate: bool) -> BatchHeader:
    """Header of ``batch``, which must be exactly one whole batch found at ``position`` in ``path``.

    Checks the framing, then (with ``validate``) the CRC, then the fields and
    the codec id; errors name ``path`` and ``position``.
    """
    end = len(batch)
    size = _frame(batch, 0, end, path, position)
    if size != end:
        raise CorruptRecordError(
            path,
            position,
            "buffer is not exactly one batch",
            expected=size,
            actual=end,
        )
    return _read(batch, 0, end, path=path, where=position, validate=validate)
