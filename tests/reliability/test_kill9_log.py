"""kill -9 at random moments against a bare changelog ``Log``: appends, rolls, compaction, recovery.

Each trial is a fresh partition directory and a chain of cycles: a writer
process (:mod:`tests.reliability.writers`) recovers the log, appends commits
(one batch each) and acknowledges each one; the parent SIGKILLs it at a
random moment, reopens the log in process and checks that the state equals
the model at one commit boundary ``>=`` the last acknowledged commit.

Modes: ``append`` (default segments), ``roll`` (2 KiB segments: a roll every
few commits), ``compaction`` (tiny segments and a thread cleaning
continuously, ``delete_retention_ms=0``), ``restore`` (after a killed writer,
a reopening process is killed during its recovery, then the parent recovers).

CI size: ``STATESTORE_CI_TRIALS`` trials per mode (default 3); soak:
``STATESTORE_SOAK_TRIALS=200 .venv/bin/python -m pytest -m slow tests/reliability``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from changelog import LogConfig
from changelog.log.log import Log
from tests.reliability import stats
from tests.reliability.conftest import CI_TRIALS, SOAK_TRIALS
from tests.reliability.model import ModelCache, seq_of
from tests.reliability.writers import (
    PARTITION_DIR,
    log_reopener,
    log_writer,
    new_harness,
    read_log_state,
)

SMALL: dict[str, Any] = {
    "segment_bytes": 2048,
    "index_interval_bytes": 256,
    "segment_index_bytes": 4096,
}
MODES: dict[str, dict[str, Any]] = {
    "append": {"config": {}, "compact": False},
    "roll": {"config": SMALL, "compact": False},
    "compaction": {
        "config": {**SMALL, "delete_retention_ms": 0, "min_cleanable_dirty_ratio": 0.0},
        "compact": True,
    },
    # default segment size: the recovery point stays at the last clean close, so
    # recovery re-validates (and the kill can interrupt) the whole active segment
    "restore": {"config": {"index_interval_bytes": 256}, "compact": False},
}
CYCLES = 2
LEFTOVER_SUFFIXES = (".cleaned", ".swap", ".deleted")


def _leftovers(partition: Path) -> int:
    if not partition.exists():
        return 0
    return sum(1 for p in partition.iterdir() if p.name.endswith(LEFTOVER_SUFFIXES))


def verify(
    partition: Path, config: dict[str, Any], cache: ModelCache, last_ack: int, kind: str
) -> int:
    """Reopen the log, compare it with the model, record the figures, then assert; returns the seq."""
    with Log.open(partition, config=LogConfig(**config)) as log:
        state = read_log_state(log)
    seq = seq_of(state)
    lost = max(0, last_ack - seq)
    wrong = int(state != cache.after(seq))
    stats.record(kind, lost=lost, wrong=wrong)
    assert seq >= last_ack, f"acknowledged commit {last_ack} lost: the log ends at commit {seq}"
    assert state == cache.after(seq), f"state is not the model after commit {seq}"
    return seq


def run_trial(tmp_path: Path, mode: str, trial: int, kind: str) -> None:
    """One trial: ``CYCLES`` kill/recover cycles on a fresh directory."""
    rng = random.Random(f"{mode}-{trial}")
    seed = rng.randrange(2**31)
    settings = MODES[mode]
    config = settings["config"]
    harness = new_harness(tmp_path / f"{mode}-{trial}")
    partition = harness.state_dir / PARTITION_DIR
    cache = ModelCache(seed)
    last_ack = -1
    for _ in range(CYCLES):
        run = harness.run(
            log_writer,
            kwargs={
                "seed": seed,
                "config": config,
                "compact": settings["compact"],
                "max_commits": 10**6,
            },
            kill_at_mark="writing",
            kill_delay_s=rng.uniform(0.0, 0.4),
        )
        assert run.killed, "the writer finished before its kill point"
        last_ack = max(last_ack, run.last_ack if run.acks else -1)
        stats.record(kind, faults=1, acked=run.ack_count)
        stats.note(kind, "kills_with_cleaner_files_left", int(_leftovers(partition) > 0))
        if "compacting" in run.marks:
            stats.note(kind, "kills_while_cleaning")
        if mode == "restore":
            reopen = harness.run(
                log_reopener,
                kwargs={"config": config},
                kill_at_mark="restoring",
                kill_delay_s=rng.uniform(0.0, 0.01),
            )
            stats.record(kind, faults=int(reopen.killed))
            stats.note(
                kind,
                "kills_before_open_returned",
                int(reopen.killed and "opened" not in reopen.marks),
            )
        verify(partition, config, cache, last_ack, kind)
    stats.record(kind, trials=1)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("trial", range(CI_TRIALS))
def test_kill9_log(tmp_path: Path, mode: str, trial: int) -> None:
    run_trial(tmp_path, mode, trial, f"kill9.log.{mode}")


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_kill9_log_soak(tmp_path: Path, mode: str) -> None:
    for trial in range(SOAK_TRIALS):
        run_trial(tmp_path, mode, 10_000 + trial, f"kill9.log.{mode}.soak")
