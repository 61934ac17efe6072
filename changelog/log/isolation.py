"""Isolation levels of a read: ``read_committed`` and ``read_uncommitted``, as Kafka defines them.

* ``read_uncommitted``: every data batch up to the log end offset, aborted or
  not; control batches (markers) are never returned as records.
* ``read_committed``: only up to the **last stable offset** (LSO: the first
  offset of the earliest open transaction, else the log end offset), and
  without the data of aborted transactions.  Which ranges were aborted comes
  from the segments' aborted transaction indexes (``.txnindex``), collected
  for the range read as a broker does for a fetch; the batches are then
  filtered exactly as Kafka's consumer does (``CompletedFetch``):

  1. before a batch with a producer id, every aborted transaction whose first
     offset is at or below the batch's last offset marks its producer aborted;
  2. an ABORT marker of a producer ends that producer's aborted range;
  3. a transactional data batch of a producer marked aborted is skipped;
  4. control batches are skipped.

Non-transactional batches are always read (below the LSO).  Every internal
reader that builds state (restore, the cleaner's input, the CLI's ``get``,
``scan`` and ``restore``) uses ``read_committed``.

Thread-safety: pure functions over iterators the caller owns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final, Literal

from changelog.errors import InvalidConfigError
from changelog.record.control import ControlRecordType, read_marker
from changelog.record.header import NO_PRODUCER_ID, BatchHeader
from changelog.segment.txn_index import AbortedTxn

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "IsolationLevel",
    "check_isolation",
    "committed_batches",
]

IsolationLevel = Literal["read_committed", "read_uncommitted"]
"""Kafka's ``isolation.level`` values."""
READ_COMMITTED: Final = "read_committed"
READ_UNCOMMITTED: Final = "read_uncommitted"

LocatedBatch = tuple[Path, int, BatchHeader, bytes]


def check_isolation(isolation: object) -> IsolationLevel:
    """``isolation`` if it is one of the two levels, else :class:`InvalidConfigError`."""
    if isolation == READ_COMMITTED:
        return READ_COMMITTED
    if isolation == READ_UNCOMMITTED:
        return READ_UNCOMMITTED
    raise InvalidConfigError(
        "isolation", isolation, "must be 'read_committed' or 'read_uncommitted'"
    )


def committed_batches(
    batches: Iterator[LocatedBatch], aborted: Sequence[AbortedTxn]
) -> Iterator[LocatedBatch]:
    """The data batches of ``batches`` that a ``read_committed`` consumer returns (steps 1-4).

    ``aborted`` holds every aborted transaction overlapping the range read
    (any order); the caller has already bounded ``batches`` by the LSO.
    """
    pending = sorted(aborted, key=lambda txn: txn.first_offset)
    next_index = 0
    aborted_pids: set[int] = set()
    for item in batches:
        header = item[2]
        pid = header.producer_id
        if pid != NO_PRODUCER_ID:
            while (
                next_index < len(pending) and pending[next_index].first_offset <= header.last_offset
            ):
                aborted_pids.add(pending[next_index].producer_id)  # step 1
                next_index += 1
            if header.is_control:
                if pid in aborted_pids:
                    marker = read_marker(header, item[3], path=item[0], position=item[1])
                    if marker is not None and marker.type is ControlRecordType.ABORT:
                        aborted_pids.discard(pid)  # step 2
                continue  # step 4
            if header.is_transactional and pid in aborted_pids:
                continue  # step 3
        elif header.is_control:
            continue  # step 4
        yield item
