"""A Hypothesis state machine over commits that span several stores and partitions.

Stores: ``a`` (one partition), ``b`` (three partitions), and, when the
manager has a transaction coordinator, the built-in metadata store, which
holds a commit counter as an application would hold its input position.
The model is a plain dict of *committed* ``(store, key) -> value`` plus the
pending writes; after every step each store reads as committed + pending
(read-your-writes), after every reopen as committed.

Steps: put and delete in any store; commit (``manager.commit()``, or a
``with manager.transaction():`` block that writes some more first); abort
(the block raises: every pending write is discarded; without a coordinator,
``abort()`` on every store); reopen (clean close); crash
(``StateManager.crash``, as ``kill -9``: no flush, no markers); clean (roll
and two forced cleaning passes on every changelog, the coordinator's log
included, ``delete_retention_ms=0`` so tombstones and markers go as early as
the rules allow); and two mid-commit crashes:

* at the k-th file-system step of a commit (the fault hook of
  :mod:`changelog.fs.files` raises :class:`~changelog.fs.files.SimulatedCrash`,
  so nothing more is written), then ``crash()`` and reopen;
* (coordinator only) after a numbered step of the coordinator's protocol
  (``COMMIT_STEPS``, its own fault hook), then ``crash()`` and reopen.

After a mid-commit crash the commit in flight is all or nothing: the reopened
stores must equal either the model before it or the model after it, never a
mix.  Without a coordinator ``manager.commit()`` is atomic per partition only
(docs/concepts.md, "What is atomic today"), so the machine then checks that
weaker promise: each partition is wholly before or wholly after.

Bounded for CI: 15 examples of at most 20 steps.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from changelog.fs import files
from statestore.manager import StateManager
from statestore.partitioner import partition_for
from tests.statestore.helpers import NO_CLEANER

STORES = {"a": 1, "b": 3}
"""Store name -> partitions."""
KEYS = st.sampled_from([f"k{i}" for i in range(6)])
VALUES = st.integers(min_value=0, max_value=99) | st.text(max_size=4)
STORE_NAMES = st.sampled_from(sorted(STORES))
WRITES = st.lists(st.tuples(STORE_NAMES, KEYS, VALUES), min_size=2, max_size=6)
"""The writes a mid-commit crash adds first, so that its commit spans several partitions."""
LOG = LogConfig(segment_bytes=300, index_interval_bytes=64, delete_retention_ms=0)
"""About three small batches per segment: restores cross segments, the cleaner has work."""

HAS_COORDINATOR = hasattr(StateManager, "transaction")
if HAS_COORDINATOR:  # pragma: no branch - the coordinator of issue 14
    from statestore.txn.coordinator import COMMIT_STEPS  # type: ignore[import-not-found, unused-ignore]
else:
    COMMIT_STEPS = ()

META = "__metadata"
"""The model's name for the metadata store (coordinator only)."""

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
        if HAS_COORDINATOR:
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
        if HAS_COORDINATOR:
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
        if HAS_COORDINATOR:
            assert found in (before, after), _mix(found, before, after)
            self.committed = found
            return
        # Without a coordinator: each partition is wholly before or wholly after.
        result: Model = {}
        for name, partitions in STORES.items():
            for partition in range(partitions):
                mine = {
                    k: v for k, v in found.items() if k[0] == name and self._part(k) == partition
                }
                old = {
                    k: v for k, v in before.items() if k[0] == name and self._part(k) == partition
                }
                new = {
                    k: v for k, v in after.items() if k[0] == name and self._part(k) == partition
                }
                assert mine in (old, new), (name, partition, _mix(mine, old, new))
                result.update(mine)
        self.committed = result

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

    @precondition(lambda _self: HAS_COORDINATOR)
    @rule(name=STORE_NAMES, key=KEYS, value=VALUES)
    def transaction(self, name: str, key: str, value: Any) -> None:
        with self.manager.transaction():  # type: ignore[attr-defined]
            self.put(name, key, value)
            self._stage_position()
        self.committed = self._expected()
        self.pending = {}
        self.commits += 1

    @rule(name=STORE_NAMES, key=KEYS, value=VALUES)
    def abort(self, name: str, key: str, value: Any) -> None:
        if HAS_COORDINATOR:
            with contextlib.suppress(Boom), self.manager.transaction():  # type: ignore[attr-defined]
                self.put(name, key, value)
                raise Boom
        else:
            self.put(name, key, value)
            for store in self.stores.values():
                store.abort()
        self.pending = {}

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

        with contextlib.suppress(files.SimulatedCrash), files.inject_faults(die):
            self.manager.commit()
        self._reopen_after_crash(before, after)

    @precondition(lambda _self: HAS_COORDINATOR)
    @rule(writes=WRITES, step=st.sampled_from(COMMIT_STEPS or ("-",)))
    def crash_after_a_protocol_step(self, writes: list[tuple[str, str, Any]], step: str) -> None:
        """The process dies right after step ``step`` of the coordinator's commit protocol."""
        for name, key, value in writes:
            self.put(name, key, value)
        self._stage_position()
        before, after = dict(self.committed), self._expected()

        def hook(name: str) -> None:
            if name == step:
                raise StepCrash(name)

        coordinator = self.manager.coordinator  # type: ignore[attr-defined]
        coordinator.fault_hook = hook
        try:
            with contextlib.suppress(StepCrash):
                self.manager.commit()
        finally:
            coordinator.fault_hook = None
        self._reopen_after_crash(before, after)

    # ------------------------------------------------------------ checks

    @invariant()
    def stores_equal_model(self) -> None:
        assert self._read() == self._expected()


def _all_changelogs(manager: StateManager) -> Iterator[Any]:
    for store in manager.stores.values():
        yield from store.changelogs
    coordinator = getattr(manager, "coordinator", None)
    if coordinator is not None:
        yield coordinator.log


def _mix(found: Model, before: Model, after: Model) -> str:
    """Which keys of ``found`` match the old model and which the new one (for the message)."""
    keys = sorted(set(found) | set(before) | set(after))
    old = [k for k in keys if found.get(k) == before.get(k) != after.get(k)]
    new = [k for k in keys if found.get(k) == after.get(k) != before.get(k)]
    other = [k for k in keys if found.get(k) not in (before.get(k), after.get(k))]
    return f"a mix: as before {old}, as after {new}, neither {other}"


TestTransactionMachine = TransactionMachine.TestCase
TestTransactionMachine.settings = settings(max_examples=15, stateful_step_count=20)
