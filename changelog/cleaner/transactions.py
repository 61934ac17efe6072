"""What one cleaning pass knows about transactions: Kafka's ``CleanedTransactionMetadata``.

The pass reads the log in offset order; this object follows the transactions
it crosses and decides, batch by batch, Kafka's rules:

1. a transactional data batch of an **aborted** transaction (its producer is
   inside an aborted range from the log's ``.txnindex`` files) is discarded, and
   its records never enter the offset map, so an aborted record never shadows
   a committed value;
2. an **ABORT** marker may go once no batch of its transaction was seen in
   this pass (all its data already removed); a **COMMIT** marker likewise once
   no batch of its transaction was seen;
3. a marker that may go is first stamped with a delete horizon (``now +
   delete.retention.ms``, KIP-534, as a tombstone) and removed by a later
   pass once the horizon has passed; an emptied control batch (no record) may
   always go;
4. (beyond Kafka, where a quiet log keeps such markers for ever) a marker that
   stays only because this pass read its transaction's last data and removed
   all of it is *freed*: the next pass may stamp it, so the pass reports it as
   a pending delete horizon of ``now`` and the log is due again at once, as a
   log with expired tombstones is (:mod:`changelog.cleaner.horizon`).

Aborted ranges come in as :class:`~changelog.segment.txn_index.AbortedTxn`
(``(producer id, first offset, last offset, last stable offset)``) and are
consumed in first-offset order as the pass moves past them.

Invariants: ``_pending`` is sorted by first offset and holds the aborted
ranges not reached yet; ``_aborted`` maps a producer id to the range it is in
(reached, its ABORT marker not yet read); ``_committed`` holds the producers
whose open, not aborted, transaction had a batch in this pass.

Thread-safety: owned by one pass; :meth:`copy` gives an independent state (a
group is first scanned, then rewritten, from the same starting state).
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from changelog.log.producer_state import ProducerState, replay_segment
from changelog.record.batch import decode_records, encode_records
from changelog.record.control import ControlRecordType, EndTransactionMarker, read_marker
from changelog.record.header import BatchHeader
from changelog.segment.segment import LogSegment
from changelog.segment.txn_index import AbortedTxn

__all__ = [
    "CleanedTransactionMetadata",
    "MarkerOutcome",
    "batch_marker",
    "control_batch_outcome",
    "rewrite_control_batch",
    "write_cleaned_txn_indexes",
]


class CleanedTransactionMetadata:
    """The transactions a pass is inside (see the module docstring)."""

    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        """Start with the aborted ranges of the part of the log the pass reads."""
        self._pending: list[AbortedTxn] = sorted(aborted, key=lambda txn: txn.first_offset)
        self._next = 0
        self._aborted: dict[int, tuple[AbortedTxn, bool]] = {}
        self._committed: set[int] = set()
        self._retained: set[int] = set()
        self.freed = False
        """Whether the last marker read stays only because this pass read (and removed)
        its transaction's last data: the next pass may stamp it (rule 4)."""

    def copy(self) -> CleanedTransactionMetadata:
        """An independent copy of the current state."""
        return copy.deepcopy(self)

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            txn = pending[self._next]
            self._aborted.setdefault(txn.producer_id, (txn, False))
            self._next += 1

    def on_data_batch(self, header: BatchHeader) -> bool:
        """Rule 1: whether this data batch belongs to an aborted transaction (discard it)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        pid = header.producer_id
        found = self._aborted.get(pid)
        if found is not None:
            self._aborted[pid] = (found[0], True)
            return True
        self._committed.add(pid)
        return False

    def on_data_retained(self, producer_id: int) -> None:
        """A record of ``producer_id``'s open (committed) transaction stays in this pass."""
        self._retained.add(producer_id)

    def on_control_batch(self, header: BatchHeader, marker: EndTransactionMarker | None) -> bool:
        """Rules 2-3: whether this control batch may be discarded (once its horizon passed);
        sets :attr:`freed` (rule 4)."""
        self._consume_up_to(header.last_offset)
        self.freed = False
        if marker is None:
            return header.records_count == 0  # an emptied control batch; KRaft's stay
        pid = header.producer_id
        if marker.type is ControlRecordType.ABORT:
            found = self._aborted.pop(pid, None)
            seen = found is not None and found[1]
            self.freed = seen  # aborted data never stays
            return not seen
        seen = pid in self._committed
        self._committed.discard(pid)
        retained = pid in self._retained
        self._retained.discard(pid)
        self.freed = seen and not retained
        return not seen

    def aborted_ranges_left(self) -> int:
        """Aborted ranges not reached yet (for tests)."""
        return len(self._pending) - self._next


