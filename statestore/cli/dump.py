"""``statestore dump``: print segment files the way Kafka's ``kafka-dump-log.sh`` does.

Output follows Kafka's ``DumpLogSegments`` line for line, so the two tools'
outputs can be compared with ``diff``::

    Dumping state/balances-changelog-0/00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 ...
    | offset: 0 CreateTime: 1700000000000 keySize: 8 valueSize: 3 sequence: -1 headerKeys: [] key: acct-001 payload: 500

Batch lines always (with the real ``compresscodec``); by default record lines
(``| offset: ...``) with ``key:`` and ``payload:``, as Kafka's
``--deep-iteration --print-data-log`` (``--no-data`` drops key and payload,
``--shallow`` the record lines).  Keys and payloads are decoded with
``--key-format``/``--value-format``: ``str`` is Kafka's ``StringDecoder``
(UTF-8, bad bytes replaced), ``auto`` prints UTF-8 text as text and anything
else as msgpack or hex.  A tombstone has ``valueSize: -1`` and no payload; a
control record has no key or payload but ``endTxnMarker: COMMIT
coordinatorEpoch: 0`` (or ``controlType: ...``), as in Kafka; header keys are
``[a,b]``.  In a directory, ``.deleted``/``.cleaned``/``.swap`` files are
skipped; one named on its own is dumped under a line saying what it is.  ``.index`` files print ``offset: O position: P`` and
``.timeindex`` files ``timestamp: T offset: O`` (absolute offsets), stopping
at the first all-zero entry after the first, as Kafka does with preallocated
index space.  Bytes after the last whole batch are reported as
``Found N invalid bytes at the end of FILE``, unless they are all zeros: those are
reported as zero bytes, the space a log allocates ahead of its active segment's data
(``LogConfig.preallocate``; zeros in any other segment are damage, which ``verify`` and the
loader refuse).

Read-only: files are memory-mapped for reading, no lock is taken, nothing is
repaired; dumping a partition a service is writing shows a prefix of it.
Index entries are decoded here, independently of :mod:`changelog.segment.offset_index`
and :mod:`changelog.segment.time_index`, so that ``verify`` checks them with code
that did not write them.

Thread-safety: plain functions.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, TextIO

import attrs

from changelog.errors import CorruptRecordError, UnsupportedFormatError
from changelog.fs.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, parse_base_offset
from changelog.record.batch import (
    LOG_APPEND_TIME,
    NO_SEQUENCE,
    BatchHeader,
    Record,
    decode_header,
    decode_records,
    validate_batch,
)
from changelog.record.compression import CODEC_NAMES
from changelog.segment.offset_index import OffsetIndex
from changelog.segment.time_index import TimeIndex
from statestore.cli.errors import UsageError
from statestore.cli.output import decode_for_display, jsonable
from statestore.cli.progress import Progress
from statestore.cli.statedir import find_partitions, mapped, zero_tail

__all__ = [
    "DumpOptions",
    "dump_paths",
    "read_index_entries",
    "read_time_index_entries",
    "segment_files",
]

_SUFFIX_ORDER: Final = {LOG_SUFFIX: 0, INDEX_SUFFIX: 1, TIME_INDEX_SUFFIX: 2}


@attrs.frozen(kw_only=True)
class DumpOptions:
    """What ``dump`` prints; the defaults are ``kafka-dump-log --deep-iteration --print-data-log``."""

    print_data: bool = True
    deep_iteration: bool = True
    key_format: str = "str"
    value_format: str = "auto"
    as_json: bool = False


def segment_files(path: Path) -> list[Path]:
    """The segment files to dump for ``path``, in offset order.

    ``path`` is a segment file, a partition directory, or a directory above
    partitions (a state directory): then every partition under it.  In a
    directory, the leftovers of the file protocols (``.deleted``, ``.cleaned``,
    ``.swap``: not part of the log) are skipped; a leftover named on its own
    is dumped, under a line that says what it is.
    """
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if path.is_file():
        parsed = parse_base_offset(path.name)
        if parsed is None or parsed[1] not in _SUFFIX_ORDER:
            raise UsageError(
                f"{path}: not a segment file (expected <20-digit offset>.log, .index or .timeindex)"
            )
        return [path]
    found: list[tuple[int, int, str, Path]] = []
    for child in path.iterdir():
        parsed = parse_base_offset(child.name)
        if parsed is not None and parsed[1] in _SUFFIX_ORDER and child.is_file():
            if parsed[2]:  # .deleted, .cleaned or .swap: not part of the log
                continue
            found.append((parsed[0], _SUFFIX_ORDER[parsed[1]], parsed[2], child))
    if not found and not any(
        (parsed := parse_base_offset(child.name)) is not None and parsed[1] in _SUFFIX_ORDER
        for child in path.iterdir()
    ):
        # A state directory (or any directory above partitions): every partition in it.
        return [file for partition in find_partitions(path) for file in segment_files(partition)]
    return [item[3] for item in sorted(found)]


def read_index_entries(data: bytes, base_offset: int) -> list[tuple[int, int]]:
    """``(absolute offset, position)`` entries of an ``.index`` file, preallocated zeros dropped."""
    entries: list[tuple[int, int]] = []
    for i in range(len(data) // OffsetIndex.ENTRY.size):
        relative, position = OffsetIndex.ENTRY.unpack_from(data, i * OffsetIndex.ENTRY.size)
        if i > 0 and relative == 0 and position == 0:
            break
        entries.append((base_offset + relative, position))
    return entries


def read_time_index_entries(data: bytes, base_offset: int) -> list[tuple[int, int]]:
    """``(timestamp, absolute offset)`` entries of a ``.timeindex`` file, preallocated zeros dropped."""
    entries: list[tuple[int, int]] = []
    for i in range(len(data) // TimeIndex.ENTRY.size):
        timestamp, relative = TimeIndex.ENTRY.unpack_from(data, i * TimeIndex.ENTRY.size)
        if i > 0 and timestamp == 0 and relative == 0:
            break
        entries.append((timestamp, base_offset + relative))
    return entries


# --------------------------------------------------------------------------- log files


@attrs.frozen
class _Batch:
    position: int
    header: BatchHeader
    crc_valid: bool
    records: list[Record] | None
    records_error: str | None


def _walk_log(data: bytes, path: Path, decode: bool) -> tuple[list[_Batch], int, str | None]:
    """Every whole batch of a ``.log`` buffer, the valid bytes, and why the walk stopped early."""
    batches: list[_Batch] = []
    position = 0
    stop_reason: str | None = None
    while position < len(data):
        try:
            header = decode_header(data, position, path=path)
        except (CorruptRecordError, UnsupportedFormatError) as exc:
            stop_reason = str(exc)
            break
        try:
            validate_batch(data, position, header, path=path)
            crc_valid = True
        except CorruptRecordError:
            crc_valid = False
        records: list[Record] | None = None
        records_error: str | None = None
        if decode:
            raw = data[position : position + header.size_in_bytes]
            try:
                records = decode_records(raw, path=path, position=position, validate=False)
            except (CorruptRecordError, UnsupportedFormatError) as exc:
                records_error = str(exc)
        batches.append(_Batch(position, header, crc_valid, records, records_error))
        position += header.size_in_bytes
    return batches, position, stop_reason


def _last_sequence(header: BatchHeader) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (header.base_sequence + header.last_offset_delta) % (2**31)


def _timestamp_type(header: BatchHeader) -> str:
    return "LogAppendTime" if header.timestamp_type == LOG_APPEND_TIME else "CreateTime"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _batch_line(batch: _Batch) -> str:
    h = batch.header
    horizon = (
        "OptionalLong.empty"
        if h.delete_horizon_ms is None
        else f"OptionalLong[{h.delete_horizon_ms}]"
    )
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {_last_sequence(h)} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
        f"deleteHorizonMs: {horizon} position: {batch.position} "
        f"{_timestamp_type(h)}: {h.max_timestamp} size: {h.size_in_bytes} magic: {h.magic} "
        f"compresscodec: {CODEC_NAMES.get(h.compression, h.compression)} crc: {h.crc} "
        f"isvalid: {_bool(batch.crc_valid)}"
    )


def _display(data: bytes, fmt: str) -> str:
    """Kafka's ``StringDecoder`` for ``str`` (UTF-8, bad bytes replaced); ``auto`` prints
    UTF-8 text as text (as Kafka), anything else as msgpack or hex."""
    if fmt == "str":
        return data.decode("utf-8", errors="replace")
    if fmt == "auto":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    try:
        value = decode_for_display(data, fmt)
    except ValueError as exc:
        return f"<cannot decode as {fmt}: {exc}>"
    return value if isinstance(value, str) else json.dumps(jsonable(value))


def _record_line(record: Record, header: BatchHeader, options: DumpOptions) -> str:
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    sequence = (
        NO_SEQUENCE
        if header.base_sequence == NO_SEQUENCE
        else (header.base_sequence + record.offset - header.base_offset) % (2**31)
    )
    header_keys = "[" + ",".join(key for key, _ in record.headers) + "]"  # Scala's mkString
    line = (
        f"| offset: {record.offset} {_timestamp_type(header)}: {record.timestamp_ms} "
        f"keySize: {key_size} valueSize: {value_size} sequence: {sequence} "
        f"headerKeys: {header_keys}"
    )
    if header.is_control:
        line += _control_text(record)
    if options.print_data and not header.is_control:
        if record.key is not None:
            line += f" key: {_display(record.key, options.key_format)}"
        if record.value is not None:
            line += f" payload: {_display(record.value, options.value_format)}"
    return line


_CONTROL_KEY: Final = struct.Struct(">hh")  # ControlRecordType: version, type
_MARKER_VALUE: Final = struct.Struct(">hi")  # EndTransactionMarker: version, coordinator epoch
_END_TXN_TYPES: Final = {0: "ABORT", 1: "COMMIT"}
_CONTROL_TYPES: Final = {
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


def _control_text(record: Record) -> str:
    """What DumpLogSegments appends to a control record's line (its ``ControlRecordType``)."""
    key = record.key or b""
    if len(key) < _CONTROL_KEY.size:
        return " controlType: UNKNOWN(-1)"
    _version, type_id = _CONTROL_KEY.unpack_from(key)
    if type_id in _END_TXN_TYPES:
        value = record.value or b""
        if len(value) < _MARKER_VALUE.size:
            return f" endTxnMarker: {_END_TXN_TYPES[type_id]} coordinatorEpoch: <invalid>"
        _value_version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
        return f" endTxnMarker: {_END_TXN_TYPES[type_id]} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: {_CONTROL_TYPES.get(type_id, 'UNKNOWN')}({type_id})"


