"""Reading a partition directory the way a remedy must: every batch CRC-checked, on past damage.

The loader stops at the first bad batch (and refuses the open); a remedy must
say what lies *beyond* it, so :func:`walk` reports a damaged range and resumes
at the next position where a whole, CRC-valid batch starts.  :class:`Committer`
then decides, in log order, what a ``read_committed`` reader makes of each data
batch (Kafka's rule, :mod:`changelog.log.isolation`): a batch without a producer id
counts at once; a transactional one waits for its producer's COMMIT (counts) or
ABORT (never counted) marker.

Nothing here writes a byte.

Thread-safety: plain functions and per-call objects; the caller keeps writers
out of the directory (a remedy holds its lock) or accepts that a racing writer
makes the figures stale.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

import attrs

from changelog.errors import CorruptRecordError, LogStorageError, UnsupportedFormatError
from changelog.fs import files
from changelog.record.batch import (
    BatchHeader,
    decode_header,
    decode_key_values,
)
from changelog.record.control import ControlRecordType, read_marker
from changelog.record.header import NO_PRODUCER_ID
from changelog.segment.mapped import MappedFile, batch_candidates

__all__ = [
    "Batch",
    "Committer",
    "Damage",
    "SegmentFile",
    "keys_of",
    "protocol_leftovers",
    "segment_files",
    "walk",
]


@attrs.frozen
class SegmentFile:
    """One ordinary ``<base>.log`` file of the directory."""

    base_offset: int
    path: Path
    size_bytes: int


def segment_files(directory: Path) -> list[SegmentFile]:
    """The directory's ordinary ``.log`` files, oldest first (protocol leftovers excluded)."""
    found = []
    try:
        children = list(directory.iterdir())
    except OSError as exc:
        raise LogStorageError(directory, "list", exc) from exc
    for path in children:
        parsed = files.parse_base_offset(path.name)
        if parsed is None or parsed[1] != files.LOG_SUFFIX or parsed[2]:
            continue
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise LogStorageError(path, "stat", exc) from exc
        found.append(SegmentFile(parsed[0], path, size))
    return sorted(found, key=lambda segment: segment.base_offset)


def protocol_leftovers(directory: Path) -> list[Path]:
    """``.swap`` and ``.cleaned`` files: an interrupted cleaner swap the loader must finish."""
    out = []
    for path in sorted(directory.iterdir()):
        parsed = files.parse_base_offset(path.name)
        if parsed is not None and parsed[2] in (files.SWAP_SUFFIX, files.CLEANED_SUFFIX):
            out.append(path)
    return out


@attrs.frozen
class Batch:
    """A whole, CRC-valid batch at ``position`` of ``path``."""

    path: Path
    position: int
    header: BatchHeader
    data: bytes


@attrs.frozen
class Damage:
    """Bytes ``[position, position + size_bytes)`` of ``path`` that hold no valid batch."""

    path: Path
    position: int
    size_bytes: int
    reason: str


def _next_valid(data: bytes | mmap.mmap, start: int, path: Path) -> int:
    """The first position after ``start`` where a whole, CRC-valid batch starts, else the end."""
    for candidate in batch_candidates(data, start):
        try:
            decode_header(data, candidate, path=path, validate=True)
        except (CorruptRecordError, UnsupportedFormatError):
            continue
        return candidate
    return len(data)


def walk(path: Path, start_position: int = 0) -> Iterator[Batch | Damage]:
    """Every valid batch of ``path`` from ``start_position``, and the damaged ranges between.

    A batch is valid when its framing and CRC-32C hold; offsets are reported as
    found (a remedy prints them, it does not judge their order).
    """
    with MappedFile(path) as data:
        position = start_position
        while position < len(data):
            try:
                header = decode_header(data, position, path=path, validate=True)
            except (CorruptRecordError, UnsupportedFormatError) as exc:
                resume = _next_valid(data, position, path)
                reason = getattr(exc, "reason", None) or str(exc)
                yield Damage(path, position, resume - position, reason)
                position = resume
                continue
            size = header.size_in_bytes
            yield Batch(path, position, header, bytes(data[position : position + size]))
            position += size


def keys_of(batch: Batch) -> list[tuple[bytes | None, bool]]:
    """``(key, is_tombstone)`` of each record of a data batch (values are not kept)."""
    return [
        (key, value is None)
        for _offset, key, value in decode_key_values(
            batch.data, path=batch.path, position=batch.position, validate=False
        )
    ]


class Committer:
    """What ``read_committed`` makes of each data batch, fed in log order (module docstring).

    :meth:`feed` returns the data batches decided by this batch, each with
    ``True`` (counts: non-transactional, or committed) or ``False`` (aborted).
    :attr:`pending` holds, per producer id, the transactional batches still
    waiting for a marker.

    Invariants: a producer id is in :attr:`pending` only with a non-empty list.

    Thread-safety: not thread-safe (one per walk).
    """

    def __init__(self) -> None:
        """Nothing fed yet."""
        self.pending: dict[int, list[Batch]] = {}

    def feed(self, batch: Batch) -> list[tuple[Batch, bool]]:
        """Decide what ``batch`` decides (see the class docstring)."""
        header = batch.header
        pid = header.producer_id
        if header.is_control:
            if pid == NO_PRODUCER_ID:
                return []
            marker = read_marker(header, batch.data, path=batch.path, position=batch.position)
            if marker is None:
                return []
            waiting = self.pending.pop(pid, [])
            committed = marker.type is ControlRecordType.COMMIT
            return [(item, committed) for item in waiting]
        if pid != NO_PRODUCER_ID and header.is_transactional:
            self.pending.setdefault(pid, []).append(batch)
            return []
        return [(batch, True)]
