"""A Hypothesis state machine over transactions that span several stores and partitions.

Stores: ``a`` (one partition), ``b`` (three partitions), and the built-in
metadata store, which every commit bumps a position in (as an application
keeps its input position there).  The model is a plain dict of *committed*
``(store, key) -> value`` plus the pending writes; after every step each
store reads as committed + pending (read-your-writes), after every reopen as
committed.

Steps: put and delete in any store; commit (``manager.commit()``, or a
``with manager.transaction():`` block that writes some more first); abort
(the block raises: every pending write is discarded); a scoped block
``manager.transaction(*some stores)`` that commits, or raises, with a write
that may fall outside its stores (only its stores' pending writes are
committed or discarded; the rest stay pending); reopen (clean close);
crash (``StateManager.crash``, as ``kill -9``: no flush, no markers); clean
(roll and two forced cleaning passes on every changelog, the coordinator's
``__transaction_state-0`` included, ``delete_retention_ms=0`` so tombstones and
markers go as early as the rules allow); and two mid-commit crashes, each
after a few more writes over several stores:

* at the k-th file-system step of the commit (the fault hook of
  :mod:`changelog.fs.files` raises :class:`~changelog.fs.files.SimulatedCrash`,
  so nothing more is written), then ``crash()`` and reopen: the commit in
  flight is all or nothing, the reopened stores equal the model before it or
  the model after it, never a mix;
* right after a numbered step of the coordinator's protocol (its own fault
  hook, ``COMMIT_STEPS``), then ``crash()`` and reopen: exactly the model
  after it when the step was the decision (T3) or later, exactly the model
  before it otherwise.

Bounded for CI: 15 examples of at most 20 steps.  Forcing the all-or-nothing
check on the per-store commit loop that came before the coordinator, the
machine found a mix within its examples (``a`` committed, ``b`` not).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from changelog.fs import files
from statestore.manager import StateManager
from statestore.partitioner import partition_for
from statestore.txn.coordinator import COMMIT_STEPS
from tests.statestore.helpers import NO_CLEANER

STORES = {"a": 1, "b": 3}
"""Store name -> partitions."""
KEYS = st.sampled_from([f"k{i}" for i in range(6)])
VALUES = st.integers(min_value=0, max_value=99) | st.text(max_size=4)
STORE_NAMES = st.sampled_from(sorted(STORES))
WRITES = st.lists(st.tuples(STORE_NAMES, KEYS, VALUES), min_size=2, max_size=6)
"""The writes a mid-commit crash adds first, so that its commit spans several partitions."""
SCOPES = st.frozensets(st.sampled_from(["__metadata", *sorted(STORES)]), min_size=1)
"""The stores a scoped block (``manager.transaction(*stores)``) names."""
LOG = LogConfig(segment_bytes=300, index_interval_bytes=64, delete_retention_ms=0)
"""About three small batches per segment: restores cross segments, the cleaner has work."""

META = "__metadata"
"""The model's name for the metadata store."""

Model = dict[tuple[str, str], Any]


class Boom(Exception):  # noqa: N818 - what the aborted transaction raises
    """Raised inside ``with manager.transaction():`` to abort it."""


class StepCrash(BaseException):
    """Raised by the coordinator's fault hook: the process "stops" after that step."""