def _record_json(record: Record, options: DumpOptions) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "key_size": -1 if record.key is None else len(record.key),
        "value_size": -1 if record.value is None else len(record.value),
        "header_keys": [key for key, _ in record.headers],
        "tombstone": record.value is None,
    }
    if options.print_data:
        doc["key"] = _json_value(record.key, options.key_format)
        doc["value"] = _json_value(record.value, options.value_format)
    return doc


def _json_value(data: bytes | None, fmt: str) -> Any:
    try:
        return decode_for_display(data, fmt)
    except ValueError as exc:
        return {"undecodable": f"0x{(data or b'').hex()}", "error": str(exc)}


def _batch_json(batch: _Batch, options: DumpOptions) -> dict[str, Any]:
    h = batch.header
    doc: dict[str, Any] = {
        "position": batch.position,
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "count": h.records_count,
        "size": h.size_in_bytes,
        "timestamp_type": _timestamp_type(h),
        "max_timestamp": h.max_timestamp,
        "base_timestamp": h.base_timestamp,
        "delete_horizon_ms": h.delete_horizon_ms,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "partition_leader_epoch": h.partition_leader_epoch,
        "is_transactional": h.is_transactional,
        "is_control": h.is_control,
        "magic": h.magic,
        "compression": CODEC_NAMES.get(h.compression, str(h.compression)),
        "crc": h.crc,
        "crc_valid": batch.crc_valid,
    }
    if batch.records is not None:
        doc["records"] = [_record_json(record, options) for record in batch.records]
    if batch.records_error is not None:
        doc["records_error"] = batch.records_error
    return doc


