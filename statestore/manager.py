"""The state manager: owns one state directory, its stores, their commits and the log cleaner.

Layout of a state directory (see docs/concepts.md)::

    <state_dir>/
        .lock                       held (flock LOCK_EX|LOCK_NB) by the owning manager
        __transaction_state-0/      the transaction coordinator's decisions (statestore.txn)
        <store>.metadata.json       what <store> was created with (statestore.stores.metadata)
        <store>-changelog-<p>/      the changelog partition p of <store> (Kafka partition dir)
        <store>-rocksdb-<p>/        the RocksDB of partition p of <store>

The state directory and any missing parents are created with
:func:`changelog.fs.files.make_dirs` (each new entry's parent fsynced), so a
commit acknowledged in a new state directory survives a power cut.

Opening a store checks it against its metadata first
(:func:`statestore.stores.metadata.reconcile`: a setting not given is the
recorded one, a given one must equal it), builds and restores it, and then
records the metadata when it is new or changed (the restore-mode switch
protocol M1-M2 of :class:`~statestore.stores.metadata.Reconciled`), before the
store is handed out and before the cleaner sees its changelogs.

Transactions: the manager owns the state directory's transaction coordinator
(:class:`~statestore.txn.coordinator.TransactionCoordinator`), opened right
after the lock (steps O1-O2: it bumps the producer epoch) and closed after the
stores (T6).  Every commit goes through it: :meth:`StateManager.commit` and
``with manager.transaction():`` are atomic over every store and partition
they cover; before a store partition restores, the coordinator ends the
transactions left open in its changelog (R1-R3).  :attr:`StateManager.metadata`
is a built-in store for input positions and other bookkeeping committed in the
same transactions.

Lifecycle: ``created`` (directory locked, cleaner started) -> ``open`` ->
``closed``; ``failed`` if a close went wrong.  :meth:`StateManager.store`
restores each store before returning it (the store is ``restoring`` meanwhile).

Close order (a clean shutdown): 1. stop the cleaner (aborting a pass between
batches); 2. close each store, which closes each of its partitions in turn:
uncommitted writes are discarded with a warning, RocksDB is flushed, its
background work cancelled and its lock released, then the partition's
changelog is closed (writing the clean-shutdown marker and checkpoints);
3. release the directory lock.  :meth:`StateManager.crash` abandons the
stores instead (no flushes, no markers), as a crash would, for
restore-after-crash tests.

Invariants: while the manager is open it holds the directory lock; every
store in ``_stores`` is open, failed or closed by hand, and owns its
changelogs (a store's changelogs are open exactly while the store is not
closed).

Thread-safety: thread-safe for opening stores, committing and closing:
``_lock`` (an ``RLock``) guards ``_stores`` and ``_state``.  Each store is
used by one thread at a time (see :class:`~statestore.stores.typed.KeyValueStore`);
``commit()`` may run while other threads write: it covers every write
buffered in a partition when it takes that partition's commit lock, and it
returns once every write its caller buffered before calling it is durable
(docs/concepts.md, "Threads").  Threads running transactions use scoped
blocks, ``manager.transaction(a, b)``: a block covers exactly its enlisted
stores and owns them until its end (another thread's block over one of them
waits; blocks over disjoint stores commit concurrently, sharing the
coordinator's decision fsyncs).  Unscoped commits, aborts and
``transaction()`` blocks cover every store no other thread's scoped block
owns (:mod:`statestore.txn.scope`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import attrs

from changelog import ChangelogError, CleanerService, LogConfig, LogLockedError
from changelog.fs import files
from changelog.fs.lock import DirectoryLock
from changelog.repair.journal import journal_path
from changelog.repair.journal import pending as journal_pending
from statestore.config import (
    STORE_LOG_CONFIG,
    RocksDBConfig,
    StateManagerConfig,
    StoreConfig,
)
from statestore.errors import (
    CommitFailedError,
    InvalidStateStoreError,
    InvalidStoreConfigError,
    RepairInProgressError,
    StateDirLockedError,
    StateStoreError,
    StoreEngineError,
    StoreMetadataError,
    changelog_errors,
)
from statestore.metrics.cleaner import register_cleaner_metrics
from statestore.metrics.registry import MetricsRegistry
from statestore.metrics.snapshot import nest_samples
from statestore.metrics.transactions import register_transaction_metrics
from statestore.metrics.ttl import register_ttl_metrics
from statestore.serdes import BytesSerde, MsgpackSerde, Serde, StringSerde, serde_for_type
from statestore.stores.builder import build_store
from statestore.stores.engine import new_block_cache
from statestore.stores.lifecycle import StoreState
from statestore.stores.metadata import read_metadata, reconcile, serde_identity, write_metadata
from statestore.stores.restore import ProgressHook, RestoreResult, StateRestoreListener
from statestore.stores.spec import StoreSpec
from statestore.stores.time.base import TimeStoreBase
from statestore.stores.time.session import SessionStore
from statestore.stores.time.settings import TimeSettings, TtlSettings
from statestore.stores.time.timestamped import TimestampedKeyValueStore
from statestore.stores.time.top import wrap_time_store
from statestore.stores.time.ttl import TtlKeyValueStore
from statestore.stores.time.versioned import VersionedKeyValueStore
from statestore.stores.time.window import WindowStore
from statestore.stores.typed import KeyValueStore
from statestore.txn.coordinator import FaultHook, TransactionCoordinator

__all__ = ["StateManager"]

logger = logging.getLogger(__name__)

_STORE_NAME: Final = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
"""Kafka's legal topic characters (the changelog topic is ``<name>-changelog``)."""

