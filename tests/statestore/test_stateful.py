"""Hypothesis state machines over a store against a plain-dict model.

``StoreMachine`` is the broad one; ``IncrementalMachine`` (at the end) drives
only incremental restores and RocksDB rollbacks, so that a cleaning barrier
bug is found quickly (it finds one within its default examples when the
barrier is disabled).

Steps: put, delete, commit, abort, compact (roll + forced cleaning pass),
reopen (clean shutdown), crash (no clean shutdown), crash during a commit
(before the changelog append, or between the append and the RocksDB write),
and crash where RocksDB lost everything since its last flush.  Each reopen
picks a restore path (full or incremental).  After every step the store
equals the committed model plus the pending writes; after every reopen, the
committed model.  Segments are tiny so restore crosses segments and the
cleaner has work; ``delete_retention_ms=0`` so tombstones go as soon as the
cleaning barrier allows.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from changelog.config import LogConfig
from changelog.fs import files
from statestore.config import RestoreMode, StoreConfig
from statestore.manager import StateManager
from statestore.serdes import MsgpackSerde, StringSerde
from statestore.stores.typed import KeyValueStore
from tests.statestore.helpers import NO_CLEANER, engine_of
from tests.statestore.machines import MODES, RestartingMachine

KEYS = st.sampled_from(["k0", "k1", "k2"])
VALUES = st.integers(min_value=0, max_value=1000) | st.text(max_size=5)

LOG = LogConfig(segment_bytes=300, index_interval_bytes=64, delete_retention_ms=0)
"""About three small batches per segment."""


class StoreMachine(RestartingMachine):
    """Drives one store; the model is ``committed`` plus ``pending``."""

    name = "kv"
    log_config = LOG
    tmp_prefix = "statestore-stateful-"

    def __init__(self) -> None:
        self.committed: dict[str, Any] = {}
        self.store: KeyValueStore[str, Any]
        super().__init__()

    # ------------------------------------------------------------ helpers

    def _new_manager(self) -> StateManager:
        return StateManager(self.state_dir, config=NO_CLEANER, log_config=self.log_config)

    def _open_store(self, config: StoreConfig) -> Any:
        return self.manager.store(
            self.name, key_serde=StringSerde(), value_serde=MsgpackSerde(), config=config
        )

    def _engine(self) -> Any:
        return engine_of(self.store)

    def _check_committed(self) -> None:
        assert dict(self.store.items()) == self.committed

    def _expected(self) -> dict[str, Any]:
        return self._with_pending(self.committed)

    # ------------------------------------------------------------ writes

    @rule(key=KEYS, value=VALUES)
    def put(self, key: str, value: Any) -> None:
        self.store[key] = value
        self.pending[key] = value

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        old = self.store.delete(key)
        assert old == self._expected().get(key)
        self.pending[key] = None

    @rule(key=KEYS, value=VALUES)
    def put_if_absent(self, key: str, value: Any) -> None:
        existing = self._expected().get(key)
        assert self.store.put_if_absent(key, value) == existing
        if existing is None:
            self.pending[key] = value

    @rule()
    def commit(self) -> None:
        self.store.commit()
        self.committed = self._expected()
        self.pending = {}

    @rule()
    def abort(self) -> None:
        self.store.abort()
        self.pending = {}

    @rule(key=KEYS)
    def delete_commit_compact(self, key: str) -> None:
        """The tombstone a stale RocksDB needs is written and then offered to the cleaner."""
        self.delete(key)
        self.commit()
        self.compact()

    # ------------------------------------------------------------ restarts

    @rule(mode=MODES)
    def crash_before_the_append(self, mode: RestoreMode) -> None:
        """The process dies at the first file-system step of a commit: nothing of it survives."""

        def die(step: str, path: Path) -> None:
            raise files.SimulatedCrash(step)

        if not self.pending:
            return
        try:
            with files.inject_faults(die):
                self.store.commit()
        except files.SimulatedCrash:
            pass
        else:  # pragma: no cover - the commit must reach the file system
            raise AssertionError("commit wrote nothing")
        self.manager.crash()
        self._open(mode)

    @rule(mode=MODES)
    def crash_after_the_append(self, mode: RestoreMode) -> None:
        """The changelog has the batch, RocksDB never saw it: the commit survives."""
        if not self.pending:
            return
        engine = engine_of(self.store)

        def die(*_args: object, **_kwargs: object) -> None:
            raise files.SimulatedCrash("after append")

        engine.write = die
        with contextlib.suppress(files.SimulatedCrash):
            self.store.commit()
        self.committed = self._expected()
        self.manager.crash()
        self._open(mode)

    # ------------------------------------------------------------ checks

    @invariant()
    def store_equals_model(self) -> None:
        expected = self._expected()
        assert dict(self.store.items()) == expected
        assert list(self.store.keys()) == sorted(expected)
        for key in ("k0", "k3", "k9"):
            assert self.store.get(key) == expected.get(key)


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(stateful_step_count=30)  # examples: the profile's
TestStoreMachine.pytestmark = [pytest.mark.slow]  # a long state machine: the slow tier


class IncrementalMachine(RuleBasedStateMachine):
    """A narrower machine for the cleaning barrier: incremental restore only, RocksDB rollbacks.

    Its few rules make the dangerous sequence (a key RocksDB durably holds is
    deleted, the tombstone is offered to the cleaner, then RocksDB falls back
    to its last flush) likely, so a cleaner that removed a tombstone the store
    still needs is caught.
    """

    def __init__(self) -> None:
        super().__init__()
        self.inner = StoreMachine()
        self.inner.reopen("incremental")

    def teardown(self) -> None:
        self.inner.teardown()

    @rule(key=KEYS, value=VALUES)
    def put_commit(self, key: str, value: Any) -> None:
        self.inner.put(key, value)
        self.inner.commit()

    @rule(key=KEYS)
    def delete_commit_compact(self, key: str) -> None:
        self.inner.delete_commit_compact(key)

    @rule()
    def reopen(self) -> None:
        self.inner.reopen("incremental")

    @rule()
    def crash_losing_unflushed_rocksdb_writes(self) -> None:
        self.inner.crash_losing_unflushed_rocksdb_writes()

    @invariant()
    def store_equals_model(self) -> None:
        self.inner.store_equals_model()


TestIncrementalMachine = IncrementalMachine.TestCase
TestIncrementalMachine.settings = settings(stateful_step_count=20)
TestIncrementalMachine.pytestmark = [pytest.mark.slow]  # a long state machine: the slow tier