def _dump_log(
    path: Path, data: bytes, base_offset: int, options: DumpOptions, out: TextIO
) -> dict[str, Any]:
    deep = options.deep_iteration or options.print_data or options.as_json
    batches, valid_bytes, stop_reason = _walk_log(data, path, deep)
    invalid = len(data) - valid_bytes
    zeros = 0
    if invalid and zero_tail(data, valid_bytes):
        zeros, invalid = invalid, 0  # preallocated space (or, in a closed segment, damage)
    if options.as_json:
        return {
            "file": str(path),
            "kind": "log",
            "log_starting_offset": base_offset,
            "batches": [_batch_json(batch, options) for batch in batches],
            "valid_bytes": valid_bytes,
            "invalid_bytes": invalid,
            "zero_bytes": zeros,
            "error": None if zeros else stop_reason,
        }
    out.write(f"Log starting offset: {base_offset}\n")
    for batch in batches:
        out.write(_batch_line(batch) + "\n")
        if not deep:
            continue
        if batch.records_error is not None:
            out.write(f"| cannot decode the records of this batch: {batch.records_error}\n")
        for record in batch.records or ():
            out.write(_record_line(record, batch.header, options) + "\n")
    if invalid:
        out.write(f"Found {invalid} invalid bytes at the end of {path.name}\n")
    if zeros:
        out.write(
            f"Found {zeros} zero bytes after the last batch of {path.name}: space allocated "
            "ahead of the data if this is the active (last) segment, damage in any other\n"
        )
    return {}


