"""Which partitions took part in a transaction: read from the coordinator's log, for a remedy.

A cross-store commit is one Kafka transaction over several changelog partitions
(``docs/recovery.md``, "Transactions").  A changelog partition alone does not say
which other partitions a transaction of its producer touched; the state
directory's coordinator log (``__transaction_state-0``) does, for as long as its
records are there: each PrepareCommit record lists the partitions of the
transaction it decides (with the first offset of its data in each) plus the
earlier committed ones whose markers may not be durable yet.  So the
participants of one transaction are the entries a record adds to its
predecessor's list.  That is exact when the predecessor is the record at the
offset just below (the log is compacted: once the cleaner has removed older
records, a record's predecessor may be gone, and the entries it adds are then a
superset: :attr:`Transaction.exact` is ``False``).  When no record lists the
transaction any more, nobody can say from the files which stores took part.

Read-only: every batch is CRC-checked (:func:`changelog.repair.scan.walk`);
damaged bytes and records that do not parse are skipped and counted.

Thread-safety: plain functions over files a remedy holds the lock of.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import attrs

from changelog.errors import ChangelogError
from changelog.record.batch import decode_key_values
from changelog.repair.scan import Batch, segment_files, walk
from statestore.errors import StateStoreError
from statestore.txn.record import TransactionState, TxnPartition, decode_value

__all__ = [
    "COORDINATOR_DIR",
    "CoordinatorLog",
    "Transaction",
    "consistent_cut",
    "find_transaction",
    "read_coordinator_log",
    "refuse_waiting_markers",
]

COORDINATOR_DIR: Final = "__transaction_state-0"
"""The coordinator's partition directory inside a state directory."""


@attrs.frozen
class Transaction:
    """A committed transaction as the coordinator's log recorded it."""

    record_offset: int
    """The offset of the PrepareCommit record that decided it."""
    timestamp_ms: int
    parts: tuple[TxnPartition, ...]
    """Every partition it wrote, with the first offset of its data there."""
    exact: bool
    """Whether ``parts`` is exactly this transaction's (see the module docstring)."""


@attrs.frozen
class CoordinatorLog:
    """The decisions found in ``__transaction_state-0``, oldest first."""

    directory: Path
    transactions: tuple[Transaction, ...]
    first_record_offset: int | None
    """The offset of the oldest record still in the log (older ones were compacted away)."""
    unreadable: int
    """Damaged ranges and records that did not parse (skipped)."""
    waiting: tuple[TxnPartition, ...] = ()
    """The latest record's list: decided transactions whose markers may not be durable yet
    (empty after a clean close); the next open writes them (recovery step R2)."""


def read_coordinator_log(state_dir: Path) -> CoordinatorLog | None:
    """The decisions of ``state_dir``'s coordinator; ``None`` when it has no coordinator log."""
    directory = Path(state_dir) / COORDINATOR_DIR
    if not directory.is_dir():
        return None
    records: list[tuple[int, int, TransactionState, tuple[TxnPartition, ...]]] = []
    unreadable = 0
    for segment in segment_files(directory):
        for item in walk(segment.path):
            if not isinstance(item, Batch):
                unreadable += 1
                continue
            if item.header.is_control:
                continue
            try:
                entries = decode_key_values(
                    item.data, path=item.path, position=item.position, validate=False
                )
            except ChangelogError:
                unreadable += 1
                continue
            for offset, _key, value in entries:
                if value is None:
                    continue
                try:
                    record = decode_value(value, offset=offset)
                except StateStoreError:
                    unreadable += 1
                    continue
                records.append(
                    (offset, record.last_update_timestamp_ms, record.state, record.partitions)
                )
    transactions = []
    previous_offset: int | None = None
    previous: frozenset[TxnPartition] = frozenset()
    for offset, stamp, state, parts in records:
        if state is TransactionState.PREPARE_COMMIT:
            new = tuple(p for p in parts if p not in previous)
            exact = previous_offset == offset - 1 or (previous_offset is None and offset == 0)
            if new:
                transactions.append(Transaction(offset, stamp, new, exact))
        previous_offset, previous = offset, frozenset(parts)
    return CoordinatorLog(
        directory,
        tuple(transactions),
        records[0][0] if records else None,
        unreadable,
        records[-1][3] if records else (),
    )


def find_transaction(
    log: CoordinatorLog, topic: str, partition: int, first: int, end: int | None
) -> Transaction | None:
    """The transaction whose data in ``topic-partition`` starts in ``[first, end)``.

    ``end`` ``None`` means ``first`` exactly.  The record that first listed
    it wins (later records list it again only while its markers wait, and
    :func:`read_coordinator_log` keeps only the entries a record adds).
    """
    for transaction in log.transactions:
        for part in transaction.parts:
            if part.topic != topic or part.partition != partition:
                continue
            if (end is None and part.first_offset == first) or (
                end is not None and first <= part.first_offset < end
            ):
                return transaction
    return None


def consistent_cut(log: CoordinatorLog, start: Transaction) -> dict[tuple[str, int], int] | None:
    """Where to truncate each partition so that ``start`` and every later transaction that
    would otherwise be split are removed whole: ``{(topic, partition): offset}``.

    Begins with ``start``'s partitions at its first offsets, then, in decision order, takes
    in every later transaction with a part at or above the cut of a partition already cut
    (its other parts would survive it), until nothing changes.  ``None`` when a transaction
    from ``start`` on is not known exactly (older records compacted away: the cascade
    cannot be proved).  Commits of one partition need no care: they are one batch.
    """
    if not start.exact:
        return None
    cut = {(p.topic, p.partition): p.first_offset for p in start.parts}
    later = [t for t in log.transactions if t.record_offset > start.record_offset]
    changed = True
    while changed:
        changed = False
        for transaction in later:
            hit = any(
                (p.topic, p.partition) in cut and p.first_offset >= cut[(p.topic, p.partition)]
                for p in transaction.parts
            )
            if not hit:
                continue
            if not transaction.exact:
                return None
            for part in transaction.parts:
                key = (part.topic, part.partition)
                if key not in cut or part.first_offset < cut[key]:
                    cut[key] = part.first_offset
                    changed = True
    return cut


def refuse_waiting_markers(log: CoordinatorLog | None, cuts: dict[tuple[str, int], int]) -> None:
    """Refuse (:class:`~changelog.errors.RepairRefusedError`) a truncation of ``topic-partition``
    at ``cuts[(topic, partition)]`` while the coordinator's latest record still lists a
    transaction there at or above the cut.

    Such an entry outlives the truncation (the next open carries the list forward before it
    drops the partition), and a new transaction whose data starts at that very offset, left
    undecided by a crash, would then be committed at the following open (recovery step R2).
    Opening the state directory once writes the markers and drops the entries.
    """
    from changelog.errors import RepairRefusedError  # noqa: PLC0415

    if log is None:
        return
    for part in log.waiting:
        cut = cuts.get((part.topic, part.partition))
        if cut is not None and part.first_offset >= cut:
            raise RepairRefusedError(
                log.directory,
                f"the coordinator's latest record still waits for the markers of a transaction"
                f" in {part.topic}-{part.partition} from offset {part.first_offset} (the state"
                " directory was not closed cleanly since it was decided); open every store of"
                " the state directory once (for example: statestore restore STATE_DIR) so that"
                " the coordinator writes them, then plan again; nothing was changed",
                offset=part.first_offset,
            )
