"""Producer state of one partition: which transactions are open, and what an append must stamp.

Kafka keeps this in ``ProducerStateManager`` and snapshots it to
``<offset>.snapshot`` files so that a broker need not re-read the log at
start.  **We keep no snapshot file: the loader rebuilds the state from the
segments at every open** (pass L11, :func:`changelog.log.loader.load_log`), reading
only batch headers, plus the one small record of each control batch.  Why:

* it is the only version of the state that cannot disagree with the log (a
  snapshot can be stale, torn or lost; Kafka then falls back to this very scan);
* the same scan re-derives every segment's ``.txnindex`` (rebuilt, never trusted);
* it is cheap next to a restore, which reads every record anyway: a header is
  61 bytes per batch, and a store writes one batch per commit (measured in
  ``docs/formats.md``: producer state).

What is kept, per producer id: its latest epoch, the next sequence number to
stamp on a data batch, and the first offset of its open transaction (if any);
and, for the partition, the open transactions ordered by first offset, whose
minimum is the *first unstable offset*.  The **last stable offset** (LSO) is
that offset, or the log end offset when no transaction is open: a
``read_committed`` reader never reads at or past it.

Kafka's rules, as applied here (``ProducerAppendInfo``):

1. a transactional data batch of a producer with no open transaction opens one
   at the batch's base offset;
2. a control batch holding a COMMIT or ABORT marker closes the producer's open
   transaction; an ABORT of a transaction that had data yields an
   :class:`~changelog.segment.txn_index.AbortedTxn` for the index of the segment the
   marker lands in, whose ``last_stable_offset`` is the first offset of the
   earliest *other* open transaction, else the marker's offset + 1;
3. a marker for a producer with no open transaction changes nothing but the
   epoch (an empty transaction: no index entry);
4. an emptied control batch (the cleaner removed its marker) changes nothing.

Invariants: ``_ongoing`` maps first offset -> producer id in increasing first
offset; a producer id has at most one open transaction, and
``_producers[pid].txn_first_offset`` is its key in ``_ongoing``.

Thread-safety: not thread-safe; the owning ``Log`` calls it under ``Log.lock``
(the loader before the ``Log`` exists).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import attrs

from changelog.errors import CorruptRecordError
from changelog.limits import INT32_MAX
from changelog.record.control import ControlRecordType, EndTransactionMarker, read_marker
from changelog.record.header import NO_PRODUCER_ID, BatchHeader
from changelog.segment.reader import SegmentReader
from changelog.segment.segment import LogSegment
from changelog.segment.txn_index import AbortedTxn

__all__ = ["ProducerEntry", "ProducerState", "rebuild_producer_state", "replay_segment"]

logger = logging.getLogger(__name__)


@attrs.define(slots=True)
class ProducerEntry:
    """What is known of one producer id in this partition."""

    epoch: int
    next_sequence: int = 0
    txn_first_offset: int | None = None


class ProducerState:
    """The producers of one partition and their open transactions (see the module docstring)."""

    def __init__(self) -> None:
        """An empty state (a new log)."""
        self._producers: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}

    # ----------------------------------------------------------------- queries

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction, ``None`` when none is open."""
        return next(iter(self._ongoing), None)

    def last_stable_offset(self, log_end_offset: int) -> int:
        """The LSO: the first unstable offset, else ``log_end_offset``."""
        first = self.first_unstable_offset
        return log_end_offset if first is None else first

    def open_transactions(self) -> dict[int, int]:
        """``{producer id: first offset}`` of every open transaction, earliest first."""
        return {pid: first for first, pid in self._ongoing.items()}

    def entry(self, producer_id: int) -> ProducerEntry | None:
        """The producer's entry, or ``None``."""
        return self._producers.get(producer_id)

    def __iter__(self) -> Iterator[int]:
        """Producer ids known to the partition."""
        return iter(self._producers)

    # ----------------------------------------------------------------- updates

    def on_data_batch(self, header: BatchHeader) -> None:
        """Rule 1, and the sequence bookkeeping of any batch with a producer id."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return
        entry = self._producers.get(pid)
        if entry is None or header.producer_epoch != entry.epoch:
            entry = self._producers[pid] = ProducerEntry(
                header.producer_epoch, txn_first_offset=entry.txn_first_offset if entry else None
            )
        if header.base_sequence >= 0:
            entry.next_sequence = (header.base_sequence + header.last_offset_delta + 1) % (
                INT32_MAX + 1
            )
        if header.is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = header.base_offset
            self._ongoing[header.base_offset] = pid

    def on_marker(
        self, header: BatchHeader, marker: EndTransactionMarker | None
    ) -> AbortedTxn | None:
        """Rules 2-4: close the producer's transaction; the index entry of an aborted one."""
        if marker is None:
            return None
        pid = header.producer_id
        entry = self._producers.get(pid)
        if entry is None:
            self._producers[pid] = ProducerEntry(header.producer_epoch)
            return None
        entry.epoch = max(entry.epoch, header.producer_epoch)
        first = entry.txn_first_offset
        if first is None:
            return None
        entry.txn_first_offset = None
        del self._ongoing[first]
        if marker.type is not ControlRecordType.ABORT:
            return None
        others = self.first_unstable_offset
        lso = header.last_offset + 1 if others is None else others
        return AbortedTxn(pid, first, header.last_offset, lso)

    def next_sequence(self, producer_id: int, producer_epoch: int) -> int:
        """The base sequence the producer's next data batch gets (0 for a new producer or epoch)."""
        entry = self._producers.get(producer_id)
        if entry is None or entry.epoch != producer_epoch:
            return 0
        return entry.next_sequence


def rebuild_producer_state(segments: Sequence[LogSegment], prefix: str) -> ProducerState:
    """Loader pass L10: replay every batch header of ``segments`` into a new state and make
    each segment's ``.txnindex`` hold exactly the aborted transactions its markers close.

    Reads headers only, plus the whole batch of each control batch (CRC-checked).
    A ``.txnindex`` that differs from what the log implies (lost, torn, stale,
    written by an older version) is rewritten, with a warning.
    """
    state = ProducerState()
    for segment in segments:
        with segment.open_reader() as reader:
            aborted = replay_segment(state, reader)
        had = len(segment.txn_index)
        problem = segment.txn_index.problem
        if segment.txn_index.replace_entries(aborted):
            logger.warning(
                "%srebuilt %s: %s aborted transaction(s), the file had %s%s",
                prefix,
                segment.txn_index.path.name,
                len(aborted),
                had,
                f" ({problem})" if problem else "",
            )
    return state


def replay_segment(state: ProducerState, reader: SegmentReader) -> list[AbortedTxn]:
    """Replay one segment's batches into ``state``; the aborted transactions its markers close.

    Reads headers only, plus the whole batch of each control batch (CRC-checked).
    """
    aborted: list[AbortedTxn] = []
    try:
        for position, header in reader.headers():
            if header.producer_id == NO_PRODUCER_ID:
                continue
            if not header.is_control:
                state.on_data_batch(header)
                continue
            data = reader.read_batch(position, header)
            marker = read_marker(header, data, path=reader.path, position=position)
            entry = state.on_marker(header, marker)
            if entry is not None:
                aborted.append(entry)
    except CorruptRecordError:
        # Headers are not under a CRC check here: a damaged length shows up
        # one batch later.  The CRC-checked read names the batch that is bad.
        for _ in reader.batches():
            pass
        raise
    return aborted