def _dump_index(
    path: Path, data: bytes, base_offset: int, options: DumpOptions, out: TextIO
) -> dict[str, Any]:
    entries = read_index_entries(data, base_offset)
    if not entries and not options.as_json:
        out.write(f"{path} is empty.\n")  # as DumpLogSegments
        return {}
    if options.as_json:
        return {
            "file": str(path),
            "kind": "index",
            "entries": [{"offset": offset, "position": position} for offset, position in entries],
        }
    for offset, position in entries:
        out.write(f"offset: {offset} position: {position}\n")
    return {}


def _dump_time_index(
    path: Path, data: bytes, base_offset: int, options: DumpOptions, out: TextIO
) -> dict[str, Any]:
    entries = read_time_index_entries(data, base_offset)
    if options.as_json:
        return {
            "file": str(path),
            "kind": "timeindex",
            "entries": [{"timestamp": ts, "offset": offset} for ts, offset in entries],
        }
    for timestamp, offset in entries:
        out.write(f"timestamp: {timestamp} offset: {offset}\n")
    return {}


def dump_paths(paths: list[Path], options: DumpOptions, out: TextIO) -> Iterator[dict[str, Any]]:
    """Dump every segment file under ``paths``; in JSON mode yield one document per file.

    In text mode everything is written to ``out`` and nothing is yielded.
    """
    files = [file for path in paths for file in segment_files(path)]
    total = sum(file.stat().st_size for file in files if file.exists())
    with Progress("dump", total) as progress:
        for file in files:
            parsed = parse_base_offset(file.name)
            assert parsed is not None  # segment_files only returns segment names
            base_offset, suffix, protocol = parsed
            with mapped(file) as data:
                if not options.as_json:
                    out.write(f"Dumping {file}\n")
                    if protocol:
                        out.write(
                            f"(a {protocol} file: a leftover of the cleaner's or retention's "
                            "file protocol, not part of the log)\n"
                        )
                if suffix == LOG_SUFFIX:
                    doc = _dump_log(file, data, base_offset, options, out)
                elif suffix == INDEX_SUFFIX:
                    doc = _dump_index(file, data, base_offset, options, out)
                else:
                    doc = _dump_time_index(file, data, base_offset, options, out)
                progress.advance(len(data))
            if options.as_json:
                yield doc