class TransactionMachine(RuleBasedStateMachine):
    """Drives several stores through one manager; the model is ``committed`` plus ``pending``."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="statestore-txn-stateful-"))
        self.state_dir = self.root / "state"
        self.committed: Model = {}
        self.pending: Model = {}
        self.commits = 0
        self.manager: StateManager
        self.stores: dict[str, Any] = {}
        self._open()

    # ------------------------------------------------------------ helpers

    def _open(self, *, check: bool = True) -> None:
        self.manager = StateManager(self.state_dir, config=NO_CLEANER, log_config=LOG)
        self.stores = {
            name: self.manager.store(name, partitions=partitions)
            for name, partitions in STORES.items()
        }
        self.stores[META] = self.manager.metadata
        self.pending = {}
        if check:
            assert self._read() == self.committed

    def _read(self) -> Model:
        return {
            (name, key): value
            for name, store in self.stores.items()
            for key, value in store.items()
        }

    def _expected(self) -> Model:
        view = dict(self.committed)
        for key, value in self.pending.items():
            if value is None:
                view.pop(key, None)
            else:
                view[key] = value
        return view

    def _stage_position(self) -> None:
        """What an application does in every transaction: bump its input position."""
        position = self._expected().get((META, "position"), 0) + 1
        self.stores[META]["position"] = position
        self.pending[(META, "position")] = position

    def _partition_of(self, name: str, key: str) -> int:
        return partition_for(key.encode(), STORES.get(name, 1))  # keys are str: UTF-8

    def _reopen_after_crash(self, before: Model, after: Model) -> None:
        """Crash, reopen, and check the commit in flight was all or nothing."""
        self.manager.crash()
        self._open(check=False)
        found = self._read()
        assert found in (before, after), _mix(found, before, after)
        self.committed = found

    def _part(self, key: tuple[str, str]) -> int:
        return self._partition_of(key[0], key[1])

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.manager.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ writes

    @rule(name=STORE_NAMES, key=KEYS, value=VALUES)
    def put(self, name: str, key: str, value: Any) -> None:
        self.stores[name][key] = value
        self.pending[(name, key)] = value

    @rule(name=STORE_NAMES, key=KEYS)
    def delete(self, name: str, key: str) -> None:
        old = self.stores[name].delete(key)
        assert old == self._expected().get((name, key))
        self.pending[(name, key)] = None

    # ------------------------------------------------------------ commit and abort

    @rule()
    def commit(self) -> None:
        self._stage_position()
        self.manager.commit()
        self.committed = self._expected()
        self.pending = {}
        self.commits += 1

    @rule(name=STORE_NAMES, key=KEYS, value=VALUES)
    def transaction(self, name: str, key: str, value: Any) -> None:
        with self.manager.transaction():
            self.put(name, key, value)
            self._stage_position()
        self.committed = self._expected()
        self.pending = {}
        self.commits += 1

    @rule(name=STORE_NAMES, key=KEYS, value=VALUES)
    def abort(self, name: str, key: str, value: Any) -> None:
        with contextlib.suppress(Boom), self.manager.transaction():
            self.put(name, key, value)
            raise Boom
        self.pending = {}

    @rule(scope=SCOPES, name=STORE_NAMES, key=KEYS, value=VALUES)
    def scoped_transaction(self, scope: frozenset[str], name: str, key: str, value: Any) -> None:
        """``manager.transaction(*scope)``: commits the scoped stores' pending writes only (the
        put may fall outside the scope: it stays pending)."""
        with self.manager.transaction(*(self.stores[n] for n in sorted(scope))):
            self.put(name, key, value)
            if META in scope:
                self._stage_position()
        self._settle(scope, commit=True)

    @rule(scope=SCOPES, name=STORE_NAMES, key=KEYS, value=VALUES)
    def scoped_abort(self, scope: frozenset[str], name: str, key: str, value: Any) -> None:
        """A scoped block that raises discards the scoped stores' pending writes only."""
        with (
            contextlib.suppress(Boom),
            self.manager.transaction(*(self.stores[n] for n in sorted(scope))),
        ):
            self.put(name, key, value)
            raise Boom
        self._settle(scope, commit=False)

    def _settle(self, scope: frozenset[str], *, commit: bool) -> None:
        for key, value in [(k, v) for k, v in self.pending.items() if k[0] in scope]:
            del self.pending[key]
            if not commit:
                continue
            if value is None:
                self.committed.pop(key, None)
            else:
                self.committed[key] = value
        if commit:
            self.commits += 1

    # ------------------------------------------------------------ restarts and cleaning

    @rule()
    def reopen(self) -> None:
        self.manager.close()
        self._open()

    @rule()
    def crash(self) -> None:
        self.manager.crash()
        self._open()

    @rule()
    def clean(self) -> None:
        for log in _all_changelogs(self.manager):
            log.roll()
            clean_log(log, force=True)  # a tombstone (or marker) survives its first pass ...
            clean_log(log, force=True)  # ... and may go in the next (delete_retention_ms=0)

    @rule(writes=WRITES, k=st.integers(min_value=1, max_value=16))
    def crash_at_a_file_step(self, writes: list[tuple[str, str, Any]], k: int) -> None:
        """A few more writes over several stores, then the process dies at the k-th file-system
        mutation of the commit (or not at all, if the commit has fewer)."""
        for name, key, value in writes:
            self.put(name, key, value)
        self._stage_position()
        before, after = dict(self.committed), self._expected()
        seen = 0

        def die(step: str, path: Path) -> None:
            nonlocal seen
            seen += 1
            if seen == k:
                raise files.SimulatedCrash(f"{step} {path.name}")

        with _crashed(), files.inject_faults(die):
            self.manager.commit()
        self._reopen_after_crash(before, after)

    @rule(writes=WRITES, step=st.sampled_from(COMMIT_STEPS))
    def crash_after_a_protocol_step(self, writes: list[tuple[str, str, Any]], step: str) -> None:
        """The process dies right after step ``step`` of the coordinator's commit protocol: a
        transaction is visible after reopening exactly when the step was T3 (the decision) or
        later (``docs/recovery.md``); a one-partition commit is a plain batch (no steps)."""
        for name, key, value in writes:
            self.put(name, key, value)
        self._stage_position()
        before, after = dict(self.committed), self._expected()
        partitions = {(name, self._part((name, key))) for name, key in self.pending}

        def hook(name: str) -> None:
            if name == step:
                raise StepCrash(name)

        coordinator = self.manager.coordinator
        coordinator.fault_hook = hook
        try:
            with contextlib.suppress(StepCrash):
                self.manager.commit()
        finally:
            coordinator.fault_hook = None
        if len(partitions) < 2:  # one partition: a plain batch, the steps never ran
            self._reopen_after_crash(before, after)
        elif COMMIT_STEPS.index(step) >= COMMIT_STEPS.index("T3"):  # the decision: committed
            self._reopen_after_crash(after, after)
        else:
            self._reopen_after_crash(before, before)

    # ------------------------------------------------------------ checks

    @invariant()
    def stores_equal_model(self) -> None:
        assert self._read() == self._expected()


@contextlib.contextmanager
def _crashed() -> Iterator[None]:
    """Swallow the simulated crash, wherever it struck: T3 (the decision) fails the
    coordinator and lets a ``SimulatedCrash`` through as it is, like every other step."""
    with contextlib.suppress(files.SimulatedCrash):
        yield


def _all_changelogs(manager: StateManager) -> Iterator[Any]:
    for store in manager.stores.values():
        yield from store.changelogs
    yield manager.coordinator.log


def _mix(found: Model, before: Model, after: Model) -> str:
    """Which keys of ``found`` match the old model and which the new one (for the message)."""
    keys = sorted(set(found) | set(before) | set(after))
    old = [k for k in keys if found.get(k) == before.get(k) != after.get(k)]
    new = [k for k in keys if found.get(k) == after.get(k) != before.get(k)]
    other = [k for k in keys if found.get(k) not in (before.get(k), after.get(k))]
    return f"a mix: as before {old}, as after {new}, neither {other}"


TestTransactionMachine = TransactionMachine.TestCase
TestTransactionMachine.settings = settings(max_examples=15, stateful_step_count=20)
TestTransactionMachine.pytestmark = [pytest.mark.slow]  # a long state machine: the slow tier
