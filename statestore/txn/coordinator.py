"""The local transaction coordinator: one commit, atomic over every store partition it covers.

Kafka's model, run inside one process.  The state directory has one
transactional id and one producer id; the coordinator keeps its decisions in
``<state_dir>/__transaction_state-0``, a compacted Kafka-format partition
(the local mirror of ``__transaction_state``; record format in
:mod:`statestore.txn.record`), cleaned by the manager's cleaner like any
changelog.

**Commit protocol** (:meth:`TransactionCoordinator.commit`), for the
participants (store partitions) that have pending writes, under each one's
commit lock, taken in (store, partition) order:

* none: nothing to do; one: **one ordinary batch** in its changelog, fsynced,
  then RocksDB (:mod:`statestore.stores.change_logging`, steps 1-3): one fsync
  round, atomic because a batch is.
* two or more, a transaction:

  T1. append each partition's writes as ONE transactional batch (our producer
      id and epoch, the partition's next sequence), not fsynced;
  T2. fsync every partition's changelog below its batch's end, the fsyncs
      running at the same time (:func:`changelog.log.group_commit.sync_logs`, each
      through its log's group commit), whatever the flush policy: a decided
      transaction must not lose one partition's data to a power cut;
  T3. append the **PrepareCommit** record (this transaction's partitions with
      the first offset of its data in each, plus the earlier committed
      transactions whose COMMIT marker may not be durable yet) to the
      coordinator's log and fsync it (through the log's group commit, so
      concurrent transactions share the fsync).  **This is the commit
      point**: from here the transaction is committed, whatever happens next;
  T4. append a COMMIT marker to every partition, not fsynced (the next append
      or flush of that partition makes it durable; until then the
      coordinator's records keep listing it, so recovery can redo it);
  T5. apply each partition's writes to RocksDB with the applied offset just
      after its marker, then drop them from the write buffers; ``commit()``
      returns;
  T6. at a clean close, once every marker is durable (the changelogs were
      flushed), a **CompleteCommit** record listing nothing still waiting.

  Cost: two sequential fsync rounds (data, overlapped over the partitions;
  then the decision).

**Recovery**, the pass that completes or undoes the protocol (docs/recovery.md
tells it with the loader's passes):

* at open (:meth:`TransactionCoordinator.open`): O0 a coordinator's log that is
  missing or holds no record beside a changelog holding transactional batches
  was lost: refused (:func:`lost_transaction_state`), nothing written; O1 open
  the coordinator's log
  (the changelog loader recovers it) and read its latest record for our
  transactional id; a new state directory draws a random producer id.  O2
  append and fsync an **Empty** record with the epoch bumped (this fences a
  zombie holding an older epoch: every partition refuses its appends), still
  listing the committed transactions whose markers may be missing;
* before each store partition restores (:meth:`TransactionCoordinator.recover`):
  R1 take the partition's open transactions from its producer state (rebuilt
  by the changelog loader, pass L10); R2 for each one, a **COMMIT** marker when
  the coordinator's latest record lists (partition, first offset), else an
  **ABORT** marker (as Kafka's coordinator aborts on timeout), then fsync the
  changelog; R3 drop the partition from the list (its markers are durable
  now).  After R3 the partition has no open transaction, so its last stable
  offset is its log end offset and the restore replays everything committed.

What a crash after each step leaves, and what recovery does with it:

====  ===========================================  =====================================
step  on disk after a crash here                   at the next open
====  ===========================================  =====================================
T1    some partitions hold the transaction's data  R2 writes ABORT markers: none visible
T2    every partition holds its data, durable      R2 writes ABORT markers: none visible
T3    the PrepareCommit record is durable          R2 writes COMMIT markers: all visible
T4    some or all markers (maybe not durable)      R2 writes the missing COMMIT markers
T5    RocksDB holds some of it (not durable)       restore rebuilds RocksDB from the log
O0    nothing new                                  O0 again
O1    nothing new                                  O1 again
O2    the bumped epoch, same list                  O1 reads it; O2 bumps again
R1    nothing new                                  R1 again
R2    some markers                                 R1 sees only the transactions left
R3    markers durable, list still in the log       R2 finds nothing open: no-op
====  ===========================================  =====================================

An error in T1 or T2 (nothing decided) writes ABORT markers to the
partitions that got data (best effort) and raises
:class:`~statestore.errors.CommitFailedError`: ``written=False`` when no
partition failed (the writes stay buffered), else the failed partitions'
stores must be reopened.  An error in T3 fails the coordinator
(:class:`~statestore.errors.TransactionCoordinatorError`; whether the
decision is on disk is known only at the next open, which decides by it).
An error in T4 or T5 fails that partition (the commit itself stands and is
visible after reopening); the other partitions still get their markers and
their RocksDB writes, so none keeps the transaction open for the next one to
join, and the first error is raised at the end.

Fault injection: :attr:`TransactionCoordinator.fault_hook`, when set, is
called with the name of each step just completed (:data:`COMMIT_STEPS`,
:data:`RECOVERY_STEPS`); a hook that raises stops the protocol there, as a
crash would (tests then abandon the manager and reopen it).

Invariants: ``_waiting`` lists exactly the committed transactions (partition,
first offset) whose COMMIT marker may not be durable, and every record
appended from O2 on lists them; an entry leaves only once its marker is
durable (its changelog's recovery point is past the marker, or R2/R3
flushed it).  At most one entry per partition.

Thread-safety: thread-safe.  Commits of disjoint partitions run T1-T5 in
parallel (threads running scoped ``manager.transaction(a, b)`` blocks: see
:mod:`statestore.txn.scope`, which :attr:`TransactionCoordinator.scopes`
holds): their T2 fsyncs overlap and their T3 records share the decision
log's group-commit fsyncs.  Each participant's ``commit_lock`` serializes
commits of one partition (taken in (store, partition) order: no deadlock),
hands itself to waiting committers in arrival order, and lets a one-partition
committer whose writes another commit already carried return without a commit
of its own (group commit of one store: :mod:`statestore.txn.commit_lock`);
``_lock`` guards ``_waiting``, the coordinator's log appends and ``_failed``,
and is never held across an fsync; :attr:`~TransactionCoordinator.visibility`
is held across T5 (RocksDB writes only) and by multi-partition readers while
they open their views.  Inside one transaction the T1 appends
run one after the other (page-cache writes; only T2's fsyncs are overlapped).
Decisions interleave safely because each record, appended under ``_lock``,
lists every committed part still waiting (its own and earlier ones): the
latest durable record is always complete.  All transactions share one
producer id and epoch: a partition holds at most one open transaction at a
time (its commit lock).  Which writes a commit covers when several threads
write: every write that was buffered in a participant when the commit took
that participant's lock (``commit()`` returns once every write its thread
buffered before calling it is durable: it waits on the lock of a partition
another commit holds and then takes what is still pending); which
participants a manager-level commit passes in is the scope module's job.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import attrs

from changelog import ChangelogError, Log, LogConfig
from changelog.limits import INT16_MAX
from changelog.log.group_commit import sync_logs
from changelog.log.log import wall_clock_ms
from changelog.log.log_dir import parse_topic_partition, peek_batch_headers
from changelog.record.control import ControlRecordType
from statestore.errors import (
    TransactionCoordinatorError,
    TransactionStateMissingError,
)
from statestore.txn.participant import Participant, Records
from statestore.txn.record import (
    TRANSACTIONAL_ID,
    TransactionState,
    TransactionStateRecord,
    TxnPartition,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from statestore.txn.scope import TransactionScopes

__all__ = [
    "COMMIT_STEPS",
    "RECOVERY_STEPS",
    "TRANSACTION_LOG_CONFIG",
    "TRANSACTION_LOG_DIR",
    "CoordinatorTotals",
    "DecisionObserver",
    "FaultHook",
    "TransactionCoordinator",
    "lost_transaction_state",
]

logger = logging.getLogger(__name__)

TRANSACTION_LOG_DIR: Final = "__transaction_state-0"
"""The coordinator's log directory inside the state directory (Kafka's topic name)."""

TRANSACTION_LOG_CONFIG: Final = LogConfig(
    segment_bytes=1024 * 1024,
    max_compaction_lag_ms=3600 * 1000,
)
"""Small segments (about 10,000 records each) so the cleaner can keep it at a few records."""

COMMIT_STEPS: Final = ("T1.1", "T1", "T2", "T3", "T4.1", "T4", "T5")
"""The fault hook's names for the commit protocol: ``T1.1`` after the first partition's
batch, ``T4.1`` after the first marker, the others after the step of that number."""

RECOVERY_STEPS: Final = ("O0", "O1", "O2", "R1", "R2.1", "R2", "R3")
"""The fault hook's names for the recovery pass (``R2.1``: after the first marker)."""

