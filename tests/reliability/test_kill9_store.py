"""kill -9 at random moments against a StateManager store: commits, rolls, background cleaning, restore.

Like :mod:`tests.reliability.test_kill9_log` but through the whole stack: the
writer (:func:`tests.reliability.writers.store_writer`) opens a
``StateManager``, restores the store, and commits each workload commit in a
``store.transaction()``, acknowledging it after the commit returned.  After
the SIGKILL the parent reopens the state directory twice, once with the
trial's restore mode and once with a full replay, and both must hold exactly
the model at one commit boundary ``>=`` the last acknowledged commit.

Modes: ``commit`` (default segments), ``roll`` (2 KiB segments), ``compaction``
(2 KiB segments, the manager's background cleaner running every 5 ms,
``delete_retention_ms=0``), ``restore`` (a second writer is killed while it
restores, before it writes).  Trials alternate the ``full`` and
``incremental`` restore modes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal

import pytest

from statestore.manager import StateManager
from tests.reliability import stats
from tests.reliability.conftest import CI_TRIALS, SOAK_TRIALS
from tests.reliability.model import ModelCache, seq_of
from tests.reliability.writers import (
    manager_kwargs,
    new_harness,
    open_kv,
    read_store_state,
    store_writer,
)

SMALL: dict[str, Any] = {
    "segment_bytes": 2048,
    "index_interval_bytes": 256,
    "segment_index_bytes": 4096,
}
MODES: dict[str, dict[str, Any]] = {
    "commit": {"log_config": {}, "cleaner": False},
    "roll": {"log_config": SMALL, "cleaner": False},
    "compaction": {
        "log_config": {**SMALL, "delete_retention_ms": 0, "min_cleanable_dirty_ratio": 0.0},
        "cleaner": True,
    },
    "restore": {"log_config": SMALL, "cleaner": False},
}
CYCLES = 2
RestoreMode = Literal["full", "incremental"]


def verify_store(
    state_dir: Path,
    settings: dict[str, Any],
    restore_mode: RestoreMode,
    cache: ModelCache,
    last_ack: int,
    kind: str,
) -> int:
    """Reopen with ``restore_mode`` and with a full replay; both must be the model at one boundary."""
    seqs = []
    modes: tuple[RestoreMode, ...] = (restore_mode, "full") if restore_mode != "full" else ("full",)
    for mode in modes:
        with StateManager(
            state_dir, **manager_kwargs(settings["log_config"], cleaner=False)
        ) as manager:
            state = read_store_state(open_kv(manager, mode))
        seq = seq_of(state)
        wrong = int(state != cache.after(seq))
        stats.record(kind, lost=max(0, last_ack - seq), wrong=wrong)
        assert seq >= last_ack, (
            f"{mode} restore: acknowledged commit {last_ack} lost (store at {seq})"
        )
        assert not wrong, f"{mode} restore: state is not the model after commit {seq}"
        seqs.append(seq)
    assert len(set(seqs)) == 1, f"restore modes disagree: {seqs}"
    return seqs[0]


def run_store_trial(tmp_path: Path, mode: str, trial: int, kind: str) -> None:
    """One trial: ``CYCLES`` kill/recover cycles on a fresh state directory."""
    rng = random.Random(f"store-{mode}-{trial}")
    seed = rng.randrange(2**31)
    restore_mode: RestoreMode = "incremental" if trial % 2 else "full"
    settings = MODES[mode]
    harness = new_harness(tmp_path / f"{mode}-{trial}")
    cache = ModelCache(seed)
    last_ack = -1
    writer_kwargs = {
        "seed": seed,
        "log_config": settings["log_config"],
        "restore_mode": restore_mode,
        "cleaner": settings["cleaner"],
        "max_commits": 10**6,
    }
    for _ in range(CYCLES):
        run = harness.run(
            store_writer,
            kwargs=writer_kwargs,
            kill_at_mark="writing",
            kill_delay_s=rng.uniform(0.0, 0.4),
        )
        assert run.killed, "the writer finished before its kill point"
        last_ack = max(last_ack, run.last_ack if run.acks else -1)
        stats.record(kind, faults=1, acked=run.ack_count)
        if mode == "restore":
            again = harness.run(
                store_writer,
                kwargs=writer_kwargs,
                kill_at_mark="restoring",
                kill_delay_s=rng.uniform(0.0, 0.08),
            )
            stats.record(kind, faults=1, acked=again.ack_count)
            last_ack = max(last_ack, again.last_ack if again.acks else -1)
            stats.note(kind, "kills_during_restore", int("restored" not in again.marks))
        verify_store(harness.state_dir, settings, restore_mode, cache, last_ack, kind)
    stats.record(kind, trials=1)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("trial", range(CI_TRIALS))
def test_kill9_store(tmp_path: Path, mode: str, trial: int) -> None:
    run_store_trial(tmp_path, mode, trial, f"kill9.store.{mode}")


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_kill9_store_soak(tmp_path: Path, mode: str) -> None:
    for trial in range(SOAK_TRIALS):
        run_store_trial(tmp_path, mode, 10_000 + trial, f"kill9.store.{mode}.soak")
