"""Parse what Kafka's ``DumpLogSegments`` prints (Kafka 3.9's ``kafka.tools.DumpLogSegments``).

For a ``.log`` file with ``--deep-iteration --print-data-log`` it prints, per file::

    Dumping /path/00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 ... deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 93 magic: 2 compresscodec: none crc: 2345 isvalid: true
    | offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [] key: k0 payload: v0
    | offset: 1 CreateTime: 1700000000000 keySize: 2 valueSize: -1 sequence: -1 headerKeys: [] key: k1

(a null value, a tombstone, has ``valueSize: -1`` and no ``payload``), and
``Found N invalid bytes at the end of <file>`` when the tail does not parse as
batches.  Keys and values are printed with the default ``StringDecoder``
(UTF-8), so the data this parser reads back must be spaceless text.

Index files with ``--verify-index-only`` print only ``Dumping <file>`` and report
problems on stderr (``Mismatches in :<file>``, ``Found timestamp mismatch``,
``Found out of order timestamp``, ``The following indexed offsets are not
found in the log``); :func:`index_problems` parses those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "DumpFormatError",
    "DumpedBatch",
    "DumpedFile",
    "DumpedRecord",
    "IndexProblem",
    "index_problems",
    "parse_log_dump",
    "parse_txn_index_dump",
]

_BATCH_FIELDS: Final = re.compile(r"(\w+): (\S+)")
_RECORD: Final = re.compile(
    r"^\| offset: (?P<offset>\d+) (?P<ts_type>\w+): (?P<ts>-?\d+)"
    r" keySize: (?P<key_size>-?\d+) valueSize: (?P<value_size>-?\d+)"
    r" sequence: (?P<sequence>-?\d+) headerKeys: \[(?P<headers>[^\]]*)\]"
    r"(?: endTxnMarker: (?P<marker>\w+) coordinatorEpoch: (?P<epoch>-?\d+))?"
    r"(?: key: (?P<key>\S*))?(?: payload: (?P<value>\S*))?$"
)
_HORIZON: Final = re.compile(r"^OptionalLong(?:\[(-?\d+)\]|\.empty)$")


class DumpFormatError(ValueError):
    """A ``DumpLogSegments`` line is not in the shape this parser knows (another Kafka version?)."""


@dataclass(frozen=True)
class DumpedRecord:
    """One record line: ``key``/``value`` are ``None`` when their size is -1."""

    offset: int
    timestamp_type: str
    timestamp_ms: int
    key: str | None
    value: str | None
    header_keys: tuple[str, ...]
    marker: str | None = None
    """``COMMIT`` or ``ABORT`` for the record of a transaction marker (a control batch)."""
    coordinator_epoch: int | None = None


@dataclass(frozen=True)
class DumpedBatch:
    """One batch line with the records printed under it."""

    base_offset: int
    last_offset: int
    count: int
    position: int
    size: int
    magic: int
    compression: str
    crc: int
    is_valid: bool
    is_control: bool
    is_transactional: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    partition_leader_epoch: int
    timestamp_type: str
    max_timestamp_ms: int
    delete_horizon_ms: int | None
    records: list[DumpedRecord] = field(default_factory=list)


@dataclass
class DumpedFile:
    """One dumped ``.log`` file."""

    path: Path
    log_start_offset: int
    batches: list[DumpedBatch] = field(default_factory=list)
    invalid_trailing_bytes: int = 0

    @property
    def records(self) -> list[DumpedRecord]:
        """Every record of every batch, in file order."""
        return [record for batch in self.batches for record in batch.records]


def _batch(line: str) -> DumpedBatch:
    fields = dict(_BATCH_FIELDS.findall(line))
    try:
        horizon = _HORIZON.match(fields["deleteHorizonMs"])
        if horizon is None:
            raise DumpFormatError(f"deleteHorizonMs not understood in: {line}")
        ts_type = next(
            t for t in ("CreateTime", "LogAppendTime", "NO_TIMESTAMP_TYPE") if t in fields
        )
        return DumpedBatch(
            base_offset=int(fields["baseOffset"]),
            last_offset=int(fields["lastOffset"]),
            count=int(fields["count"]),
            position=int(fields["position"]),
            size=int(fields["size"]),
            magic=int(fields["magic"]),
            compression=fields["compresscodec"],
            crc=int(fields["crc"]),
            is_valid=fields["isvalid"] == "true",
            is_control=fields["isControl"] == "true",
            is_transactional=fields["isTransactional"] == "true",
            producer_id=int(fields["producerId"]),
            producer_epoch=int(fields["producerEpoch"]),
            base_sequence=int(fields["baseSequence"]),
            partition_leader_epoch=int(fields["partitionLeaderEpoch"]),
            timestamp_type=ts_type,
            max_timestamp_ms=int(fields[ts_type]),
            delete_horizon_ms=int(horizon.group(1)) if horizon.group(1) is not None else None,
        )
    except (KeyError, StopIteration) as exc:
        raise DumpFormatError(f"batch line not understood: {line}") from exc


def _record(line: str) -> DumpedRecord:
    match = _RECORD.match(line)
    if match is None:
        raise DumpFormatError(f"record line not understood: {line}")
    key_size = int(match["key_size"])
    value_size = int(match["value_size"])
    key = None if key_size < 0 else (match["key"] or "")
    value = None if value_size < 0 else (match["value"] or "")
    if match["marker"] is not None:  # a control record: its key and value are not printed
        key = value = None
    if key is not None and len(key.encode()) != key_size:
        raise DumpFormatError(f"key of {key_size} bytes printed as {key!r}: {line}")
    if value is not None and len(value.encode()) != value_size:
        raise DumpFormatError(f"value of {value_size} bytes printed as {value!r}: {line}")
    headers = tuple(h for h in match["headers"].split(",") if h)
    return DumpedRecord(
        offset=int(match["offset"]),
        timestamp_type=match["ts_type"],
        timestamp_ms=int(match["ts"]),
        key=key,
        value=value,
        header_keys=headers,
        marker=match["marker"],
        coordinator_epoch=None if match["epoch"] is None else int(match["epoch"]),
    )


def parse_log_dump(stdout: str) -> dict[Path, DumpedFile]:
    """Parse ``DumpLogSegments --deep-iteration --print-data-log`` output of ``.log`` files."""
    files: dict[Path, DumpedFile] = {}
    current: DumpedFile | None = None
    pending: Path | None = None
    for line in stdout.splitlines():
        if line.startswith("Dumping "):
            pending = Path(line.removeprefix("Dumping "))
            current = None
        elif line.startswith("Log starting offset: "):
            if pending is None:
                raise DumpFormatError(f"no 'Dumping' line before: {line}")
            current = DumpedFile(pending, int(line.removeprefix("Log starting offset: ")))
            files[pending] = current
        elif line.startswith("baseOffset: "):
            if current is None:
                raise DumpFormatError(f"batch outside a log file: {line}")
            current.batches.append(_batch(line))
        elif line.startswith("| offset: "):
            if current is None or not current.batches:
                raise DumpFormatError(f"record outside a batch: {line}")
            current.batches[-1].records.append(_record(line))
        elif line.startswith("Found ") and "invalid bytes at the end of" in line:
            if current is None:
                raise DumpFormatError(f"trailer outside a log file: {line}")
            current.invalid_trailing_bytes = int(line.split()[1])
        elif line.strip():
            raise DumpFormatError(f"line not understood: {line}")
    return files


_TXN_ENTRY: Final = re.compile(
    r"^version: (?P<version>\d+) producerId: (?P<pid>-?\d+) firstOffset: (?P<first>-?\d+)"
    r" lastOffset: (?P<last>-?\d+) lastStableOffset: (?P<lso>-?\d+)$"
)


def parse_txn_index_dump(stdout: str) -> dict[Path, list[tuple[int, int, int, int, int]]]:
    """Parse ``DumpLogSegments`` output of ``.txnindex`` files: per file, its entries as
    ``(version, producer id, first offset, last offset, last stable offset)``."""
    found: dict[Path, list[tuple[int, int, int, int, int]]] = {}
    current: list[tuple[int, int, int, int, int]] | None = None
    for line in stdout.splitlines():
        if line.startswith("Dumping "):
            current = found.setdefault(Path(line.removeprefix("Dumping ")), [])
            continue
        match = _TXN_ENTRY.match(line)
        if match is None or current is None:
            if line.strip():
                raise DumpFormatError(f"transaction index line not understood: {line}")
            continue
        current.append(
            (
                int(match["version"]),
                int(match["pid"]),
                int(match["first"]),
                int(match["last"]),
                int(match["lso"]),
            )
        )
    return found


@dataclass(frozen=True)
class IndexProblem:
    """One complaint of ``--verify-index-only``: ``kind`` is the heading, ``a``/``b`` its two numbers.

    ``kind`` is ``"offset mismatch"`` (index offset, log offset), ``"timestamp
    mismatch"`` (index timestamp, max record timestamp of the batch),
    ``"out of order timestamp"`` (index timestamp, previous one) or ``"offset not
    found"`` (indexed offset, last offset of the batch found there).  ``path``
    is ``None`` for the last kind: Kafka does not name the file.
    """

    kind: str
    path: Path | None
    a: int
    b: int


_HEADINGS: Final = (
    ("Mismatches in :", "offset mismatch"),
    ("Found timestamp mismatch in :", "timestamp mismatch"),
    ("Found out of order timestamp in :", "out of order timestamp"),
    ("The following indexed offsets are not found in the log.", "offset not found"),
)
_NUMBERS: Final = re.compile(r"-?\d+")


def index_problems(stderr: str) -> list[IndexProblem]:
    """The complaints ``DumpLogSegments --verify-index-only`` printed on stderr, parsed."""
    problems: list[IndexProblem] = []
    kind: str | None = None
    path: Path | None = None
    for raw in stderr.splitlines():
        line = raw.strip()
        heading = next(((h, k) for h, k in _HEADINGS if line.startswith(h)), None)
        if heading is not None:
            kind = heading[1]
            rest = line.removeprefix(heading[0])
            path = Path(rest) if rest else None
            continue
        if kind is not None and line.startswith(
            ("Index offset:", "Index timestamp:", "Indexed offset:")
        ):
            a, b = (int(n) for n in _NUMBERS.findall(line)[:2])
            problems.append(IndexProblem(kind, path, a, b))
        else:
            kind = None
    return problems