METADATA_STORE: Final = "__metadata"
"""The name of the built-in store behind :attr:`StateManager.metadata`."""


class StateManager:
    """Owns a state directory: locks it, opens and restores stores, commits, cleans, closes.

    Use it as a context manager::

        with StateManager("state") as manager:
            users = manager.store("users")
            users["alice"] = {"age": 31}
            manager.commit()

    ``clock`` returns milliseconds since the epoch; it stamps changelog records
    and is the cleaner's "now" (default: the wall clock).

    Thread-safety, lifecycle and invariants: see the module docstring.
    """

    def __init__(
        self,
        state_dir: str | Path,
        clock: Callable[[], int] | None = None,
        *,
        config: StateManagerConfig | None = None,
        log_config: LogConfig | None = None,
        rocksdb: RocksDBConfig | None = None,
        fault_hook: FaultHook | None = None,
    ) -> None:
        """Lock ``state_dir`` (created if missing), open the transaction coordinator, start the cleaner.

        ``log_config``/``rocksdb`` are the defaults for stores that do not pass
        their own (an existing store that passes no ``log_config`` anywhere uses
        the one it recorded; a new one gets ``log_config`` or
        :data:`~statestore.config.STORE_LOG_CONFIG`).  Raises :class:`StateDirLockedError` if another manager (in
        this or another process) owns the directory, :class:`RepairInProgressError` while a
        repair's journal is in it (docs/recovery.md).  ``fault_hook`` is for
        crash-injection tests only: the coordinator calls it after every
        numbered step of its protocols (:attr:`TransactionCoordinator.fault_hook
        <statestore.txn.coordinator.TransactionCoordinator.fault_hook>`).
        """
        self._dir = Path(state_dir)
        self._clock = clock
        self._config = config if config is not None else StateManagerConfig()
        self._given_log_config = log_config
        self._default_rocksdb = rocksdb if rocksdb is not None else RocksDBConfig()
        self._lock = threading.RLock()
        self._stores: dict[str, KeyValueStore[Any, Any]] = {}
        self._tops: dict[str, TimeStoreBase[Any, Any]] = {}
        """The top layer of each open store in time (its typed store of bytes is in ``_stores``)."""
        self._specs: dict[str, StoreSpec] = {}
        self._restore_results: dict[str, list[RestoreResult]] = {}
        self._state = StoreState.CREATED
        self._label = f"[state {self._dir}]"
        try:
            # each new directory's entry fsynced in its parent: a power cut after the first
            # acknowledged commit must not take the whole state directory with it
            files.make_dirs(self._dir, "state_dir.mkdir")
        except (OSError, ChangelogError) as exc:
            raise InvalidStoreConfigError("state_dir", str(state_dir), str(exc)) from exc
        if not self._dir.is_dir():
            raise InvalidStoreConfigError("state_dir", str(state_dir), "not a directory")
        self._dir_lock = DirectoryLock(self._dir)
        try:
            self._dir_lock.acquire()
        except LogLockedError as exc:
            raise StateDirLockedError(exc.path, exc.holder) from exc
        if journal_pending(self._dir):  # a repair left it between two states: docs/recovery.md
            self._dir_lock.release()
            raise RepairInProgressError(journal_path(self._dir))
        self._cleaner: CleanerService | None = None
        if self._config.run_cleaner:  # started below, once the coordinator is open
            self._cleaner = CleanerService(self._all_logs, self._config.cleaner, clock)
        try:
            with changelog_errors(store=None, partition=None, operation="open"):
                self._coordinator = TransactionCoordinator.open(
                    self._dir,
                    clock=clock,
                    fault_hook=fault_hook,
                    after_commit=None if self._cleaner is None else self._cleaner.pace,
                )
        except BaseException:
            self._dir_lock.release()
            raise
        self._coordinator.scopes.on_owner = self._own_writes
        self._cache = new_block_cache(self._config.block_cache_size_bytes)
        level = self._config.metrics_recording_level
        self._metrics = None if level == "OFF" else MetricsRegistry(level=level)
        if self._metrics is not None and self._cleaner is not None:
            register_cleaner_metrics(self._metrics, self._cleaner, self._all_logs)
        if self._metrics is not None:
            register_transaction_metrics(self._metrics, self._coordinator)
        if self._cleaner is not None:
            self._cleaner.start()
        self._state = StoreState.OPEN
        logger.info("%s opened", self._label)

    # ---------------------------------------------------------------- properties

    @property
    def state_dir(self) -> Path:
        """The state directory."""
        return self._dir

    @property
    def state(self) -> StoreState:
        """The manager's lifecycle state."""
        return self._state

    @property
    def stores(self) -> Mapping[str, KeyValueStore[Any, Any]]:
        """The open stores by name (a copy)."""
        with self._lock:
            return dict(self._stores)

    @property
    def cleaner(self) -> CleanerService | None:
        """The background cleaner (``None`` when ``run_cleaner`` is off)."""
        return self._cleaner

    @property
    def metrics_registry(self) -> MetricsRegistry | None:
        """The registry of every metric (``None`` when ``metrics_recording_level`` is ``OFF``)."""
        return self._metrics

    def metrics(self) -> dict[str, Any]:
        """A plain snapshot of every metric (see :mod:`statestore.metrics.snapshot`, docs/metrics.md).

        ``{"stores": {name: {partition: {metric: value}}}, "cleaner": {metric: value},
        "transactions": {metric: value}}``; all empty when metrics are off.  Safe to
        call from any thread.
        """
        if self._metrics is None:
            return {"stores": {}, "cleaner": {}, "transactions": {}}
        return nest_samples(self._metrics.samples())

    def restore_results(self, name: str) -> list[RestoreResult]:
        """What the restore of each partition of store ``name`` did when it was opened."""
        with self._lock:
            return list(self._restore_results[name])

    @property
    def coordinator(self) -> TransactionCoordinator:
        """The state directory's transaction coordinator (its ``fault_hook`` serves crash tests)."""
        return self._coordinator

    @property
    def metadata(self) -> KeyValueStore[str, Any]:
        """The built-in bookkeeping store: ``str`` keys, any msgpack value, one partition.

        For input positions, offsets and other small values that must commit
        atomically with the application's stores (``manager.metadata["position"]
        = 42`` inside ``with manager.transaction():``).  Its changelog is
        ``__metadata-changelog-0``; it is opened (and restored) on first use.
        """
        return self.store(METADATA_STORE)

    def _all_logs(self) -> list[Any]:
        with self._lock:
            logs = [log for store in self._stores.values() for log in store.changelogs]
            if not self._coordinator.log.closed:
                logs.append(self._coordinator.log)
            return logs

    def _check_open(self, operation: str) -> None:
        if self._state is not StoreState.OPEN:
            raise InvalidStateStoreError(f"manager of {self._dir}", self._state.value, operation)

    # ---------------------------------------------------------------- stores

    def store(
        self,
        name: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        key_type: type[Any] | None = None,
        value_type: type[Any] | None = None,
        partitions: int | None = None,
        log_config: LogConfig | None = None,
        rocksdb: RocksDBConfig | None = None,
        config: StoreConfig | None = None,
        restore_listener: StateRestoreListener | None = None,
        progress: ProgressHook | None = None,
    ) -> KeyValueStore[Any, Any]:
        """The store ``name``, opened and restored (or the already open one).

        Keys default to UTF-8 strings and values to msgpack; ``key_type`` /
        ``value_type`` (``bytes``, ``str``, ``int`` or an attrs class) pick a
        built-in serde, ``key_serde`` / ``value_serde`` any :class:`Serde`.

        The store's metadata file records its partitions, serdes, restore mode
        and changelog settings (docs/operations.md, "Store metadata").
        ``partitions`` and ``log_config`` left out mean "as recorded" (a new
        store: 1 partition, the manager's ``log_config`` or
        :data:`~statestore.config.STORE_LOG_CONFIG`); given, and the serdes
        always, they must equal what was recorded, else
        :class:`~statestore.errors.StoreMetadataMismatchError` (nothing is
        changed; migrate with :func:`statestore.migrate_store`).  A different
        ``config.restore_mode`` is a safe switch: switching to ``incremental``
        rebuilds RocksDB from the changelog first.

        Asking again for an open store returns it; asking with different
        settings raises :class:`InvalidStoreConfigError`.  Asking for a store
        that failed (or was closed by hand) reopens it, restoring it from its
        changelog.
        """
        serdes = _pick_serdes(key_serde, value_serde, key_type, value_type)
        log_config = log_config if log_config is not None else self._given_log_config
        opening = _Opening(log_config, rocksdb, config, restore_listener, progress)
        return self._open_store(name, serdes, opening, partitions=partitions)

    def timestamped_store(
        self,
        name: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        key_type: type[Any] | None = None,
        value_type: type[Any] | None = None,
        partitions: int | None = None,
        log_config: LogConfig | None = None,
        rocksdb: RocksDBConfig | None = None,
        config: StoreConfig | None = None,
        restore_listener: StateRestoreListener | None = None,
        progress: ProgressHook | None = None,
    ) -> TimestampedKeyValueStore[Any, Any]:
        """The timestamped key-value store ``name`` (docs/time.md), opened and restored.

        Arguments as :meth:`store`.  Its metadata records that it is
        timestamped: opening it as another type raises
        :class:`~statestore.errors.StoreMetadataMismatchError`.
        """
        settings = TimeSettings.timestamped_key_value()
        serdes = _pick_serdes(key_serde, value_serde, key_type, value_type)
        opening = _Opening(log_config, rocksdb, config, restore_listener, progress)
        top = self._open_time_store(name, settings, serdes, opening, partitions=partitions)
        assert isinstance(top, TimestampedKeyValueStore)  # the type follows the settings
        return top

    def ttl_store(
        self,
        name: str,
        *,
        ttl: TtlSettings,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        key_type: type[Any] | None = None,
        value_type: type[Any] | None = None,
        partitions: int | None = None,
        log_config: LogConfig | None = None,
        rocksdb: RocksDBConfig | None = None,
        config: StoreConfig | None = None,
        restore_listener: StateRestoreListener | None = None,
        progress: ProgressHook | None = None,
    ) -> TtlKeyValueStore[Any, Any]:
        """The key-value store ``name`` whose values expire after ``ttl`` (docs/time.md, "TTL").

        Arguments as :meth:`store`.  The changelog's ``record_ttl_ms`` is set
        to the TTL (a given ``log_config`` too), so the cleaner removes expired
        records and restore applies them as deletes; every commit of this
        manager first sweeps expired keys into tombstones once
        ``ttl.sweep_interval_ms`` has passed.  Its metadata records the TTL:
        opening it with another TTL or as another type raises
        :class:`~statestore.errors.StoreMetadataMismatchError`.
        """
        if log_config is not None:
            log_config = attrs.evolve(log_config, record_ttl_ms=ttl.ttl_ms)
        settings = TimeSettings.timestamped_key_value(ttl=ttl)
        serdes = _pick_serdes(key_serde, value_serde, key_type, value_type)
        opening = _Opening(log_config, rocksdb, config, restore_listener, progress)
        top = self._open_time_store(name, settings, serdes, opening, partitions=partitions)
        assert isinstance(top, TtlKeyValueStore)  # the type follows the settings
        return top

    def window_store(
        self,
        name: str,
        *,
        window_size_ms: int,
        retention_ms: int,
        segment_interval_ms: int | None = None,
        retain_duplicates: bool = False,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        key_type: type[Any] | None = None,
        value_type: type[Any] | None = None,
        partitions: int | None = None,
        log_config: LogConfig | None = None,
        rocksdb: RocksDBConfig | None = None,
        config: StoreConfig | None = None,
        restore_listener: StateRestoreListener | None = None,
        progress: ProgressHook | None = None,
    ) -> WindowStore[Any, Any]:
        """The window store ``name`` (Kafka Streams' ``WindowStore``; docs/time.md), opened and restored.

        ``window_size_ms``, ``retention_ms`` (>= the window size),
        ``segment_interval_ms`` (default ``max(retention_ms / 2, 60 s)``) and
        ``retain_duplicates`` are Kafka Streams' ``persistentWindowStore``
        arguments, recorded in the store's metadata.  The changelog defaults to
        ``cleanup_policy="compact,delete"`` with ``retention_ms`` = the store's
        retention + 1 day, as Kafka Streams creates it.  ``partitions`` as
        for :meth:`store`; a key's windows go to the partition of its plain key.
        """
        settings = TimeSettings.window(
            window_size_ms=window_size_ms,
            retention_ms=retention_ms,
            segment_interval_ms=segment_interval_ms,
            retain_duplicates=retain_duplicates,
        )
        serdes = _pick_serdes(key_serde, value_serde, key_type, value_type)
        opening = _Opening(log_config, rocksdb, config, restore_listener, progress)
        top = self._open_time_store(name, settings, serdes, opening, partitions=partitions)
        assert isinstance(top, WindowStore)  # the type follows the settings
        return top

    def session_store(
        self,
        name: str,
        *,
        retention_ms: int,
        segment_interval_ms: int | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        key_type: type[Any] | None = None,
        value_type: type[Any] | None = None,
        partitions: int | None = None,
        log_config: LogConfig | None = None,
        rocksdb: RocksDBConfig | None = None,
        config: StoreConfig | None = None,
        restore_listener: StateRestoreListener | None = None,
        progress: ProgressHook | None = None,
    ) -> SessionStore[Any, Any]:
        """The session store ``name`` (Kafka Streams' ``SessionStore``; docs/time.md), opened and restored.

        ``retention_ms`` and ``segment_interval_ms`` (default ``max(retention_ms /
        2, 60 s)``) are Kafka Streams' ``persistentSessionStore`` arguments,
        recorded in the store's metadata; the changelog defaults as for
        :meth:`window_store`.  ``partitions`` as
        for :meth:`store`; a key's sessions go to the partition of its plain key.
        """
        settings = TimeSettings.session(
            retention_ms=retention_ms, segment_interval_ms=segment_interval_ms
        )
        serdes = _pick_serdes(key_serde, value_serde, key_type, value_type)
        opening = _Opening(log_config, rocksdb, config, restore_listener, progress)
        top = self._open_time_store(name, settings, serdes, opening, partitions=partitions)
        assert isinstance(top, SessionStore)  # the type follows the settings
        return top

    def versioned_store(
        self,
        name: str,
        *,
        history_retention_ms: int,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        key_type: type[Any] | None = None,
        value_type: type[Any] | None = None,
        partitions: int | None = None,
        log_config: LogConfig | None = None,
        rocksdb: RocksDBConfig | None = None,
        config: StoreConfig | None = None,
        restore_listener: StateRestoreListener | None = None,
        progress: ProgressHook | None = None,
    ) -> VersionedKeyValueStore[Any, Any]:
        """The versioned key-value store ``name`` (KIP-889; docs/time.md), opened and restored.

        ``history_retention_ms`` is recorded in the store's metadata; the
        changelog defaults to ``min_compaction_lag_ms`` = history retention + 1
        day, as Kafka Streams creates it.  ``partitions`` as
        for :meth:`store`; a key's versions go to the partition of its plain key.
        """
        settings = TimeSettings.versioned_key_value(history_retention_ms=history_retention_ms)
        serdes = _pick_serdes(key_serde, value_serde, key_type, value_type)
        opening = _Opening(log_config, rocksdb, config, restore_listener, progress)
        top = self._open_time_store(name, settings, serdes, opening, partitions=partitions)
        assert isinstance(top, VersionedKeyValueStore)  # the type follows the settings
        return top

    def _open_time_store(
        self,
        name: str,
        settings: TimeSettings,
        serdes: _Serdes,
        opening: _Opening,
        *,
        partitions: int | None,
    ) -> TimeStoreBase[Any, Any]:
        """Open the typed store of bytes under a store in time and put the store's top layer on it."""
        if opening.log_config is None and self._given_log_config is not None:
            log_config = settings.changelog_config(self._given_log_config)
            opening = attrs.evolve(opening, log_config=log_config)
        with self._lock:
            inner = self._open_store(
                name,
                serdes,
                opening,
                partitions=partitions,
                time=settings,
                default_log_config=settings.changelog_config(STORE_LOG_CONFIG),
            )
            top = self._tops.get(name)
            if top is None or top.inner is not inner:
                key_serde, value_serde = serdes
                now_ms = inner.changelogs[0].clock
                top = wrap_time_store(
                    inner, settings, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms
                )
                self._tops[name] = top
                if self._metrics is not None and isinstance(top, TtlKeyValueStore):
                    register_ttl_metrics(self._metrics, top)
            return top

    def raw_store(
        self,
        name: str,
        *,
        rebuild: bool = False,
        rocksdb: RocksDBConfig | None = None,
        restore_listener: StateRestoreListener | None = None,
        progress: ProgressHook | None = None,
    ) -> KeyValueStore[bytes, bytes]:
        """The existing store ``name`` with keys and values as raw bytes, for tools (the CLI).

        Every setting is the recorded one (partitions, restore mode, changelog
        settings); the serdes are not checked and nothing is recorded.  A
        state directory without a metadata file (made before it existed) is
        opened with the partitions its ``<name>-changelog-<p>`` directories
        prove and a full restore.  ``rebuild`` rebuilds RocksDB from the
        changelog whatever the restore mode, and whatever RocksDB held: it
        skips the cross-check that refuses a RocksDB ahead of its changelog
        (:class:`~statestore.errors.AppliedOffsetMismatchError`), so it is the
        operator's remedy for that error (``statestore restore``).  Writes go in as given: bytes the
        store's own serdes must be able to read.
        """
        opening = _Opening(None, rocksdb, None, restore_listener, progress)
        serdes = (BytesSerde(), BytesSerde())
        return self._open_store(name, serdes, opening, partitions=None, raw=True, rebuild=rebuild)

    def _open_store(
        self,
        name: str,
        serdes: _Serdes,
        opening: _Opening,
        *,
        partitions: int | None,
        raw: bool = False,
        rebuild: bool = False,
        time: TimeSettings | None = None,
        default_log_config: LogConfig = STORE_LOG_CONFIG,
    ) -> KeyValueStore[Any, Any]:
        """Open (or return the open) typed store ``name``.

        ``raw``: a tools' open (:meth:`raw_store`): the serdes are not checked, the recorded
        restore mode and settings are taken, and ``rebuild`` may rebuild RocksDB;
        ``time``: a store in time's settings (checked against the metadata unless raw);
        ``default_log_config``: a new store's changelog settings when the opening gives none.
        """
        if not isinstance(name, str) or not _STORE_NAME.match(name) or name in (".", ".."):
            raise InvalidStoreConfigError("name", name, "must be 1-200 of [A-Za-z0-9._-]")
        if partitions is not None and (
            isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1
        ):
            raise InvalidStoreConfigError("partitions", partitions, "must be an integer >= 1")
        key_serde, value_serde = serdes
        check_serdes = not raw
        log_config, config = opening.log_config, opening.config
        restore_mode = None if raw else config.restore_mode
        rocksdb = opening.rocksdb if opening.rocksdb is not None else self._default_rocksdb
        with self._lock:
            self._check_open("open a store")
            existing = self._stores.get(name)
            if existing is not None and existing.state is not StoreState.OPEN:
                # A failed (or closed-by-hand) store is reopened: restored from its changelog.
                logger.warning(
                    "%s reopening store %r (it was %s)", self._label, name, existing.state.value
                )
                del self._stores[name]
                if self._metrics is not None:
                    self._metrics.remove({"store": name})
                existing.close(flush=False)
                existing = None
            if existing is not None:
                current = self._specs[name]
                asked = StoreSpec(
                    name=name,
                    partitions=partitions if partitions is not None else current.partitions,
                    key_serde=key_serde,
                    value_serde=value_serde,
                    log_config=log_config if log_config is not None else current.log_config,
                    rocksdb=rocksdb,
                    config=attrs.evolve(
                        config,
                        restore_mode=restore_mode
                        if restore_mode is not None
                        else current.config.restore_mode,
                    ),
                    time=time if check_serdes else current.time,
                )
                if asked != current or rebuild:
                    raise InvalidStoreConfigError(
                        "store", name, "is already open with different settings"
                    )
                return existing
            reconciled = reconcile(
                self._dir,
                store=name,
                stored=read_metadata(self._dir, name),
                partitions=partitions,
                key_serde=serde_identity(key_serde) if check_serdes else None,
                value_serde=serde_identity(value_serde) if check_serdes else None,
                restore_mode=restore_mode,
                log_config=log_config,
                default_log_config=default_log_config,
                time=time,
                check_time=check_serdes,
            )
            meta = reconciled.metadata
            spec = StoreSpec(
                name=name,
                partitions=meta.partitions,
                key_serde=key_serde,
                value_serde=value_serde,
                log_config=meta.log_config,
                rocksdb=rocksdb,
                config=attrs.evolve(config, restore_mode=meta.restore_mode),
                time=meta.time,
            )
            rebuild_reason = reconciled.rebuild_reason
            if rebuild:
                rebuild_reason = "rebuild asked for (RocksDB not cross-checked)"
            store, results = build_store(
                spec,
                state_dir=self._dir,
                cache=self._cache,
                clock=self._clock,
                listener=opening.restore_listener,
                coordinator=self._coordinator,
                progress=opening.progress,
                metrics=self._metrics,
                rebuild_reason=rebuild_reason,
                cross_check=not rebuild,
            )
            if reconciled.write:
                try:
                    write_metadata(self._dir, meta)  # M2: before the store is handed out
                except StoreMetadataError:
                    if self._metrics is not None:
                        self._metrics.remove({"store": name})
                    _collect([], store.close)
                    raise
                except BaseException:  # a test's SimulatedCrash: let go, write nothing
                    store.abandon()
                    raise
                logger.info(
                    "%s store %r: metadata recorded (%s partitions, restore %s%s)",
                    self._label,
                    name,
                    meta.partitions,
                    meta.restore_mode,
                    ", adopted from the directory" if reconciled.adopted else "",
                )
            self._stores[name] = store
            self._specs[name] = spec
            self._restore_results[name] = results
            return store

    def commit(self) -> int:
        """Commit every open store's buffered writes atomically; returns the records committed.

        One partition with writes: one changelog batch.  Several (any stores,
        any partitions): one transaction of the coordinator
        (:mod:`statestore.txn.coordinator`): after a crash at any point either
        every write of the commit is visible after restore or none is; the
        decision is durable before this returns.  Stores owned by another
        thread's scoped ``transaction(...)`` block are left to that block
        (:mod:`statestore.txn.scope`); this thread cannot have written them
        meanwhile (such a write raises :class:`InvalidStateStoreError`), so every
        write the caller buffered is committed when this returns.  Inside ``with manager.transaction():``
        on this thread it raises :class:`InvalidStateStoreError` (the block
        commits at its end).  On a :class:`~statestore.errors.CommitFailedError`
        the stores whose partitions failed are ``failed`` (reopen them).
        """
        with self._lock:
            self._check_open("commit")
        if self._coordinator.in_transaction():
            raise InvalidStateStoreError(
                f"manager of {self._dir}", "inside manager.transaction()", "commit before its end"
            )
        return self._commit_free()

    def _commit_free(self) -> int:
        """Commit every open store no other thread's scoped block owns (an unscoped commit)."""
        with self._lock:
            names = list(self._stores)
        with self._coordinator.scopes.claim_free(names) as covered:
            return self._commit(self._open_stores(covered))

    def _open_stores(self, names: list[str]) -> list[KeyValueStore[Any, Any]]:
        with self._lock:
            stores = [self._stores.get(name) for name in names]
        return [s for s in stores if s is not None and s.state is StoreState.OPEN]

    def _commit(self, stores: list[KeyValueStore[Any, Any]]) -> int:
        for store in stores:  # TTL stores: expired keys' tombstones join this commit
            top = self._tops.get(store.name)
            if (
                isinstance(top, TtlKeyValueStore)
                and top.inner is store
                and top.sweeps_at_commit
                and top.sweep_due()
            ):
                top.expire()
        try:
            return self._coordinator.commit(
                [member for store in stores for member in store.participants]
            )
        except (CommitFailedError, StoreEngineError):
            for store in stores:
                store.check_failed()
            raise

    def abort(self) -> int:
        """Discard every open store's buffered writes; returns how many were dropped.

        Stores owned by another thread's scoped ``transaction(...)`` block are
        left alone.
        """
        with self._lock:
            self._check_open("abort")
            names = list(self._stores)
        with self._coordinator.scopes.claim_free(names) as covered:
            return sum(store.abort() for store in self._open_stores(covered))

    @contextlib.contextmanager
    def transaction(
        self, *stores: KeyValueStore[Any, Any] | TimeStoreBase[Any, Any]
    ) -> Iterator[StateManager]:
        """One atomic commit at the end of the block; discard on an exception.

        ::

            with manager.transaction():
                balances["alice"] = balances.get("alice", 0) - 5
                balances["bob"] = balances.get("bob", 0) + 5
                manager.metadata["position"] = line

        **Unscoped** (no store given): the block's end commits every store's
        buffered writes as one transaction (as :meth:`commit`, so including
        writes buffered before the block); an exception discards every
        store's buffered writes (as :meth:`abort`) and propagates.  Stores
        owned by another thread's scoped block are left to it.

        **Scoped** (``manager.transaction(orders, positions)``): the block
        covers exactly the stores given, plus those enlisted inside it on
        this thread (``store.transaction()``, or a nested
        ``manager.transaction(store)``).  It owns them until its end: it
        waits at its start while another thread's block owns any of them,
        and no other block or unscoped commit touches them meanwhile.  Its
        end commits their buffered writes as one transaction; an exception
        discards theirs only.  This is the form for threads: blocks over
        disjoint stores run and commit concurrently (their data fsyncs
        overlap and their decisions share fsyncs); blocks sharing a store
        take turns.  Enlisting, inside a block, a store another thread's
        block owns raises :class:`InvalidStateStoreError` (waiting there
        could deadlock: name every shared store when the block starts).

        Either way, inside the block ``store.commit()`` and :meth:`commit`
        raise, ``store.transaction()`` joins this one, and a nested
        ``manager.transaction()`` joins too (only the outermost commits).
        What a block covers when several threads write, and what ownership
        means: :mod:`statestore.txn.scope` and docs/concepts.md, "Threads".
        """
        with self._lock:
            self._check_open("transaction")
            names = [self._store_name(store) for store in stores]
        with self._coordinator.scopes.block(names if stores else None) as (block, outermost):
            if not outermost:
                yield self
                return
            try:
                yield self
            except BaseException:
                if self._state is StoreState.OPEN:
                    if block.scoped:
                        for store in self._open_stores(sorted(block.stores)):
                            store.abort()
                    else:
                        self.abort()
                raise
            with self._lock:
                self._check_open("commit")
            if block.scoped:
                self._commit(self._open_stores(sorted(block.stores)))
                return
        self._commit_free()

    def _own_writes(self, name: str, thread: int | None) -> None:
        """The scopes' ``on_owner``: the store refuses writes from threads other than its
        owning block's (:meth:`KeyValueStore.own_writes`).  Under the scopes' lock; reads
        ``_stores`` without ``_lock`` (a dict lookup; a block owns only open stores)."""
        store = self._stores.get(name)
        if store is not None:
            store.own_writes(thread)

    def _store_name(self, store: KeyValueStore[Any, Any] | TimeStoreBase[Any, Any]) -> str:
        """The name of ``store``, an open store of this manager (else a typed error)."""
        if isinstance(store, TimeStoreBase) and self._tops.get(store.name) is store:
            store = store.inner
        if not isinstance(store, KeyValueStore) or self._stores.get(store.name) is not store:
            raise InvalidStoreConfigError("stores", store, "not a store of this manager")
        if store.state is not StoreState.OPEN:
            raise InvalidStateStoreError(store.name, store.state.value, "transaction")
        return store.name

    def __iter__(self) -> Iterator[str]:
        """Names of the open stores."""
        return iter(self.stores)

    # ---------------------------------------------------------------- shutdown

    def close(self) -> None:
        """Shut down cleanly (see the module docstring for the order); idempotent.

        Uncommitted writes are discarded with a warning: call :meth:`commit` first.
        """
        with self._lock:
            if self._state is StoreState.CLOSED:
                return
            self._state = StoreState.CLOSED
            stores = list(self._stores.values())
            self._stores.clear()
        errors: list[BaseException] = []
        if self._cleaner is not None:
            _collect(errors, self._cleaner.close)
        for store in stores:
            _collect(errors, store.close)
        _collect(errors, self._close_coordinator)
        self._dir_lock.release()
        logger.info("%s closed", self._label)
        if errors:
            self._state = StoreState.FAILED
            raise errors[0]

    def _close_coordinator(self) -> None:
        with changelog_errors(store=None, partition=None, operation="close"):
            self._coordinator.close()

    def crash(self) -> None:
        """Drop everything without a clean shutdown, as ``kill -9`` would (for tests).

        The cleaner is stopped, RocksDB is released without our flush, each
        changelog is abandoned without its clean-shutdown marker or
        checkpoints, and the directory lock is released, so a new manager
        (in this process) can open the directory and must recover it.
        Uncommitted writes are lost; committed ones are in the changelogs.
        """
        with self._lock:
            if self._state is StoreState.CLOSED:
                return
            self._state = StoreState.CLOSED
            stores = list(self._stores.values())
            self._stores.clear()
        if self._cleaner is not None:
            self._cleaner.close()
        for store in stores:
            store.abandon()
        self._coordinator.abandon()
        self._dir_lock.release()
        logger.warning("%s crashed on purpose (no clean shutdown)", self._label)

    def __enter__(self) -> StateManager:
        """The manager itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close cleanly (uncommitted writes are discarded)."""
        self.close()

    def __repr__(self) -> str:
        """Directory, state and stores."""
        return f"StateManager({str(self._dir)!r}, state={self._state.value}, stores={sorted(self._stores)})"


