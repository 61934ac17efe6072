"""Harness pieces the tests of stores in time share.

:class:`RestartingMachine`: the restarts of a Hypothesis state machine over one store
(reopen, crash, crash with RocksDB back at its last flush, compact).  :func:`kill9_trials`:
a writer process killed with SIGKILL after some acknowledged commits, again and again.
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from statestore.config import RestoreMode, StoreConfig
from statestore.manager import StateManager
from statestore.serdes import LongSerde
from tests.statestore.helpers import NO_CLEANER, engine_of

MODES = st.sampled_from(["full", "incremental"])
NOW = 10**9


class RestartingMachine(RuleBasedStateMachine):
    """Open/close/crash/compact of one store in time; subclasses open it and check it.

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

    def _open(self, mode: RestoreMode) -> None:
        self.manager = StateManager(
            self.state_dir, lambda: self.clock_ms, config=NO_CLEANER, log_config=self.log_config
        )
        self.store = self._open_store(StoreConfig(restore_mode=mode, flush_interval_records=10**9))
        self.pending: dict[Any, Any] = {}
        self._check_committed()
        self.snapshot = None
        if mode == "incremental":
            self.snapshots += 1
            self.snapshot = self.root / f"snapshot-{self.snapshots}"
            engine_of(self.store.inner).checkpoint(self.snapshot)

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
        clean_log(log, force=True)
        clean_log(log, force=True)

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
        assert self.snapshot is not None
        snapshot = self.snapshot
        self.manager.crash()
        rocksdb = self.state_dir / f"{self.name}-rocksdb-0"
        shutil.rmtree(rocksdb)
        shutil.copytree(snapshot, rocksdb)
        self._open("incremental")


def kill9_trials(
    writer: str, tmp_path: Path, mode: str, acks: tuple[int, int], trials: int = 4
) -> Iterator[tuple[int, Path, list[int]]]:
    """``trials`` runs of :func:`kill9_writer` on one state directory (random: seeded by
    ``mode``): after each kill, the trial, the state directory and the acknowledged commits."""
    state_dir = tmp_path / "state"
    rng = random.Random(mode)
    for trial in range(trials):
        err_path = tmp_path / f"writer-{trial}.err"
        yield trial, state_dir, kill9_writer(writer, state_dir, mode, err_path, rng, acks)


def kill9_writer(
    writer: str,
    state_dir: Path,
    mode: str,
    err_path: Path,
    rng: random.Random,
    acks: tuple[int, int],
) -> list[int]:
    """Run the ``writer`` source on ``state_dir`` and ``mode``; SIGKILL it after a random
    number (within ``acks``) of the commit numbers it printed; every number it printed."""
    with err_path.open("w") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", writer, str(state_dir), mode],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        assert child.stdout is not None
        acked: list[int] = []
        for _ in range(rng.randint(*acks)):  # kill after a random number of acknowledgements
            line = child.stdout.readline()
            if not line:
                break
            acked.append(int(line))
        child.send_signal(signal.SIGKILL)
        # the rest through the same buffered reader (readline may have read ahead)
        acked += [int(line) for line in child.stdout.read().splitlines() if line.strip()]
        child.stdout.close()
        child.wait(timeout=120)
    assert acked, err_path.read_text()
    return acked


def open_window_store(manager: StateManager, config: StoreConfig) -> Any:
    """The kill -9 writers' window store ``win`` (10 ms windows, 2 s retention)."""
    return manager.window_store(
        "win",
        window_size_ms=10,
        retention_ms=2_000,
        segment_interval_ms=100,
        value_serde=LongSerde(),
        config=config,
    )
