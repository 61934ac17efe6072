"""The one place where a store's layers are put together, in order: typed -> (partitioned) -> logged -> engine.

:func:`build_store` opens each partition's changelog and RocksDB, restores the
partition (full or incremental, see :mod:`statestore.restore`), wraps the
partitions in a router when there are several, and puts the typed store on
top.  Nothing else constructs these layers.

Directory names (Kafka Streams' shape, flattened into one state directory):
the changelog of partition ``p`` of store ``s`` is ``<state_dir>/s-changelog-p``
(a Kafka partition directory of topic ``s-changelog``) and its RocksDB is
``<state_dir>/s-rocksdb-p``, side by side.

Thread-safety: a plain function; the manager calls it under its own lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from changelog.config import LogConfig
from changelog.log import Log
from changelog.record.batch import decode_key_values
from statestore.bytes_store import BytesStore, StoreState
from statestore.config import RocksDBConfig, StoreConfig
from statestore.engine import RocksDBEngine
from statestore.logged import LoggedPartition
from statestore.partitioned import PartitionedStore
from statestore.restore import (
    ProgressHook,
    RestoreResult,
    StateRestoreListener,
    plan_restore,
    replay,
)
from statestore.serdes import Serde
from statestore.store import KeyValueStore

__all__ = ["RECORD_OVERHEAD_BYTES", "build_store", "changelog_dir", "rocksdb_dir"]

logger = logging.getLogger(__name__)

RECORD_OVERHEAD_BYTES: Final = 61 + 32
"""Batch header (61 bytes) plus the most a single record's framing can take (varints, attributes)."""


def changelog_dir(state_dir: Path, store: str, partition: int) -> Path:
    """``<state_dir>/<store>-changelog-<partition>``."""
    return state_dir / f"{store}-changelog-{partition}"


def rocksdb_dir(state_dir: Path, store: str, partition: int) -> Path:
    """``<state_dir>/<store>-rocksdb-<partition>``."""
    return state_dir / f"{store}-rocksdb-{partition}"


def _key_value_batches(
    log: Log,
) -> Callable[[int], Iterator[list[tuple[int, bytes | None, bytes | None]]]]:
    """``read(start)`` yielding ``(offset, key, value)`` lists, one per data batch, values as bytes."""

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


def _restore_partition(
    *,
    name: str,
    partition: int,
    log: Log,
    engine_path: Path,
    rocksdb: RocksDBConfig,
    cache: Any,
    config: StoreConfig,
    listener: StateRestoreListener | None,
    progress: ProgressHook | None,
) -> tuple[RocksDBEngine, RestoreResult]:
    label = f"[{name}-{partition}]"
    started = time.monotonic()
    log_start, log_end = log.log_start_offset, log.log_end_offset
    engine: RocksDBEngine | None = None
    if config.restore_mode == "incremental":
        engine = RocksDBEngine.open(engine_path, config=rocksdb, cache=cache, label=label)
        applied = engine.applied_offset()
        has_data = next(engine.items(), None) is not None
        plan = plan_restore(
            "incremental",
            applied_offset=applied,
            has_data=has_data,
            log_start_offset=log_start,
            log_end_offset=log_end,
        )
        if plan.rebuild:
            logger.warning("%s rebuilding RocksDB from the changelog: %s", label, plan.reason)
            engine.close(flush=False)
            engine = None
    else:
        plan = plan_restore(
            "full",
            applied_offset=None,
            has_data=False,
            log_start_offset=log_start,
            log_end_offset=log_end,
        )
    if engine is None:
        RocksDBEngine.destroy(engine_path)
        engine = RocksDBEngine.open(engine_path, config=rocksdb, cache=cache, label=label)
    try:
        if config.restore_mode == "incremental":
            # Until the restored state is flushed, only what RocksDB held at open is durable.
            log.cleaning_barrier_offset = plan.start_offset
        restored = replay(
            _key_value_batches(log),
            engine,
            store=name,
            partition=partition,
            start_offset=plan.start_offset,
            end_offset=log_end,
            batch_records=config.restore_batch_records,
            listener=listener,
            progress=progress,
        )
        if config.restore_mode == "incremental":
            log.cleaning_barrier_offset = log_end
    except BaseException:
        engine.close(flush=False)
        raise
    result = RestoreResult(
        mode=config.restore_mode,
        rebuilt=plan.rebuild,
        start_offset=plan.start_offset,
        end_offset=log_end,
        records_restored=restored,
        seconds=time.monotonic() - started,
    )
    logger.info(
        "%s restored %s records from offset %s to %s in %.3fs (%s)",
        label,
        restored,
        plan.start_offset,
        log_end,
        result.seconds,
        plan.reason,
    )
    return engine, result


def build_store(
    *,
    state_dir: Path,
    name: str,
    partitions: int,
    key_serde: Serde[Any],
    value_serde: Serde[Any],
    log_config: LogConfig,
    rocksdb: RocksDBConfig,
    config: StoreConfig,
    cache: Any,
    clock: Callable[[], int] | None,
    listener: StateRestoreListener | None = None,
    progress: ProgressHook | None = None,
) -> tuple[KeyValueStore[Any, Any], list[RestoreResult]]:
    """Open, restore and wrap every partition of store ``name``; the store is returned open.

    On any failure every log and engine opened so far is closed again and the
    error propagates.
    """
    store: KeyValueStore[Any, Any] = KeyValueStore(
        name=name,
        key_serde=key_serde,
        value_serde=value_serde,
        max_record_bytes=log_config.max_message_bytes - RECORD_OVERHEAD_BYTES,
    )
    store._set_state(StoreState.RESTORING)
    logs: list[Log] = []
    parts: list[LoggedPartition] = []
    results: list[RestoreResult] = []
    try:
        for partition in range(partitions):
            log = Log.open(
                changelog_dir(state_dir, name, partition), config=log_config, clock=clock
            )
            logs.append(log)
            engine, result = _restore_partition(
                name=name,
                partition=partition,
                log=log,
                engine_path=rocksdb_dir(state_dir, name, partition),
                rocksdb=rocksdb,
                cache=cache,
                config=config,
                listener=listener,
                progress=progress,
            )
            results.append(result)
            parts.append(
                LoggedPartition(
                    store=name,
                    partition=partition,
                    changelog=log,
                    engine=engine,
                    flush_interval_records=config.flush_interval_records,
                    hold_cleaning_barrier=config.restore_mode == "incremental",
                )
            )
    except BaseException:
        store._set_state(StoreState.FAILED)
        for part in parts:
            _quietly(part.close)
        for log in logs:
            _quietly(log.close)
        raise
    inner: BytesStore = parts[0] if partitions == 1 else PartitionedStore(parts)
    store._attach(inner, logs)
    return store, results


def _quietly(close: Callable[[], object]) -> None:
    try:
        close()
    except Exception:
        logger.exception("error while closing after a failed open")
