"""The restarts of a Hypothesis state machine over one store, shared by the stateful tests.

Reopen (clean shutdown), crash (no shutdown), crash where RocksDB falls back to its last
flush (after an incremental open), compact (roll + two forced cleaning passes).  RocksDB is
flushed only when a restore ends and at a clean close, so the snapshot taken at an
incremental open is exactly what RocksDB could fall back to after a crash.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from statestore.config import RestoreMode, StoreConfig
from statestore.manager import StateManager
from tests.statestore.helpers import NO_CLEANER, engine_of

MODES = st.sampled_from(["full", "incremental"])
NOW = 10**9


class RestartingMachine(RuleBasedStateMachine):
    """Open/close/crash/compact of one store; subclasses open it and check it.

    ``name`` is the store's; the manager's clock reads ``clock_ms`` (a subclass may move it).
    """

    name = "s"
    clock_ms = NOW
    log_config = LogConfig(segment_bytes=400, index_interval_bytes=64)
    tmp_prefix = "statestore-time-"

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix=self.tmp_prefix))
        self.state_dir = self.root / "state"
        self.snapshot: Path | None = None
        self.snapshots = 0
        self._open("full")

    def _open_store(self, config: StoreConfig) -> Any:
        raise NotImplementedError

    def _check_committed(self) -> None:
        raise NotImplementedError

    def _new_manager(self) -> StateManager:
        return StateManager(
            self.state_dir, lambda: self.clock_ms, config=NO_CLEANER, log_config=self.log_config
        )

    def _engine(self) -> Any:
        """The RocksDB engine of the open store (its snapshot, at an incremental open)."""
        return engine_of(self.store.inner)

    def _open(self, mode: RestoreMode) -> None:
        self.manager = self._new_manager()
        self.store = self._open_store(StoreConfig(restore_mode=mode, flush_interval_records=10**9))
        self.pending: dict[Any, Any] = {}
        self._check_committed()
        self.snapshot = None
        if mode == "incremental":
            self.snapshots += 1
            self.snapshot = self.root / f"snapshot-{self.snapshots}"
            self._engine().checkpoint(self.snapshot)

    def teardown(self) -> None:
        self.manager.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _with_pending(self, committed: dict[Any, Any]) -> dict[Any, Any]:
        """``committed`` with the pending writes applied (``None``: deleted)."""
        view = dict(committed)
        for key, entry in self.pending.items():
            if entry is None:
                view.pop(key, None)
            else:
                view[key] = entry
        return view

    @rule()
    def compact(self) -> None:
        (log,) = self.store.changelogs
        log.roll()
        clean_log(log, force=True)  # a tombstone survives its first pass ...
        clean_log(log, force=True)  # ... and may go in the next, unless barred

    @rule(mode=MODES)
    def reopen(self, mode: RestoreMode) -> None:
        self.manager.close()
        self._open(mode)

    @rule(mode=MODES)
    def crash(self, mode: RestoreMode) -> None:
        self.manager.crash()
        self._open(mode)

    @precondition(lambda self: self.snapshot is not None)
    @rule()
    def crash_losing_unflushed_rocksdb_writes(self) -> None:
        """RocksDB (WAL off) falls back to its last flush; the changelog still has everything."""
        assert self.snapshot is not None
        snapshot = self.snapshot
        self.manager.crash()
        rocksdb = self.state_dir / f"{self.name}-rocksdb-0"
        shutil.rmtree(rocksdb)
        shutil.copytree(snapshot, rocksdb)
        self._open("incremental")