_Serdes = tuple[Serde[Any], Serde[Any]]
"""A store's key and value serdes."""


def _default_config(config: StoreConfig | None) -> StoreConfig:
    return config if config is not None else StoreConfig()


@attrs.frozen
class _Opening:
    """How a store is opened, as every typed open takes it (positional, in the order of the
    public methods' arguments): changelog settings (``None``: as recorded, or the default),
    RocksDB settings (``None``: the manager's), the store's config (``None``: the defaults),
    and the restore's observers."""

    log_config: LogConfig | None
    rocksdb: RocksDBConfig | None
    config: StoreConfig = attrs.field(converter=_default_config)
    restore_listener: StateRestoreListener | None
    progress: ProgressHook | None


def _pick_serdes(
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    key_type: type[Any] | None,
    value_type: type[Any] | None,
) -> _Serdes:
    """The key and value serdes a typed open asks for (defaults: UTF-8 strings, msgpack)."""
    return (
        _pick_serde("key", key_serde, key_type, StringSerde),
        _pick_serde("value", value_serde, value_type, MsgpackSerde),
    )


def _pick_serde(
    role: str, serde: Serde[Any] | None, tp: type[Any] | None, default: Callable[[], Serde[Any]]
) -> Serde[Any]:
    if serde is not None and tp is not None:
        raise InvalidStoreConfigError(
            f"{role}_type", tp, f"give {role}_serde or {role}_type, not both"
        )
    if serde is not None:
        if not (
            callable(getattr(serde, "serialize", None))
            and callable(getattr(serde, "deserialize", None))
        ):
            raise InvalidStoreConfigError(
                f"{role}_serde", serde, "must have serialize() and deserialize()"
            )
        return serde
    if tp is not None:
        try:
            return serde_for_type(tp)
        except TypeError as exc:
            raise InvalidStoreConfigError(f"{role}_type", tp, str(exc)) from exc
    return default()


def _collect(errors: list[BaseException], close: Callable[[], object]) -> None:
    try:
        close()
    except (StateStoreError, ChangelogError, OSError) as exc:
        logger.exception("error during close")
        errors.append(exc)
