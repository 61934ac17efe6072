"""Reading a log without holding its lock: a snapshot of segment readers, then batches and records.

``Log.read_batches`` and ``Log.read`` take ``Log.lock`` only for
:func:`open_snapshot`, which picks the segments from the one holding the start
offset and pins each one's file (:meth:`LogSegment.open_reader`).  The
iteration then runs without the lock over a fixed prefix of each segment,
unaffected by later appends, swaps or deletions; a segment's descriptor is
open only while that segment is read (a pinned file that is renamed or deleted
meanwhile is opened first, so the reader reads what it pinned), and each pin is
released once its segment is read or the iterator is closed.

Thread-safety: :func:`open_snapshot` runs under ``Log.lock``; the iterators
are owned by the thread that iterates them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from changelog.errors import CorruptDataError
from changelog.log.log_segments import LogSegments
from changelog.record.batch import BatchHeader, Record, decode_records
from changelog.segment.segment import SegmentReader

__all__ = ["LocatedBatch", "located_batches", "open_snapshot", "records_in_range"]

LocatedBatch = tuple[Path, int, BatchHeader, bytes]
"""``(file, position, header, batch bytes)``: a batch and where it was read (for error messages)."""


def open_snapshot(segments: LogSegments, start_offset: int) -> tuple[list[SegmentReader], int]:
    """Readers over ``segments`` from the one holding ``start_offset``, and where to start in it.

    Call under ``Log.lock`` with ``start_offset`` already checked against the log's range.
    """
    chosen = segments.items[segments.floor(start_offset) :]
    start_position = chosen[0].translate_offset(start_offset)
    if start_position is None:  # past the first segment's data: start at the next
        chosen = chosen[1:]
        start_position = 0
    readers: list[SegmentReader] = []
    try:
        for segment in chosen:
            readers.append(segment.open_reader())
    except BaseException:
        for reader in readers:
            reader.close()
        raise
    return readers, start_position


def located_batches(
    readers: Sequence[SegmentReader], start_position: int, start_offset: int, max_offset: int | None
) -> Iterator[LocatedBatch]:
    """Every CRC-checked batch holding offsets ``>= start_offset``, stopping before the first
    whose base offset is ``>= max_offset``; closes ``readers`` when done."""
    next_offset = start_offset
    try:
        for index, reader in enumerate(readers):
            upper = readers[index + 1].base_offset if index + 1 < len(readers) else None
            start = start_position if index == 0 else 0
            next_offset = max(next_offset, reader.base_offset)
            for position, header, data in reader.batches(start, upper_bound=upper):
                if max_offset is not None and header.base_offset >= max_offset:
                    return
                next_offset = header.next_offset
                if header.last_offset >= start_offset:
                    yield reader.path, position, header, data
            reader.close()  # its descriptor goes as soon as the segment is read
    except CorruptDataError as exc:
        if exc.offset is None:  # the first offset the damage affects, as verify names it
            exc.offset = next_offset
        raise
    finally:
        for reader in readers:
            reader.close()


def records_in_range(
    batches: Iterator[LocatedBatch], start_offset: int, max_offset: int | None
) -> Iterator[Record]:
    """The records of ``batches`` with offsets in ``[start_offset, max_offset)``; control
    batches are skipped.  Whole batches inside the range are not filtered record by record."""
    for path, position, header, data in batches:
        if header.is_control:
            continue
        records = decode_records(data, path=path, position=position, validate=False)
        if header.base_offset >= start_offset and (
            max_offset is None or header.last_offset < max_offset
        ):
            yield from records
            continue
        for record in records:
            if record.offset >= start_offset and (max_offset is None or record.offset < max_offset):
                yield record
