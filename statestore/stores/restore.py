"""Restore policy and replay: the one module that knows ``full`` from ``incremental``.

Every decision that depends on :attr:`StoreConfig.restore_mode
<statestore.config.StoreConfig.restore_mode>` is made here (the builder and the
layers only carry a :class:`RestorePlan`):

1. :func:`open_engine` opens the RocksDB engine to replay into (full: deleted
   and created empty; incremental: kept, rebuilt when :func:`plan_restore`
   says its applied offset does not belong to the log) and returns the plan;
2. :func:`restore_into` runs the plan: holds the cleaning barrier (incremental
   only), :func:`replay` s the changelog, reports a :class:`RestoreResult`;
3. :attr:`RestorePlan.hold_cleaning_barrier` tells the change-logging layer
   whether to keep the cleaning barrier at RocksDB's durable applied offset
   while the store is open.

Two paths, one result (tests prove the state is identical):

* **full** (the default): delete the RocksDB directory, open a fresh one and
  replay the changelog from its log start offset;
* **incremental**: keep RocksDB and replay from the applied offset stored in it
  (written in the same ``WriteBatch`` as the data it covers).  A stored offset
  below the log start offset or above the log end offset means the two no
  longer belong together (the log was replaced, truncated or restored from
  elsewhere): the store is rebuilt from scratch, with a warning.  A RocksDB
  directory with data but no offset is rebuilt likewise.

Replay moves bytes only: values are never decoded.  Records are applied in
``WriteBatch`` es of about ``restore_batch_records`` (whole log batches) with the
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
from typing import Any, Protocol

import attrs

from changelog import ChangelogError, Log
from changelog.record.batch import BatchHeader, apply_key_values, decode_key_values
from statestore.config import RestoreMode
from statestore.errors import RestoreError, StoreEngineError
from statestore.stores.engine import RocksDBEngine

__all__ = [
    "DataBatches",
    "ProgressHook",
    "RestorePlan",
    "RestoreProgress",
    "RestoreResult",
    "StateRestoreListener",
    "open_engine",
    "plan_restore",
    "read_data_batches",
    "replay",
    "restore_into",
]

logger = logging.getLogger(__name__)

DataBatches = Callable[[int], Iterator[tuple[BatchHeader, bytes]]]
"""``read(start_offset)``: ``(header, batch bytes)`` of the batches from ``start_offset`` on."""


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
    listener: StateRestoreListener | None = None,
    progress: ProgressHook | None = None,
) -> int:
    """Apply the changelog records in ``[start_offset, end_offset)`` to ``engine``; returns the count.

    Values are moved as bytes, in one pass per record: the codec's record reader
    hands each record straight to the WriteBatch's ``put``/``delete``
    (:func:`changelog.record.batch.apply_key_values`), with no list of pairs in
    between.  A WriteBatch closes after the log batch that brings it to
    ``batch_records`` records or more, carrying the applied offset at that
    batch's end.  The last WriteBatch sets the applied offset to ``end_offset``
    even when no record is left there (a compacted or empty tail), and the
    engine is flushed at the end.  ``path`` names the partition in errors.
    """
    label = f"[{store}-{partition}]"
    listen = listener if listener is not None else _NullListener()
    listen.on_restore_start(store, partition, start_offset, end_offset)
    restored = 0
    batch = engine.new_write_batch()
    in_batch = 0
    next_offset = start_offset
    try:
        if start_offset < end_offset:
            for header, data in read(start_offset):
                if header.is_control:
                    continue
                if header.base_offset < start_offset or header.last_offset >= end_offset:
                    count = _apply_range(batch, data, path, start_offset, end_offset)
                else:  # the common case: one pass, records straight into the WriteBatch
                    count = apply_key_values(
                        data, batch.put, batch.delete, path=path, position=-1, validate=False
                    )
                in_batch += count
                next_offset = min(header.next_offset, end_offset)
                if in_batch >= batch_records:
                    _write(engine, batch, next_offset, store, partition)
                    restored += in_batch
                    listen.on_batch_restored(store, partition, next_offset - 1, in_batch)
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
                    batch = engine.new_write_batch()
                    in_batch = 0
                if next_offset >= end_offset:
                    break
    except ChangelogError as exc:
        raise RestoreError(store, partition, next_offset, str(exc)) from exc
    except (KeyError, TypeError) as exc:  # a record without a key (not written by a store)
        # rocksdict's raw-mode WriteBatch raises KeyError for a None key.
        raise RestoreError(
            store, partition, next_offset, f"changelog record without a key: {exc}"
        ) from exc
    _write(engine, batch, end_offset, store, partition)
    if in_batch:
        restored += in_batch
        listen.on_batch_restored(store, partition, next_offset - 1, in_batch)
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
    listen.on_restore_end(store, partition, restored)
    logger.debug("%s replayed %s records of [%s, %s)", label, restored, start_offset, end_offset)
    return restored


def _apply_range(batch: Any, data: bytes, path: Path | str, start: int, end: int) -> int:
    """Put/delete the records of ``data`` with ``start <= offset < end`` (a batch on a bound)."""
    count = 0
    for offset, key, value in decode_key_values(data, path=path, position=-1, validate=False):
        if start <= offset < end:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
            count += 1
    return count


def _write(
    engine: RocksDBEngine, batch: Any, applied_offset: int, store: str, partition: int
) -> None:
    try:
        engine.write_batch(batch, applied_offset)
    except StoreEngineError as exc:
        raise RestoreError(store, partition, applied_offset, str(exc)) from exc


def read_data_batches(log: Log) -> DataBatches:
    """``read(start)`` over ``log``: ``(header, batch bytes)`` of every batch from ``start`` on.

    CRC-checked by the log; the first batch may start before ``start`` (replay
    skips its earlier records).
    """

    def read(start_offset: int) -> Iterator[tuple[BatchHeader, bytes]]:
        return log.read_batches(start_offset)

    return read


def open_engine(
    mode: RestoreMode,
    log: Log,
    *,
    open_: Callable[[], RocksDBEngine],
    destroy: Callable[[], None],
    label: str,
) -> tuple[RocksDBEngine, RestorePlan]:
    """Step 1: the engine to replay ``log`` into, opened by ``open_``, and the plan.

    ``full``: ``destroy`` the RocksDB directory, then open it empty.
    ``incremental``: open it, read its applied offset and whether it holds
    data, and keep it unless :func:`plan_restore` says to rebuild (then it is
    closed, destroyed and opened empty, with a warning).  On an error nothing
    stays open.
    """
    log_start, log_end = log.log_start_offset, log.log_end_offset
    if mode == "incremental":
        engine = open_()
        try:
            plan = plan_restore(
                mode,
                applied_offset=engine.applied_offset(),
                has_data=not engine.is_empty(),
                log_start_offset=log_start,
                log_end_offset=log_end,
            )
        except BaseException:
            engine.close(flush=False)
            raise
        if not plan.rebuild:
            return engine, plan
        logger.warning("%s rebuilding RocksDB from the changelog: %s", label, plan.reason)
        engine.close(flush=False)
    else:
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
) -> RestoreResult:
    """Step 2: replay ``log`` from ``plan.start_offset`` to its log end offset into ``engine``.

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
    restored = replay(
        read_data_batches(log),
        engine,
        path=log.dir,
        store=store,
        partition=partition,
        start_offset=plan.start_offset,
        end_offset=log_end,
        batch_records=batch_records,
        listener=listener,
        progress=progress,
    )
    if plan.hold_cleaning_barrier:
        log.cleaning_barrier_offset = log_end
    result = RestoreResult(
        mode=plan.mode,
        rebuilt=plan.rebuild,
        start_offset=plan.start_offset,
        end_offset=log_end,
        records_restored=restored,
        seconds=time.monotonic() - started,
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
