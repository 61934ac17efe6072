"""Restore policy and replay: the one module that knows ``full`` from ``incremental``.

Every decision that depends on :attr:`StoreConfig.restore_mode
<statestore.config.StoreConfig.restore_mode>` is made here (the builder and the
layers only carry a :class:`RestorePlan`):

1. :func:`open_engine` opens the RocksDB engine to replay into (full: deleted
   and created empty; incremental: kept, rebuilt when :func:`plan_restore`
   says its applied offset does not belong to the log) and returns the plan;
2. :func:`restore_into` runs the plan: holds the cleaning barrier (incremental
   only), :func:`replay` s the changelog, (a rebuild) has RocksDB compact what
   the replay left in level 0 in the background
   (:meth:`~statestore.stores.engine.RocksDBEngine.compact_level0`), reports a
   :class:`RestoreResult`;
3. :attr:`RestorePlan.hold_cleaning_barrier` tells the change-logging layer
   whether to keep the cleaning barrier at RocksDB's durable applied offset
   while the store is open.

Two paths, one result (tests prove the state is identical):

* **full** (the default): delete the RocksDB directory, open a fresh one and
  replay the changelog from its log start offset;
* **incremental**: keep RocksDB and replay from the applied offset stored in it
  (written in the same ``WriteBatch`` as the data it covers).  A RocksDB
  directory with data but no offset is rebuilt from scratch, with a warning.

Cross-check (both modes, :func:`check_applied_offset`): RocksDB's durable
applied offset is evidence of what the changelog held, so before anything is
deleted it is held against the log start, log end and recovery point:

====================================  =====================================================
applied offset ``A``                  verdict
====================================  =====================================================
``A > log end`` (one fsync per        :class:`~statestore.errors.AppliedOffsetMismatchError`:
append, the default)                  the changelog lost records RocksDB applied; nothing changed
``A > log end`` (``flush_messages``   rebuild with a warning: the looser policy's documented
> 1)                                  power-loss window
``A < log start``, ``delete`` in the  incremental: rebuild with a warning (retention removed
policy                                records; Kafka Streams resets likewise); full: harmless
``A < log start``, ``compact`` only   incremental: ``AppliedOffsetMismatchError`` (only
                                      retention moves the log start, and the cleaning barrier
                                      kept the cleaner above ``A``); full: harmless (a stale
                                      RocksDB, deleted anyway)
``recovery point <= A <= log end``    harmless: RocksDB flushed after the log's last
                                      recovery-point checkpoint (normal after a crash)
``log start <= A <= log end``         consistent: replay from ``A`` (incremental)
====================================  =====================================================

Replay moves bytes only: values are never decoded.  Records are applied in
``WriteBatch`` es of about ``restore_batch_records`` records or
``restore_batch_bytes`` bytes, whichever comes first (whole log batches), with the
WAL off, each carrying the applied offset it reaches; at the end the applied offset is the log end
offset read when the restore started (gaps at the end of a compacted log are
covered), and RocksDB is flushed so the restored state is durable.

Listeners follow Kafka Streams' ``StateRestoreListener``: ``on_restore_start``,
``on_batch_restored`` (after each WriteBatch) and ``on_restore_end``, with
offsets and counts; a progress hook receives a :class:`RestoreProgress` after
each WriteBatch.

Thread-safety: functions run on the caller's thread; nothing else may use the
engine or append to the changelog while a restore runs (the store is in state
``restoring``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import attrs

from changelog import ChangelogError, Log, LogConfig
from changelog.log.log import LocatedBatch
from changelog.record.batch import decode_key_values, decode_record_tuples, key_value_pairs
from statestore.config import RestoreMode
from statestore.errors import AppliedOffsetMismatchError, RestoreError, StoreEngineError
from statestore.stores.engine import RocksDBEngine
from statestore.stores.time.layout import RecordFormat, restored_pairs

__all__ = [
    "DataBatches",
    "ProgressHook",
    "RestorePlan",
    "RestoreProgress",
    "RestoreResult",
    "StateRestoreListener",
    "check_applied_offset",
    "open_engine",
    "plan_restore",
    "read_data_batches",
    "replay",
    "restore_into",
]

logger = logging.getLogger(__name__)

DataBatches = Callable[[int], Iterator[LocatedBatch]]
"""``read(start_offset)``: ``(file, position, header, batch bytes)`` of the batches from
``start_offset`` on (the file and position name a batch whose records do not decode)."""


class StateRestoreListener(Protocol):
    """Told about each partition restore (Kafka Streams' ``StateRestoreListener``)."""

    def on_restore_start(
        self, store: str, partition: int, start_offset: int, end_offset: int
    ) -> None:
        """Replay of ``[start_offset, end_offset)`` is about to begin."""
        ...

    def on_batch_restored(
        self, store: str, partition: int, batch_end_offset: int, num_restored: int
    ) -> None:
        """A WriteBatch of ``num_restored`` records up to ``batch_end_offset`` (inclusive) was applied."""
        ...

    def on_restore_end(self, store: str, partition: int, total_restored: int) -> None:
        """Replay finished after ``total_restored`` records."""
        ...


@attrs.frozen(kw_only=True)
class RestoreProgress:
    """Where a partition restore stands (handed to the progress hook after each WriteBatch).

    Immutable; thread-safe."""

    store: str
    partition: int
    start_offset: int
    end_offset: int
    offset: int
    """Next offset to restore."""
    records_restored: int

    @property
    def fraction(self) -> float:
        """Share of the offset range done, in ``[0, 1]``."""
        span = self.end_offset - self.start_offset
        return 1.0 if span <= 0 else min(1.0, (self.offset - self.start_offset) / span)


ProgressHook = Callable[[RestoreProgress], None]


@attrs.frozen(kw_only=True)
class RestorePlan:
    """Where a restore starts and whether RocksDB must be rebuilt first.

    Immutable; thread-safe."""

    mode: RestoreMode
    start_offset: int
    rebuild: bool
    reason: str

    @property
    def hold_cleaning_barrier(self) -> bool:
        """Whether the store holds the changelog's cleaning barrier (incremental restore only).

        A later incremental restore replays from RocksDB's durable applied
        offset, so the cleaner must keep every tombstone above it; a full
        restore replays from the log start and needs no barrier.
        """
        return self.mode == "incremental"


@attrs.frozen(kw_only=True)
class RestoreResult:
    """What one partition restore did.

    Immutable; thread-safe."""

    mode: RestoreMode
    rebuilt: bool
    start_offset: int
    end_offset: int
    records_restored: int
    seconds: float
    records_expired: int = 0
    """Of ``records_restored``, values that had expired at restore time and were applied as
    deletes (a store with a TTL)."""


def plan_restore(
    mode: RestoreMode,
    *,
    applied_offset: int | None,
    has_data: bool,
    log_start_offset: int,
    log_end_offset: int,
) -> RestorePlan:
    """Decide where to start replaying, like Kafka Streams' ``StoreChangelogReader``.

    ``applied_offset`` is the next offset RocksDB has not applied (``None``:
    never written); ``has_data`` whether RocksDB holds any entry.
    """
    if mode == "full":
        return RestorePlan(
            mode=mode, start_offset=log_start_offset, rebuild=True, reason="full restore"
        )
    if applied_offset is None:
        if has_data:
            return RestorePlan(
                mode=mode,
                start_offset=log_start_offset,
                rebuild=True,
                reason="RocksDB holds data but no applied offset",
            )
        return RestorePlan(
            mode=mode, start_offset=log_start_offset, rebuild=False, reason="empty store"
        )
    if applied_offset > log_end_offset:
        return RestorePlan(
            mode=mode,
            start_offset=log_start_offset,
            rebuild=True,
            reason=f"applied offset {applied_offset} is beyond the log end offset {log_end_offset}",
        )
    if applied_offset < log_start_offset:
        return RestorePlan(
            mode=mode,
            start_offset=log_start_offset,
            rebuild=True,
            reason=f"applied offset {applied_offset} is below the log start offset {log_start_offset}",
        )
    return RestorePlan(mode=mode, start_offset=applied_offset, rebuild=False, reason="incremental")


def check_applied_offset(
    mode: RestoreMode,
    applied_offset: int | None,
    *,
    log_start_offset: int,
    log_end_offset: int,
    recovery_point: int,
    config: LogConfig,
    store: str,
    partition: int,
) -> str | None:
    """The cross-check of the module docstring: ``None`` when RocksDB's durable applied
    offset fits the log, a warning when it does not but that is explained and
    harmless, :class:`~statestore.errors.AppliedOffsetMismatchError` when it is
    implausible (then nothing has been changed).
    """
    if applied_offset is None or log_start_offset <= applied_offset <= log_end_offset:
        return None

    def refuse(reason: str) -> AppliedOffsetMismatchError:
        return AppliedOffsetMismatchError(
            store,
            partition,
            applied_offset=applied_offset,
            log_start_offset=log_start_offset,
            log_end_offset=log_end_offset,
            recovery_point=recovery_point,
            reason=reason,
        )

    if applied_offset > log_end_offset:
        if config.flush_messages == 1:
            raise refuse(
                "the changelog ends before offsets RocksDB has applied, although every "
                "append was fsynced (flush_messages=1): records acknowledged to the "
                "application are missing from the changelog"
            )
        return (
            f"applied offset {applied_offset} is beyond the log end offset {log_end_offset}: "
            f"with flush_messages={config.flush_messages} a power cut may lose the "
            "changelog's unflushed tail (documented); RocksDB is rebuilt from the changelog"
        )
    if mode == "full":
        return None  # a stale RocksDB below the log start: deleted by the full restore anyway
    if config.delete:
        return (
            f"applied offset {applied_offset} is below the log start offset "
            f"{log_start_offset}: retention (cleanup_policy={config.cleanup_policy}) removed "
            "records RocksDB had not applied; RocksDB is rebuilt from the log start"
        )
    raise refuse(
        "the log starts after offsets RocksDB has not applied, but with "
        f"cleanup_policy={config.cleanup_policy} only retention could move the log start "
        "and the cleaning barrier kept the cleaner above the applied offset: records are "
        "missing from the start of the changelog"
    )


class _NullListener:
    """Listens to nothing (stateless, thread-safe)."""

    def on_restore_start(self, store: str, partition: int, start: int, end: int) -> None:
        pass

    def on_batch_restored(self, store: str, partition: int, end: int, count: int) -> None:
        pass

    def on_restore_end(self, store: str, partition: int, total: int) -> None:
        pass


def replay(
    read: DataBatches,
    engine: RocksDBEngine,
    *,
    path: Path | str,
    store: str,
    partition: int,
    start_offset: int,
    end_offset: int,
    batch_records: int,
    batch_bytes: int | None = None,
    listener: StateRestoreListener | None = None,
    progress: ProgressHook | None = None,
    record_format: RecordFormat = "plain",
    expiry_cutoff_ms: int | None = None,
    expired: list[int] | None = None,
) -> int:
    """Apply the changelog records in ``[start_offset, end_offset)`` to ``engine``; returns the count.

    ``record_format`` other than ``plain`` (:mod:`statestore.stores.time.layout`):
    each record's CreateTime goes back into the RocksDB entry (in front of the
    value, or after the key of a versioned store).  ``expiry_cutoff_ms`` (a
    store with a TTL): a value stamped at or before it is applied as a delete
    (:func:`~statestore.stores.time.layout.restored_pairs`); their number is
    appended to ``expired`` (when given) once the replay is done.

    Values are moved as bytes: the codec's record reader gives each log batch's
    ``(key, value)`` pairs (:func:`changelog.record.batch.key_value_pairs`) and
    :meth:`RocksDBEngine.write <statestore.stores.engine.RocksDBEngine.write>`
    fills the ``WriteBatch`` with them in key order, a repeated key's writes in
    log order (RocksDB's memtable takes sorted keys faster).
    A WriteBatch closes after the log batch that brings it to
    ``batch_records`` records or more, or to ``batch_bytes`` bytes of log
    batches or more (``None``: no byte bound), carrying the applied offset at that
    batch's end.  The last WriteBatch sets the applied offset to ``end_offset``
    even when no record is left there (a compacted or empty tail), and the
    engine is flushed at the end.  ``path`` names the partition in errors; a batch
    whose records do not decode is named by its ``.log`` file and position.
    """
    label = f"[{store}-{partition}]"
    listen = listener if listener is not None else _NullListener()
    listen.on_restore_start(store, partition, start_offset, end_offset)
    restored = 0
    expired_count = 0
    pairs: list[tuple[bytes | None, bytes | None]] = []
    pending_bytes = 0  # of the log batches in ``pairs``: one len() per log batch
    byte_bound = batch_bytes if batch_bytes is not None else float("inf")
    next_offset = start_offset
    try:
        if start_offset < end_offset:
            for file, position, header, data in read(start_offset):
                if header.is_control:
                    continue
                if record_format != "plain":
                    decoded, expired_here = _timestamped_pairs(
                        record_format,
                        data,
                        file,
                        position,
                        start_offset,
                        end=end_offset,
                        expiry_cutoff_ms=expiry_cutoff_ms,
                    )
                    expired_count += expired_here
                    pairs += decoded
                elif header.base_offset < start_offset or header.last_offset >= end_offset:
                    pairs += _pairs_in_range(data, file, position, start_offset, end_offset)
                else:  # the common case: the whole batch
                    pairs += key_value_pairs(data, path=file, position=position, validate=False)
                next_offset = min(header.next_offset, end_offset)
                pending_bytes += len(data)
                if len(pairs) >= batch_records or pending_bytes >= byte_bound:
                    _write(engine, pairs, next_offset, store, partition)
                    restored += len(pairs)
                    listen.on_batch_restored(store, partition, next_offset - 1, len(pairs))
                    if progress is not None:
                        progress(
                            RestoreProgress(
                                store=store,
                                partition=partition,
                                start_offset=start_offset,
                                end_offset=end_offset,
                                offset=next_offset,
                                records_restored=restored,
                            )
                        )
                    pairs = []
                    pending_bytes = 0
                if next_offset >= end_offset:
                    break
        _write(engine, pairs, end_offset, store, partition)
    except ChangelogError as exc:
        found = getattr(exc, "offset", None)  # the first offset the damage affects (verify's)
        at = next_offset if found is None else found
        damaged = getattr(exc, "path", None)
        raise RestoreError(
            store,
            partition,
            at,
            str(exc),
            path=None if damaged is None else Path(damaged),
            position=getattr(exc, "position", None),
        ) from exc
    except (KeyError, TypeError) as exc:  # a record without a key (not written by a store)
        # rocksdict's raw-mode WriteBatch raises KeyError for a None key.
        raise RestoreError(
            store, partition, next_offset, f"changelog record without a key: {exc}"
        ) from exc
    if pairs:
        restored += len(pairs)
        listen.on_batch_restored(store, partition, next_offset - 1, len(pairs))
    if progress is not None:
        progress(
            RestoreProgress(
                store=store,
                partition=partition,
                start_offset=start_offset,
                end_offset=end_offset,
                offset=end_offset,
                records_restored=restored,
            )
        )
    engine.flush()
    if expired is not None:
        expired.append(expired_count)
    listen.on_restore_end(store, partition, restored)
    logger.debug("%s replayed %s records of [%s, %s)", label, restored, start_offset, end_offset)
    return restored


def _pairs_in_range(
    data: bytes, path: Path, position: int, start: int, end: int
) -> list[tuple[bytes | None, bytes | None]]:
    """The ``(key, value)`` of the records of ``data`` (at ``position`` of ``path``) with
    ``start <= offset < end`` (a batch on a bound)."""
    return [
        (key, value)
        for offset, key, value in decode_key_values(
            data, path=path, position=position, validate=False
        )
        if start <= offset < end
    ]


def _timestamped_pairs(
    record_format: RecordFormat,
    data: bytes,
    path: Path,
    position: int,
    start: int,
    *,
    end: int,
    expiry_cutoff_ms: int | None = None,
) -> tuple[list[tuple[bytes | None, bytes | None]], int]:
    """A store in time's RocksDB entries from the records of ``data`` (at ``position`` of
    ``path``) in ``[start, end)``, each record's timestamp put back (see ``record_format``),
    and how many of them expired (values stamped at or before ``expiry_cutoff_ms``)."""
    records = [
        (key, stamp, value)
        for offset, stamp, key, value, _headers in decode_record_tuples(
            data, path=path, position=position, validate=False
        )
        if start <= offset < end
    ]
    expired = (
        0
        if expiry_cutoff_ms is None
        else sum(
            1 for _k, stamp, value in records if value is not None and stamp <= expiry_cutoff_ms
        )
    )
    return restored_pairs(record_format, records, expiry_cutoff_ms=expiry_cutoff_ms), expired


def _write(
    engine: RocksDBEngine,
    pairs: list[tuple[bytes | None, bytes | None]],
    applied_offset: int,
    store: str,
    partition: int,
) -> None:
    try:
        engine.write(pairs, applied_offset)  # type: ignore[arg-type]  # a None key: KeyError
    except StoreEngineError as exc:
        raise RestoreError(store, partition, applied_offset, str(exc)) from exc


def read_data_batches(log: Log) -> DataBatches:
    """``read(start)`` over ``log``: ``(file, position, header, batch bytes)`` of every batch
    from ``start`` on.

    CRC-checked by the log; the first batch may start before ``start`` (replay
    skips its earlier records).
    """

    def read(start_offset: int) -> Iterator[LocatedBatch]:
        return log.read_located_batches(start_offset)

    return read


def open_engine(
    mode: RestoreMode,
    log: Log,
    *,
    open_: Callable[[], RocksDBEngine],
    destroy: Callable[[], None],
    label: str,
    exists: Callable[[], bool] | None = None,
    rebuild_reason: str | None = None,
    cross_check: bool = True,
    store: str = "",
    partition: int = 0,
) -> tuple[RocksDBEngine, RestorePlan]:
    """Step 1: the engine to replay ``log`` into, opened by ``open_``, and the plan.

    First the cross-check (:func:`check_applied_offset`) of RocksDB's applied
    offset, read from the existing RocksDB (``exists()``; in ``full`` mode too,
    before anything is deleted): an implausible one raises and nothing changes.
    ``full``: ``destroy`` the RocksDB directory, then open it empty.
    ``incremental``: keep it unless :func:`plan_restore` says to rebuild, the
    cross-check explains a rebuild, or ``rebuild_reason`` is given (a restore-mode
    switch): then it is closed, destroyed and opened empty, with a warning.  On an
    error nothing stays open.  ``cross_check=False`` (an operator's explicit
    rebuild, with ``rebuild_reason``) skips the cross-check: RocksDB is rebuilt
    from the changelog whatever it held.
    """
    log_start, log_end = log.log_start_offset, log.log_end_offset

    def check(applied: int | None) -> str | None:
        if not cross_check:
            return rebuild_reason
        return check_applied_offset(
            mode,
            applied,
            log_start_offset=log_start,
            log_end_offset=log_end,
            recovery_point=log.recovery_point,
            config=log.config,
            store=store,
            partition=partition,
        )

    if mode == "incremental":
        engine = open_()
        try:
            applied = engine.applied_offset()
            warning = check(applied) or rebuild_reason
            plan = plan_restore(
                mode,
                applied_offset=applied,
                has_data=not engine.is_empty(),
                log_start_offset=log_start,
                log_end_offset=log_end,
            )
        except BaseException:
            engine.close(flush=False)
            raise
        if warning is not None:
            plan = attrs.evolve(plan, start_offset=log_start, rebuild=True, reason=warning)
        if not plan.rebuild:
            return engine, plan
        logger.warning("%s rebuilding RocksDB from the changelog: %s", label, plan.reason)
        engine.close(flush=False)
    else:
        if cross_check and exists is not None and exists():
            try:
                stale = open_()
            except StoreEngineError as exc:  # RocksDB is rebuilt anyway: no evidence to check
                logger.warning("%s old RocksDB unreadable, not cross-checked: %s", label, exc)
            else:
                try:
                    warning = check(stale.applied_offset())
                finally:
                    stale.close(flush=False)
                if warning is not None:
                    logger.warning("%s %s", label, warning)
        plan = plan_restore(
            mode,
            applied_offset=None,
            has_data=False,
            log_start_offset=log_start,
            log_end_offset=log_end,
        )
    destroy()
    return open_(), plan


def restore_into(
    engine: RocksDBEngine,
    log: Log,
    plan: RestorePlan,
    *,
    store: str,
    partition: int,
    batch_records: int,
    listener: StateRestoreListener | None,
    progress: ProgressHook | None,
    record_format: RecordFormat = "plain",
    batch_bytes: int | None = None,
) -> RestoreResult:
    """Step 2: replay ``log`` from ``plan.start_offset`` to its log end offset into ``engine``.

    ``record_format`` as in :func:`replay`.  A log with ``record_ttl_ms``
    (a store with a TTL) replays with the expiry cutoff ``log.clock() -
    record_ttl_ms``: what has expired by then is applied as a delete.

    While the plan holds the cleaning barrier, the barrier sits at the start
    offset during the replay (until the restored state is flushed, only what
    RocksDB held at open is durable) and at the log end offset after it.
    """
    started = time.monotonic()
    # The last stable offset: the transaction coordinator ends every transaction left
    # open before a partition restores (statestore.txn, R1-R3), so it is the log end
    # offset; were one still open, RocksDB must not record its data as applied.
    log_end = log.last_stable_offset
    if plan.hold_cleaning_barrier:
        log.cleaning_barrier_offset = plan.start_offset
    ttl_ms = log.config.record_ttl_ms
    expired: list[int] = []
    restored = replay(
        read_data_batches(log),
        engine,
        path=log.dir,
        store=store,
        partition=partition,
        start_offset=plan.start_offset,
        end_offset=log_end,
        batch_records=batch_records,
        batch_bytes=batch_bytes,
        listener=listener,
        progress=progress,
        record_format=record_format,
        expiry_cutoff_ms=log.clock() - ttl_ms if ttl_ms else None,
        expired=expired,
    )
    if plan.hold_cleaning_barrier:
        log.cleaning_barrier_offset = log_end
    if plan.rebuild:
        engine.compact_level0()  # in the background: see RocksDBEngine.compact_level0
    result = RestoreResult(
        mode=plan.mode,
        rebuilt=plan.rebuild,
        start_offset=plan.start_offset,
        end_offset=log_end,
        records_restored=restored,
        seconds=time.monotonic() - started,
        records_expired=sum(expired),
    )
    logger.info(
        "[%s-%s] restored %s records from offset %s to %s in %.3fs (%s)",
        store,
        partition,
        restored,
        plan.start_offset,
        log_end,
        result.seconds,
        plan.reason,
    )
    return result
