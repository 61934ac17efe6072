"""The one place where a store's layers are put together, from the inside out, in both modes.

:func:`build_store` builds a local store (steps 0-5 below);
:func:`wrap_partitions` (steps 4-5 and the top) is shared with distributed
mode (:mod:`statestore.kafka.store`), whose partitions differ only in their
change-logging layer: a changelog topic partition committed by the
processor's Kafka transaction instead of a local ``Log``.

For each partition ``p`` of a :class:`~statestore.stores.spec.StoreSpec`:

0. with metrics on, register the partition's metrics
   (:class:`~statestore.stores.metered.PartitionMetrics`), so that steps 1-3
   are recorded;
1. open the changelog :class:`~changelog.Log` (``<store>-changelog-<p>``),
   given the metrics' append observer, and
   let the transaction coordinator end every transaction left open in it
   (steps R1-R3 of :mod:`statestore.txn.coordinator`: roll forward what its
   log says is committed, abort the rest), so the restore sees no open one;
2. open the RocksDB engine as the restore policy says
   (:func:`statestore.stores.restore.open_engine`: full deletes it first,
   incremental keeps it when its applied offset belongs to the log); a window
   store's is a :class:`~statestore.stores.time.segments.SegmentedEngine`;
3. wrap log and engine in a :class:`~statestore.stores.change_logging.ChangeLoggingStore`,
   which owns both from here on (in the timestamped value format for a store in
   time, :attr:`StoreSpec.time <statestore.stores.spec.StoreSpec.time>`), and
   restore it (``created -> restoring -> open``);
4. wrap that in a :class:`~statestore.stores.buffer.WriteBuffer` (the
   writes of the current commit); in distributed mode a key-value store's
   change-logging layer is first wrapped in a record cache of committed values
   (:class:`~statestore.stores.caching.CachingStore`, :func:`wrap_partitions`);
5. with metrics on, wrap that in a :class:`~statestore.stores.metered.MeteredStore`
   (Kafka Streams' ``MeteredKeyValueStore``) over step 0's metrics.

Then route over the partitions with a
:class:`~statestore.stores.partitioned.PartitionedStore` when there are
several, and put the typed :class:`~statestore.stores.typed.KeyValueStore`
(serdes, once, at the top) on the result, with its
:class:`~statestore.stores.reader.StoreReader` (the committed state of the
partitions' engines, for other threads) beside it; for a store in time the typed
store takes raw bytes, and the store's own top layer (:mod:`statestore.stores.time`),
which the manager puts over it, serializes.  Each layer receives the finished
layer below it in its constructor and closes it in its ``close``; nothing
is attached later.  Nothing else constructs these layers.

Fast paths are granted here and nowhere else: the write buffer offers its
compiled put and get (:meth:`~statestore.stores.buffer.WriteBuffer.fast_path`),
and the typed store receives it in its constructor when the buffer is the
only partition and nothing between the two must see each put and get (no
metered layer, or one that records no per-operation metrics and so passes
them straight through).

A :class:`changelog.ChangelogError` of steps 1-3 leaves as a
:class:`~statestore.errors.ChangelogFailedError` (``raise ... from``, the
changelog error's file, position and offset copied).  On any failure
everything opened so far is closed again (the layer that owns
it closes it; before step 3, the builder closes the log itself) and the error
propagates: a refused open leaves no file handle or lock behind.

Thread-safety: a plain function; the manager calls it under its own lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changelog import AppendInfo, Log
from statestore.errors import changelog_errors
from statestore.metrics.registry import MetricsRegistry
from statestore.serdes import BytesSerde, Serde
from statestore.stores.buffer import WriteBuffer
from statestore.stores.bytes_store import BytesStore, ChangeLogging
from statestore.stores.caching import CachingStore
from statestore.stores.change_logging import ChangeLoggingStore
from statestore.stores.engine import RocksDBEngine
from statestore.stores.metered import MeteredStore, PartitionMetrics
from statestore.stores.partitioned import KeyRoute, PartitionedStore
from statestore.stores.reader import StoreReader
from statestore.stores.restore import ProgressHook, RestoreResult, StateRestoreListener, open_engine
from statestore.stores.spec import StoreSpec
from statestore.stores.time.layout import SuffixRoute
from statestore.stores.time.segments import SegmentedEngine
from statestore.stores.time.settings import TimeSettings
from statestore.stores.typed import KeyValueStore
from statestore.txn.coordinator import TransactionCoordinator
from statestore.txn.participant import Committer

if TYPE_CHECKING:
    from statestore.stores._put import Pending

__all__ = ["build_store", "partition_route", "wrap_partitions"]

logger = logging.getLogger(__name__)


def build_store(
    spec: StoreSpec,
    *,
    state_dir: Path,
    cache: Any,
    clock: Callable[[], int] | None,
    coordinator: TransactionCoordinator,
    listener: StateRestoreListener | None = None,
    progress: ProgressHook | None = None,
    metrics: MetricsRegistry | None = None,
    rebuild_reason: str | None = None,
    cross_check: bool = True,
) -> tuple[KeyValueStore[Any, Any], list[RestoreResult]]:
    """Open, restore and wrap every partition of ``spec``; the store is returned open.

    ``cache`` is the manager's shared RocksDB block cache (``None``: none),
    ``clock`` stamps changelog records (milliseconds; ``None``: wall clock).
    With ``metrics``, each partition's metrics are registered before its
    restore and a :class:`~statestore.stores.metered.MeteredStore` goes on
    its write buffer (step 5); on a failure they are unregistered again.
    ``rebuild_reason`` (a restore-mode switch, see :mod:`statestore.stores.metadata`)
    makes step 2 rebuild every partition's RocksDB from its changelog;
    ``cross_check=False`` (an operator's explicit rebuild) skips step 2's check
    of RocksDB's applied offset against the changelog.
    """
    parts: list[tuple[ChangeLogging, PartitionMetrics | None]] = []
    engines: list[RocksDBEngine] = []
    results: list[RestoreResult] = []
    try:
        for partition in range(spec.partitions):
            meter = (
                None
                if metrics is None
                else PartitionMetrics(metrics, store=spec.name, partition=partition)
            )
            part = _open_partition(
                spec,
                partition,
                state_dir=state_dir,
                cache=cache,
                clock=clock,
                coordinator=coordinator,
                rebuild_reason=rebuild_reason,
                cross_check=cross_check,
                append_observer=None if meter is None else meter.on_append,
                flush_observer=None if meter is None else meter.on_flush,
            )
            parts.append((part, meter))
            engines.append(part.engine)
            if meter is not None:
                meter.watch_log(part.changelog)
            with changelog_errors(store=spec.name, partition=partition, operation="restore"):
                result = part.restore(
                    batch_records=spec.config.restore_batch_records,
                    batch_bytes=spec.config.restore_batch_bytes,
                    listener=listener,
                    progress=progress if meter is None else meter.restore_progress(progress),
                )
            results.append(result)
            if meter is not None:
                meter.restore_finished(result)
                meter.attach_engine(part.engine)
    except BaseException:
        if metrics is not None:
            metrics.remove({"store": spec.name})
        for opened, _meter in parts:
            _quietly(opened.close)
        raise
    plain = spec.time is None  # a store in time serializes in its own top layer (the manager's)
    key_serde: Serde[Any] = spec.key_serde if plain else BytesSerde()
    value_serde: Serde[Any] = spec.value_serde if plain else BytesSerde()
    store: KeyValueStore[Any, Any] = wrap_partitions(
        parts,
        name=spec.name,
        key_serde=key_serde,
        value_serde=value_serde,
        max_record_bytes=spec.max_record_bytes,
        committer=coordinator,
        reader=StoreReader(
            name=spec.name,
            engines=engines,
            key_serde=key_serde,
            value_serde=value_serde,
            visibility=coordinator.visibility,
        ),
        route=partition_route(spec.time),
    )
    return store, results


def partition_route(time: TimeSettings | None) -> KeyRoute | None:
    """How a store's router picks a key's partition: the plain key of a segmented store in
    time (its windowed, session or versioned key without the suffix, as Kafka Streams
    partitions), else the whole key (``None``)."""
    if time is None or not time.segmented:
        return None
    return SuffixRoute(time.key_suffix_bytes)


def wrap_partitions(
    parts: Sequence[tuple[ChangeLogging, PartitionMetrics | None]],
    *,
    name: str,
    key_serde: Serde[Any],
    value_serde: Serde[Any],
    max_record_bytes: int,
    committer: Committer | None,
    reader: StoreReader[Any, Any],
    route: KeyRoute | None = None,
    cache_max_entries: int = 0,
) -> KeyValueStore[Any, Any]:
    """Steps 4-5 and the top of the stack over restored change-logging layers, in both modes.

    ``parts[p]`` is partition ``p``'s change-logging layer (local
    :class:`~statestore.stores.change_logging.ChangeLoggingStore`, or distributed
    mode's :class:`~statestore.kafka.store.TopicChangeLoggingStore`), open and
    restored, with its metrics (``None``: metrics off).  Each gets a write
    buffer, a metered layer when it has metrics, the router when there are
    several, and the typed store on top, which owns them all from here on
    (closing it closes them).  ``committer`` commits the store (``None``: the
    distributed runtime does); ``reader`` is the store's reader for other
    threads (:meth:`~statestore.KeyValueStore.reader`); ``route`` is how the router picks
    a key's partition (a store in time: :func:`partition_route`).  ``cache_max_entries``
    (> 0) puts a record cache of that many committed values
    (:class:`~statestore.stores.caching.CachingStore`) between each change-logging layer
    and its write buffer; only a caller whose RocksDB nothing but the stack's commits
    changes may ask for it (distributed mode's key-value stores).  The one place where the
    write buffer's fast path is granted (see the module docstring).  Constructs nothing that can
    fail halfway: the layers only take references.
    """
    layers: list[BytesStore] = []
    fast_path: Pending | None = None
    for part, meter in parts:
        buffer = WriteBuffer(
            part if cache_max_entries == 0 else CachingStore(part, max_entries=cache_max_entries)
        )
        layers.append(buffer if meter is None else MeteredStore(buffer, meter))
        if len(parts) == 1 and (meter is None or not meter.operations_recorded):
            fast_path = buffer.fast_path()
    inner: BytesStore = layers[0] if len(layers) == 1 else PartitionedStore(layers, route)
    return KeyValueStore(
        name=name,
        inner=inner,
        key_serde=key_serde,
        value_serde=value_serde,
        max_record_bytes=max_record_bytes,
        committer=committer,
        reader=reader,
        fast_path=fast_path,
    )


def _open_partition(
    spec: StoreSpec,
    partition: int,
    *,
    state_dir: Path,
    cache: Any,
    clock: Callable[[], int] | None,
    coordinator: TransactionCoordinator,
    rebuild_reason: str | None,
    cross_check: bool,
    append_observer: Callable[[AppendInfo], None] | None,
    flush_observer: Callable[[float], None] | None = None,
) -> ChangeLoggingStore:
    """Steps 1-3 of the module docstring for one partition (not yet restored)."""
    label = f"[{spec.name}-{partition}]"
    engine_path = spec.rocksdb_dir(state_dir, partition)
    with changelog_errors(store=spec.name, partition=partition, operation="open"):
        log = Log.open(
            spec.changelog_dir(state_dir, partition),
            config=spec.log_config,
            clock=clock,
            append_observer=append_observer,
            flush_observer=flush_observer,
        )
    try:
        with changelog_errors(store=spec.name, partition=partition, operation="recover"):
            coordinator.recover(log, store=spec.name, partition=partition)
        time = spec.time
        engine, plan = open_engine(
            spec.config.restore_mode,
            log,
            open_=lambda: (
                RocksDBEngine.open(engine_path, config=spec.rocksdb, cache=cache, label=label)
                if time is None or not time.segmented
                else SegmentedEngine.open_segmented(
                    engine_path, config=spec.rocksdb, cache=cache, settings=time, label=label
                )
            ),
            destroy=lambda: RocksDBEngine.destroy(engine_path),
            label=label,
            exists=engine_path.exists,
            rebuild_reason=rebuild_reason,
            cross_check=cross_check,
            store=spec.name,
            partition=partition,
        )
    except BaseException:
        _quietly(log.close)
        raise
    return ChangeLoggingStore(
        store=spec.name,
        partition=partition,
        changelog=log,
        engine=engine,
        plan=plan,
        flush_interval_records=spec.config.flush_interval_records,
        record_format="plain" if spec.time is None else spec.time.record_format,
    )


def _quietly(close: Callable[[], object]) -> None:
    try:
        close()
    except Exception:
        logger.exception("error while closing after a failed open")