FaultHook = Callable[[str], None]
"""Called with a step name of :data:`COMMIT_STEPS` or :data:`RECOVERY_STEPS` (tests only)."""

_MAX_EPOCH: Final = INT16_MAX - 1
"""Kafka bumps to a new producer id when the epoch would reach ``Short.MAX_VALUE``."""


@attrs.define
class _Waiting:
    """A committed transaction's part in one partition whose COMMIT marker may not be durable."""

    part: TxnPartition
    """What every record lists for it (made once: records list every entry, each time)."""
    marker_offset: int | None = None
    """Where this session wrote the marker (``None``: read from disk, not resolved yet)."""
    log: Log | None = None

    def durable(self) -> bool:
        if self.log is None or self.marker_offset is None:
            return False
        try:
            return self.log.recovery_point > self.marker_offset
        except ChangelogError:
            return False


@attrs.define
class CoordinatorTotals:
    """What the coordinator has done since it opened (its metrics read these; see
    :mod:`statestore.metrics.transactions`).  Updated under the coordinator's lock."""

    committed: int = 0
    """Transactions decided (T3's record durable)."""
    aborted: int = 0
    """Transactions ended by an error before their decision (T1-T2), none of it visible."""
    rolled_forward_at_open: int = 0
    """Open transactions found decided before a partition restored (R2: a COMMIT marker)."""
    aborted_at_open: int = 0
    """Open transactions found undecided before a partition restored (R2: an ABORT marker)."""