class MarkerOutcome(enum.Enum):
    """What the pass does with one control batch (Kafka's ``checkBatchRetention`` for markers)."""

    COPY = "copy"
    """Kept as it is: its transaction still has data here, or its horizon has not passed."""
    STAMP = "stamp"
    """Kept, rewritten with a delete horizon: its transaction has no data left (rule 3)."""
    DROP = "drop"
    """Removed: no data left and its horizon has passed (or it was already emptied)."""


def batch_marker(
    header: BatchHeader, raw: bytes, path: Path | str, position: int
) -> EndTransactionMarker | None:
    """The marker of a control batch read by the pass (``None``: emptied, or not a marker)."""
    return read_marker(header, raw, path=path, position=position)


def control_batch_outcome(
    txn: CleanedTransactionMetadata,
    header: BatchHeader,
    raw: bytes,
    *,
    now_ms: int,
    path: Path | str,
    position: int,
) -> MarkerOutcome:
    """Rules 2-3 for one control batch, advancing ``txn`` past it."""
    discardable = txn.on_control_batch(header, batch_marker(header, raw, path, position))
    if not discardable:
        return MarkerOutcome.COPY  # txn.freed: the caller makes the log due again (rule 4)
    if header.records_count == 0:
        return MarkerOutcome.DROP
    horizon = header.delete_horizon_ms
    if horizon is None:
        return MarkerOutcome.STAMP
    return MarkerOutcome.DROP if now_ms >= horizon else MarkerOutcome.COPY


def rewrite_control_batch(
    header: BatchHeader,
    raw: bytes,
    *,
    delete_horizon_ms: int | None,
    keep_record: bool,
    path: Path | str,
    position: int,
) -> bytes:
    """The control batch with a delete horizon (``keep_record``), or emptied (its offsets,
    producer fields and flags kept, as Kafka's ``writeEmptyHeader``)."""
    records = (
        decode_records(raw, path=path, position=position, validate=False) if keep_record else []
    )
    return encode_records(
        records,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        delete_horizon_ms=delete_horizon_ms if keep_record else None,
        max_timestamp_ms=None if records else header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        is_transactional=header.is_transactional,
        is_control=True,
    )


def write_cleaned_txn_indexes(
    groups: Sequence[Sequence[Any]],
    cleaned: Sequence[LogSegment],
    replaced: Sequence[Sequence[int]],
) -> None:
    """Give every cleaned segment the ``.txnindex`` the loader would derive (pass L10).

    The pass's output is replayed in offset order from the log start (a
    rewritten group through its cleaned segment, an untouched one through its
    source readers), so each cleaned segment lists exactly the aborted
    transactions whose data (possibly an emptied batch) and ABORT marker
    survive, and the index agrees with the log right after the swap.
    """
    by_base = {bases[0]: segment for bases, segment in zip(replaced, cleaned, strict=True)}
    state = ProducerState()
    for group in groups:
        segment = by_base.get(group[0].base_offset)
        if segment is None:
            for source in group:
                replay_segment(state, source.reader)
            continue
        with segment.open_reader() as reader:
            entries = replay_segment(state, reader)
        segment.txn_index.replace_entries(entries)
