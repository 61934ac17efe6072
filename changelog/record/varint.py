"""Zig-zag variable-length integers, as Kafka's ``ByteUtils`` writes them (private).

A record inside a v2 batch is framed with Protocol Buffers style varints:
the signed value is zig-zag mapped (``0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3 ...``),
then written 7 bits at a time, least significant group first, with the high
bit of each byte set when more bytes follow.  Kafka distinguishes a *varint*
(int32, at most 5 bytes) from a *varlong* (int64, at most 10 bytes); the
encoding is the same, only the range differs, so one pair of functions serves
both and the caller checks the range it needs.

Only the pure-Python reference codec uses this module; the fast path is
aiokafka's compiled codec.
"""

from __future__ import annotations

from typing import Final

from changelog.limits import INT64_MAX, INT64_MIN
from changelog.record.header import Buffer

__all__ = ["MAX_VARLONG_BYTES", "read_varint", "size_of_varint", "write_varint"]

MAX_VARLONG_BYTES: Final = 10
"""A zig-zag int64 needs at most ten 7-bit groups."""

_CONTINUE: Final = 0x80
_PAYLOAD: Final = 0x7F
_BITS_PER_BYTE: Final = 7


def _zigzag(value: int) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise OverflowError(f"{value} does not fit in a signed 64-bit varlong")
    return (value << 1) ^ (value >> 63)


def write_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag varint encoding of ``value`` (an int64) to ``out``."""
    encoded = _zigzag(value)
    while encoded > _PAYLOAD:
        out.append((encoded & _PAYLOAD) | _CONTINUE)
        encoded >>= _BITS_PER_BYTE
    out.append(encoded)


def size_of_varint(value: int) -> int:
    """Number of bytes :func:`write_varint` would write for ``value``."""
    encoded = _zigzag(value)
    size = 1
    while encoded > _PAYLOAD:
        encoded >>= _BITS_PER_BYTE
        size += 1
    return size


def read_varint(buf: Buffer, position: int) -> tuple[int, int]:
    """Decode one zig-zag varint at ``position``; returns ``(value, next_position)``.

    Raises :class:`ValueError` if the varint runs past the end of ``buf`` or is
    longer than ten bytes (callers turn that into a ``CorruptRecordError``
    naming the file and position).
    """
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(MAX_VARLONG_BYTES):
        if position >= end:
            raise ValueError(f"varint runs past the end of the buffer at {position}")
        byte = buf[position]
        position += 1
        result |= (byte & _PAYLOAD) << shift
        if not byte & _CONTINUE:
            return (result >> 1) ^ -(result & 1), position
        shift += _BITS_PER_BYTE
    raise ValueError(f"varint longer than {MAX_VARLONG_BYTES} bytes before {position}")