DecisionObserver = Callable[[float], None]
"""Called with the seconds one decision (T3: append and fsync) took, outside every lock."""


class TransactionCoordinator:
    """Decides multi-partition commits durably and finishes or undoes them at open.

    Protocol, recovery, invariants and thread-safety: see the module docstring.
    """

    def __init__(
        self,
        log: Log,
        *,
        producer_id: int,
        producer_epoch: int,
        waiting: dict[tuple[str, int], int],
        clock: Callable[[], int],
        after_commit: Callable[[Sequence[Log]], object] | None = None,
    ) -> None:
        """Use :meth:`open`."""
        self._log = log
        self._after_commit = after_commit
        self.producer_id = producer_id
        """The state directory's producer id (in every transactional batch and marker)."""
        self.producer_epoch = producer_epoch
        """This session's epoch (bumped at open; older epochs are fenced)."""
        self._waiting: dict[tuple[str, int], _Waiting] = {
            key: _Waiting(TxnPartition(key[0], key[1], first)) for key, first in waiting.items()
        }
        self._clock = clock
        self._lock = threading.Lock()
        self._failed: BaseException | None = None
        self.scopes = TransactionScopes()
        """The open ``manager.transaction()`` blocks of every thread and the stores they own."""
        self.visibility = threading.Lock()
        """Held while T5 applies a transaction's partitions to RocksDB, so that a reader of
        several partitions (:mod:`statestore.stores.reader`) opens its views of them either
        before or after the transaction, never between two of its partitions.  Never held
        across an fsync; a one-batch commit does not take it."""
        self._label = f"[txn {log.dir}]"
        self.fault_hook: FaultHook | None = None
        """Called after each numbered step (:data:`COMMIT_STEPS`, :data:`RECOVERY_STEPS`);
        for crash-injection tests.  ``None`` (the default): nothing is called."""
        self.totals = CoordinatorTotals()
        """Counts of what this session decided and recovered (read them, do not write)."""
        self.decision_observer: DecisionObserver | None = None
        """Called with each decision's duration in seconds (the metrics' histogram)."""

    # ----------------------------------------------------------------- open

    @classmethod
    def open(
        cls,
        state_dir: Path,
        *,
        clock: Callable[[], int] | None = None,
        fault_hook: FaultHook | None = None,
        after_commit: Callable[[Sequence[Log]], object] | None = None,
    ) -> TransactionCoordinator:
        """Steps O0-O2: check the log was not lost, open it, read the latest decision, bump
        the epoch.

        A lost log (O0) raises :class:`~statestore.errors.TransactionStateMissingError`
        before anything is created or written.  ``after_commit`` is called with the
        changelogs a commit wrote, after the commit is durable and applied and its
        commit locks are released, before :meth:`commit` returns (the manager's
        cleaner paces writers there: :meth:`changelog.CleanerService.pace`).

        A record that does not parse raises
        :class:`~statestore.errors.TransactionLogCorruptError` before anything
        is written (the log is closed again).
        """
        now = clock if clock is not None else wall_clock_ms
        directory = state_dir / TRANSACTION_LOG_DIR
        if not any(True for _ in peek_batch_headers(directory)):
            _refuse_if_lost(state_dir)  # O0, before the open creates anything
        if fault_hook is not None:
            fault_hook("O0")
        log = Log.open(directory, config=TRANSACTION_LOG_CONFIG, clock=clock)
        try:
            latest = _latest_record(log)  # O1
            if latest is None:
                _refuse_if_lost(state_dir)  # O0: batches, but no record
            if fault_hook is not None:
                fault_hook("O1")
            if latest is None or latest.producer_epoch >= _MAX_EPOCH:
                producer_id = secrets.randbelow(2**62) + 1
                epoch = 0
            else:
                producer_id = latest.producer_id
                epoch = latest.producer_epoch + 1
            waiting = (
                {}
                if latest is None
                else {(p.topic, p.partition): p.first_offset for p in latest.partitions}
            )
            coordinator = cls(
                log,
                producer_id=producer_id,
                producer_epoch=epoch,
                waiting=waiting,
                clock=now,
                after_commit=after_commit,
            )
            coordinator.fault_hook = fault_hook
            coordinator._append_record(TransactionState.EMPTY)  # O2
            coordinator._step("O2")
        except BaseException:
            log.close()
            raise
        logger.info(
            "%s producer id %s epoch %s; %s committed transaction part(s) to finish",
            coordinator._label,
            producer_id,
            epoch,
            len(waiting),
        )
        return coordinator

    @property
    def log(self) -> Log:
        """The coordinator's log (``__transaction_state-0``; the cleaner compacts it)."""
        return self._log

    @property
    def failed(self) -> bool:
        """Whether a decision failed to be written (reopen the manager)."""
        return self._failed is not None

    def waiting(self) -> dict[tuple[str, int], int]:
        """``{(topic, partition): first offset}`` of committed parts whose marker may be missing."""
        with self._lock:
            return {key: entry.part.first_offset for key, entry in self._waiting.items()}

    def _step(self, name: str) -> None:
        """Call the fault hook after step ``name``; if it raises, the coordinator is failed
        (it writes nothing more, as after a crash) and the error propagates."""
        hook = self.fault_hook
        if hook is not None:
            try:
                hook(name)
            except BaseException as exc:
                self._failed = exc
                raise

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise TransactionCoordinatorError(self._log.dir, str(self._failed)) from self._failed

    # ----------------------------------------------------------------- recovery (R1-R3)

    def recover(self, log: Log, *, store: str, partition: int) -> dict[int, ControlRecordType]:
        """Steps R1-R3 for one changelog before its store partition restores.

        Returns ``{first offset: marker written}`` for the transactions it
        ended.  Raises what the changelog raises (the store's open then fails;
        nothing was decided differently).
        """
        self._check_usable()
        key = (log.topic, log.partition)
        label = f"[{store}-{partition}]"
        open_txns = log.open_transactions()  # R1
        self._step("R1")
        with self._lock:
            entry = self._waiting.get(key)
        committed_first = None if entry is None else entry.part.first_offset
        ended: dict[int, ControlRecordType] = {}
        for producer_id, first in open_txns.items():
            marker = (
                ControlRecordType.COMMIT if first == committed_first else ControlRecordType.ABORT
            )
            epoch = self.producer_epoch if producer_id == self.producer_id else None
            if epoch is None:
                epoch = log.producer_epoch(producer_id) or 0
                logger.warning(
                    "%s open transaction of producer %s (not ours) at offset %s: aborting it",
                    label,
                    producer_id,
                    first,
                )
            log.append_marker(marker, producer_id=producer_id, producer_epoch=epoch)  # R2
            ended[first] = marker
            with self._lock:
                if marker is ControlRecordType.COMMIT:
                    self.totals.rolled_forward_at_open += 1
                else:
                    self.totals.aborted_at_open += 1
            logger.warning(
                "%s transaction at offset %s had no marker: %s (%s)",
                label,
                first,
                "rolled it forward" if marker is ControlRecordType.COMMIT else "aborted it",
                "its decision is in the coordinator's log"
                if marker is ControlRecordType.COMMIT
                else "no decision was recorded",
            )
            if len(ended) == 1:
                self._step("R2.1")
        if ended or entry is not None:
            log.flush()  # the markers (and any written before a crash) are durable
        self._step("R2")
        if entry is not None:
            with self._lock:
                if self._waiting.get(key) is entry:
                    del self._waiting[key]  # R3
        self._step("R3")
        return ended

    # ----------------------------------------------------------------- commit (T1-T5)

    def in_transaction(self) -> bool:
        """Whether this thread is inside a ``manager.transaction()`` block."""
        return self.scopes.current() is not None

    def enlist(self, store: str) -> bool:
        """Enlist ``store`` in this thread's block, if any; returns whether there is one.

        A scoped block then owns the store until its end (see
        :mod:`statestore.txn.scope`); an unscoped one covers every store anyway.
        """
        block = self.scopes.current()
        if block is None:
            return False
        if block.scoped:
            self.scopes.enlist(block, store)
        return True

    def commit(self, participants: Sequence[Participant]) -> int:
        """Commit the pending writes of ``participants`` atomically; returns the records committed.

        The protocol is in the module docstring.  Participants without
        pending writes are left alone (their locks are not taken).  Then, with
        no lock held, ``after_commit`` (see :meth:`open`) gets the changelogs written.
        """
        written: list[Participant] = []
        records = self._commit(participants, written)
        if records and self._after_commit is not None and written:
            self._after_commit([member.changelog for member in written])
        return records

    def _commit(self, participants: Sequence[Participant], written: list[Participant]) -> int:
        """:meth:`commit` without ``after_commit``; appends the members it writes to ``written``."""
        self._check_usable()
        if len(participants) == 1:  # one partition (every one-partition store): no transaction
            alone = participants[0]
            committed = alone.commit_alone()  # group commit: the lock, take, write
            if committed:
                written.append(alone)
            return committed
        chosen: dict[int, Participant] = {}
        for member in participants:
            if member.pending_count:
                chosen.setdefault(id(member), member)
        if not chosen:
            return 0
        members = sorted(chosen.values(), key=lambda m: (m.store, m.partition))
        with contextlib.ExitStack() as locks:
            for member in members:
                locks.enter_context(member.commit_lock)
            work = [(member, member.take()) for member in members]
            work = [(member, records) for member, records in work if records]
            if not work:
                return 0
            written.extend(member for member, _records in work)
            if len(work) == 1:
                member, records = work[0]
                return member.write(records)
            return self._transaction(work)

    def _transaction(self, work: Sequence[tuple[Participant, Records]]) -> int:
        """T1-T5 over ``work`` (two or more partitions), every commit lock held."""
        pid, epoch = self.producer_id, self.producer_epoch
        firsts: list[int] = []
        ends: list[int] = []
        try:
            for member, records in work:  # T1
                info = member.append_transactional(records, producer_id=pid, producer_epoch=epoch)
                firsts.append(info.first_offset)
                ends.append(info.last_offset + 1)
                if len(firsts) == 1:
                    self._step("T1.1")
            self._step("T1")
            # T2: every partition's fsync at once (whatever its flush policy: a decided
            # transaction must not lose one partition's data to a power cut)
            sync_logs([(member, end) for (member, _records), end in zip(work, ends, strict=True)])
            self._step("T2")
        except BaseException:
            self._abort_written(work[: len(firsts)])
            with self._lock:
                self.totals.aborted += 1
            raise
        parts = tuple(
            TxnPartition(member.changelog.topic, member.changelog.partition, first)
            for (member, _records), first in zip(work, firsts, strict=True)
        )
        self._decide(parts, [member.changelog for member, _records in work])  # T3
        self._step("T3")
        # From here the transaction is committed: a partition that fails T4 or T5 is
        # failed (its store restores it, recovery writes its marker), and the others
        # still get theirs, so no partition keeps this transaction open to be joined
        # by the next one.  The first error is raised at the end.
        errors: list[Exception] = []
        applied: list[tuple[Participant, Records, int]] = []
        for (member, records), part in zip(work, parts, strict=True):  # T4
            try:
                marker = member.append_marker(
                    ControlRecordType.COMMIT,
                    producer_id=pid,
                    producer_epoch=epoch,
                    defer_flush=True,
                )
            except Exception as exc:  # noqa: BLE001 - raised after the others' markers
                errors.append(exc)
                member.forget(records)  # the partition is failed; reopening restores them
                continue
            with self._lock:
                waiting = self._waiting.get((part.topic, part.partition))
                if waiting is not None and waiting.part is part:
                    waiting.marker_offset = marker.last_offset
            applied.append((member, records, marker.last_offset + 1))
            if len(applied) + len(errors) == 1:
                self._step("T4.1")
        self._step("T4")
        with self.visibility:  # readers of several partitions see all of T5 or none of it
            for member, records, end in applied:  # T5
                try:
                    member.apply(records, end)
                except Exception as exc:  # noqa: BLE001 - raised after the others are applied
                    errors.append(exc)
                member.forget(records)
        self._step("T5")
        if errors:
            raise errors[0]
        return sum(len(records) for _member, records in work)

    def _abort_written(self, written: Sequence[tuple[Participant, Records]]) -> None:
        """An error before the decision: end the partitions' transactions with ABORT (best effort).

        A partition that cannot take the marker keeps its transaction open;
        the next open aborts it (R2).  After a crash of the fault hook
        (the coordinator is failed) nothing more is written, as after a crash.
        """
        if self._failed is not None:
            return
        for member, _records in written:
            if member.failed:
                continue
            try:
                member.append_marker(
                    ControlRecordType.ABORT,
                    producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    defer_flush=True,
                )
            except Exception:
                logger.exception(
                    "%s could not abort the transaction in %s-%s",
                    self._label,
                    member.store,
                    member.partition,
                )

    def _decide(self, parts: tuple[TxnPartition, ...], logs: Sequence[Log]) -> None:
        """T3: the PrepareCommit record, fsynced; on an error the coordinator is failed.

        The record is appended under ``_lock`` and fsynced after it, through the
        log's group commit: concurrent transactions (of disjoint partitions)
        share the decision fsync.  An ``Exception`` is raised as
        :class:`~statestore.errors.TransactionCoordinatorError` (its cause);
        any other ``BaseException`` (a test's ``SimulatedCrash``, an interrupt)
        fails the coordinator just the same and propagates as it is.
        """
        started = time.perf_counter()
        try:
            with self._lock:
                self._check_usable()
                for part, log in zip(parts, logs, strict=True):
                    key = (part.topic, part.partition)
                    self._waiting[key] = _Waiting(part, log=log)
                end = self._append_record_locked(TransactionState.PREPARE_COMMIT)
            self._log.sync_to(end)
            with self._lock:
                self.totals.committed += 1
            observer = self.decision_observer
            if observer is not None:
                observer(time.perf_counter() - started)
        except TransactionCoordinatorError:
            raise
        except BaseException as exc:
            self._failed = exc
            if not isinstance(exc, Exception):
                raise  # a (simulated) crash or an interrupt stays what it is
            raise TransactionCoordinatorError(self._log.dir, str(exc)) from exc

    # ----------------------------------------------------------------- the coordinator's log

    def _append_record(self, state: TransactionState) -> None:
        """Append a record and fsync it."""
        with self._lock:
            end = self._append_record_locked(state)
        self._log.sync_to(end)

    def _append_record_locked(self, state: TransactionState) -> int:
        """Append (not yet fsynced) a record listing every part still waiting; returns its end.

        The caller holds ``_lock`` and then syncs the log to the returned offset.
        """
        for key in [key for key, entry in self._waiting.items() if entry.durable()]:
            del self._waiting[key]
        record = TransactionStateRecord(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            state=state,
            last_update_timestamp_ms=self._clock(),
            partitions=tuple(entry.part for entry in self._waiting.values()),
        )
        info = self._log.append([(encode_key(), encode_value(record))], defer_flush=True)
        return info.last_offset + 1

    # ----------------------------------------------------------------- shutdown

    def close(self) -> None:
        """T6: a CompleteCommit record (if a commit was decided), then close the log; idempotent."""
        if self._log.closed:
            return
        try:
            if self._failed is None:
                self._append_record(TransactionState.COMPLETE_COMMIT)
        finally:
            self._log.close()

    def abandon(self) -> None:
        """Release the log as a crash would (no record, no checkpoints); idempotent."""
        if not self._log.closed:
            self._log.abandon()


