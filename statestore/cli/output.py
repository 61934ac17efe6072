"""How the CLI prints: aligned text tables, byte sizes, JSON, and value rendering.

Everything here is pure formatting: no files, no stores.  Tables go to
stdout; errors and progress go to stderr (see :mod:`statestore.cli.progress`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Final, TextIO

import msgpack

__all__ = [
    "VALUE_FORMATS",
    "decode_for_display",
    "encode_key",
    "format_bytes",
    "format_table",
    "jsonable",
    "write_json",
]

VALUE_FORMATS: Final = ("auto", "str", "msgpack", "json", "int", "long", "hex")
"""How ``--key-format``/``--value-format`` render stored bytes."""

_UNITS: Final = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(size: int) -> str:
    """``1536`` -> ``"1.5 KiB"``; below 1 KiB the exact byte count."""
    if size < 1024:
        return f"{size} B"
    exponent = min(int(math.log(size, 1024)), len(_UNITS) - 1)
    return f"{size / 1024**exponent:.1f} {_UNITS[exponent]}"


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, right: Sequence[bool] | None = None
) -> str:
    """An aligned plain-text table (two spaces between columns, a dashed rule under the header).

    ``right[i]`` right-aligns column ``i`` (numbers); by default a column is
    right-aligned when every cell in it is an ``int``.
    """
    cells = [[_cell(value) for value in row] for row in rows]
    if right is None:
        right = [
            bool(rows)
            and all(isinstance(row[i], int) and not isinstance(row[i], bool) for row in rows)
            for i in range(len(headers))
        ]
    widths = [len(header) for header in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))

    def line(values: Sequence[str]) -> str:
        parts = [
            value.rjust(widths[i]) if right[i] else value.ljust(widths[i])
            for i, value in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * width for width in widths])]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def write_table(
    out: TextIO,
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    right: Sequence[bool] | None = None,
    end: str = "\n",
) -> None:
    """Write :func:`format_table` of ``headers`` and ``rows`` to ``out``, then ``end``."""
    out.write(format_table(headers, rows, right=right) + end)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def jsonable(value: Any) -> Any:
    """``value`` with bytes turned into text (UTF-8, else ``"0x..."`` hex) so ``json`` can write it."""
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + data.hex()
    if isinstance(value, dict):
        return {str(jsonable(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value


def write_json(out: TextIO, document: object) -> None:
    """Write ``document`` as indented JSON and a newline."""
    json.dump(jsonable(document), out, indent=2, sort_keys=False)
    out.write("\n")


def decode_for_display(data: bytes | None, fmt: str) -> Any:
    """Decode stored bytes for display according to ``fmt`` (one of :data:`VALUE_FORMATS`).

    ``auto`` tries msgpack (the store's default value serde; the whole buffer
    must be exactly one msgpack object), then UTF-8 text, then shows hex.
    ``str`` shows bytes that are not UTF-8 as hex.  ``None`` (a tombstone)
    stays ``None``.  Any other format that does not fit raises ``ValueError``.
    """
    if data is None:
        return None
    if fmt == "hex":
        return "0x" + data.hex()
    if fmt == "str":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + data.hex()
    if fmt == "int":
        if len(data) != 8:
            raise ValueError(f"an int (IntSerde) is 8 bytes, found {len(data)}")
        return int.from_bytes(data, "big") - (1 << 63)
    if fmt == "long":
        if len(data) != 8:
            raise ValueError(
                f"a long (LongSerde, Kafka's Serdes.Long) is 8 bytes, found {len(data)}"
            )
        return int.from_bytes(data, "big", signed=True)
    if fmt == "json":
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from None
    if fmt == "msgpack":
        return _unpack(data)
    if fmt == "auto":
        try:
            return _unpack(data)
        except ValueError:
            pass
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + data.hex()
    raise ValueError(f"unknown format {fmt!r}")


def encode_key(text: str, fmt: str) -> bytes:
    """The stored bytes of a key typed on the command line, read with ``fmt``."""
    if fmt in ("str", "auto"):
        return text.encode("utf-8")
    if fmt == "hex":
        digits = text.removeprefix("0x")
        try:
            return bytes.fromhex(digits)
        except ValueError:
            raise ValueError(f"not hex: {text!r}") from None
    if fmt == "int":
        try:
            number = int(text)
        except ValueError:
            raise ValueError(f"not an integer: {text!r}") from None
        if not -(1 << 63) <= number < (1 << 63):
            raise ValueError(f"{number} does not fit in 64 bits")
        return (number + (1 << 63)).to_bytes(8, "big")
    if fmt == "msgpack":
        return bytes(msgpack.packb(text))
    if fmt == "json":
        return text.encode("utf-8")
    raise ValueError(f"unknown format {fmt!r}")


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - msgpack raises many undocumented types on garbage
        raise ValueError(f"not msgpack: {exc}") from None
