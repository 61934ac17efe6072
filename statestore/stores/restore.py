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
``WriteBatch`` es of ``restore_batch_records`` with the WAL off, each carrying
the applied offset it reaches; at the end the applied offset is the log end
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

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Final, Protocol

import attrs

from changelog import ChangelogError, Log
from changelog.record.batch import decode_key_values
from statestore.config import RestoreMode
from statestore.errors import RestoreError, StoreEngineError
from statestore.stores.engine import RocksDBEngine

__all__ = [
    "KeyValueBatches",
    "ProgressHook",
    "RestorePlan",
    "RestoreProgress",
    "RestoreResult",
    "StateRestoreListener",
    "open_engine",
    "plan_restore",
    "read_key_value_batches",
    "replay",
    "restore_into",
]

logger = logging.getLogger(__name__)

KeyValueBatches = Callable[[int], Iterator[list[tuple[int, bytes | None, bytes | None]]]]
"""``read(start_offset)``: lists of ``(offset, key, value)`` from ``start_offset`` to the end."""


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
    read: KeyValueBatches,
    engine: RocksDBEngine,
    *,
    store: str,
    partition: int,
    start_offset: int,
    end_offset: int,
    batch_records: int,
    listener: StateRestoreListener | None = None,
    progress: ProgressHook | None = None,
) -> int:
    """Apply the changelog records in ``[start_offset, end_offset)`` to ``engine``; returns the count.

    Values are moved as bytes.  The last WriteBatch sets the applied offset to
    ``end_offset`` even when no record is left there (a compacted or empty
    tail), and the engine is flushed at the end.
    """
    label = f"[{store}-{partition}]"
    listen = listener if listener is not None else _NullListener()
    listen.on_restore_start(store, partition, start_offset, end_offset)
    restored = 0
    # Decoded batches waiting for the next WriteBatch, kept as the lists ``read`` made:
    # no per-record copy here, the engine's WriteBatch loop is the only Python-level
    # pass over them (``map(itemgetter)`` over ``chain`` runs in C).
    pending: list[list[tuple[int, bytes | None, bytes | None]]] = []
    pending_count = 0
    next_offset = start_offset
    try:
        if start_offset < end_offset:
            for entries in read(start_offset):
                if not entries:
                    continue
                last = entries[-1][0]
                if last >= end_offset:
                    entries = [entry for entry in entries if entry[0] < end_offset]  # noqa: PLW2901
                    if not entries:
                        break
                    last = entries[-1][0]
                pending.append(entries)
                pending_count += len(entries)
                next_offset = last + 1
                if pending_count >= batch_records:
                    _apply(engine, _pairs(pending), next_offset, store, partition)
                    restored += pending_count
                    listen.on_batch_restored(store, partition, next_offset - 1, pending_count)
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
                    pending = []
                    pending_count = 0
                if next_offset >= end_offset:
                    break
    except ChangelogError as exc:
        raise RestoreError(store, partition, next_offset, str(exc)) from exc
    _apply(engine, _pairs(pending), end_offset, store, partition)
    if pending_count:
        restored += pending_count
        listen.on_batch_restored(store, partition, next_offset - 1, pending_count)
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


_KEY_VALUE: Final = itemgetter(1, 2)  # of an (offset, key, value) entry


def _pairs(
    batches: list[list[tuple[int, bytes | None, bytes | None]]],
) -> Iterator[tuple[bytes, bytes | None]]:
    """``(key, value)`` of every entry, lazily and without a Python-level loop."""
    return map(_KEY_VALUE, itertools.chain.from_iterable(batches))


def _apply(
    engine: RocksDBEngine,
    pairs: Iterable[tuple[bytes, bytes | None]],
    applied_offset: int,
    store: str,
    partition: int,
) -> None:
    try:
        engine.write(pairs, applied_offset)
    except (KeyError, TypeError) as exc:  # a record without a key (not written by a store)
        # rocksdict's raw-mode WriteBatch raises KeyError for a None key.
        raise RestoreError(
            store, partition, applied_offset, f"changelog record without a key: {exc}"
        ) from exc
    except StoreEngineError as exc:
        raise RestoreError(store, partition, applied_offset, str(exc)) from exc


def read_key_value_batches(log: Log) -> KeyValueBatches:
    """``read(start)`` over ``log``: ``(offset, key, value)`` lists, one per data batch, values as bytes."""

    def read(start_offset: int) -> Iterator[list[tuple[int, bytes | None, bytes | None]]]:
        for header, data in log.read_batches(start_offset):
            if header.is_control:
                continue
            # read_batches has CRC-checked the batch; it does not say where the batch
            # sits in its file, so errors name the partition directory (position -1).
            entries = decode_key_values(data, path=log.dir, position=-1, validate=False)
            if header.base_offset < start_offset:
                entries = [entry for entry in entries if entry[0] >= start_offset]
            yield entries

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
    log_end = log.log_end_offset
    if plan.hold_cleaning_barrier:
        log.cleaning_barrier_offset = plan.start_offset
    restored = replay(
        read_key_value_batches(log),
        engine,
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