def _latest_record(log: Log) -> TransactionStateRecord | None:
    """O1: the latest record of our transactional id (``None``: a new state directory)."""
    key = encode_key(TRANSACTIONAL_ID)
    latest: tuple[int, bytes] | None = None
    for record in log.read(log.log_start_offset):
        if record.key is None or record.value is None:
            continue
        if record.key == key:
            latest = (record.offset, record.value)
        else:
            decode_key(record.key, offset=record.offset)  # another id: parse it, ignore it
    if latest is None:
        return None
    return decode_value(latest[1], offset=latest[0])


def lost_transaction_state(state_dir: Path) -> TransactionStateMissingError | None:
    """Step O0, read-only: the error the open raises when the coordinator's log is lost.

    The coordinator's log holds a record in every state directory opened once (O2
    writes it before the first commit, fsynced).  So a log that is missing, or
    holds no record, beside a changelog partition that holds a transactional
    batch or a marker, was lost: returns the error naming the first such batch
    (``statestore verify`` reports it; :meth:`TransactionCoordinator.open`
    raises it).  ``None`` when the log holds a record or no changelog holds a
    transaction (a new state directory, or one written by single-partition
    commits only: nothing there waits for a decision).  Reads batch headers only,
    without locks, and changes nothing.
    """
    directory = state_dir / TRANSACTION_LOG_DIR
    for _path, _position, header in peek_batch_headers(directory):
        if header.records_count and not header.is_control:
            return None
    return _first_transactional(state_dir)


def _refuse_if_lost(state_dir: Path) -> None:
    error = _first_transactional(state_dir)
    if error is not None:
        raise error


def _first_transactional(state_dir: Path) -> TransactionStateMissingError | None:
    """The error naming the first transactional batch of the state directory's changelogs."""
    directory = state_dir / TRANSACTION_LOG_DIR
    try:
        children = sorted(state_dir.iterdir())
    except FileNotFoundError:
        return None
    for child in children:
        if child.name == TRANSACTION_LOG_DIR or not child.is_dir():
            continue
        try:
            parse_topic_partition(child)
        except ChangelogError:
            continue
        for path, position, header in peek_batch_headers(child):
            if header.is_transactional or header.is_control:
                return TransactionStateMissingError(directory, child, path, position)
    return None
