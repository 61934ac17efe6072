"""Disk full, simulated with ``RLIMIT_FSIZE`` in a child process (SIGXFSZ ignored: writes fail with EFBIG).

The child appends (or commits) until the limit makes one fail.  Checked:

- the failing append/commit raises a clear typed error (``LogStorageError``
  with ``errno`` EFBIG and the segment path; ``CommitFailedError`` with the
  changelog error as its cause); the log is failed from then on (every call
  raises ``LogFailedError``) until it is reopened, in the same process;
- nothing acknowledged before it is lost, in the failing process itself and
  after a restart without the limit ("space returned");
- the state is exactly the model at a commit boundary (the failed commit is
  wholly absent or wholly present; never half);
- after the restart the writer continues normally.

The limit is per file, so it bites the file that grows: the active segment.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from changelog import LogConfig
from changelog.log.log import Log
from statestore.manager import StateManager
from tests.reliability import stats
from tests.reliability.model import ModelCache, seq_of
from tests.reliability.writers import (
    PARTITION_DIR,
    disk_full_log_writer,
    disk_full_store_writer,
    log_writer,
    manager_kwargs,
    new_harness,
    open_kv,
    read_log_state,
    read_store_state,
)

SEED = 23


@pytest.mark.parametrize("limit_bytes", [16 * 1024, 64 * 1024 + 37])
def test_disk_full_on_log_append(tmp_path: Path, limit_bytes: int) -> None:
    config: dict[str, Any] = {"segment_index_bytes": 4096}
    harness = new_harness(tmp_path / "state")
    run = harness.run(
        disk_full_log_writer,
        kwargs={"seed": SEED, "config": config, "limit_bytes": limit_bytes},
    )
    outcome = run.result
    cache = ModelCache(SEED)
    last_ack = run.last_ack
    assert run.ack_count > 10
    with Log.open(harness.state_dir / PARTITION_DIR, config=LogConfig(**config)) as log:
        state = read_log_state(log)
    seq = seq_of(state)
    stats.record(
        "disk-full.log",
        trials=1,
        faults=1,
        acked=run.ack_count,
        lost=max(0, last_ack - seq),
        wrong=int(state != cache.after(seq)),
    )
    assert outcome["error"] == "LogStorageError"
    assert outcome["errno"] == errno.EFBIG
    assert outcome["path"].endswith(".log")
    assert outcome["failed"] == last_ack + 1
    assert outcome["read_after_failure"] == "LogFailedError", outcome
    assert outcome["second_append"] == "LogFailedError", outcome
    assert outcome.get("read_error") is None, outcome.get("read_error")
    assert outcome["seq_after_failure"] == last_ack, "the failing process lost or gained a commit"
    assert seq >= last_ack
    assert state == cache.after(seq)
    assert seq == last_ack, "the commit that raised is visible after restart"
    # space is back: the writer continues where the log ends
    again = harness.run(
        log_writer, kwargs={"seed": SEED, "config": config, "compact": False, "max_commits": 20}
    )
    assert again.acks[0] == seq + 1
    with Log.open(harness.state_dir / PARTITION_DIR, config=LogConfig(**config)) as log:
        assert read_log_state(log) == cache.after(again.last_ack)


def test_disk_full_on_store_commit(tmp_path: Path) -> None:
    log_config: dict[str, Any] = {"segment_index_bytes": 4096}
    harness = new_harness(tmp_path / "state")
    run = harness.run(
        disk_full_store_writer,
        kwargs={"seed": SEED, "log_config": log_config, "limit_bytes": 64 * 1024},
    )
    outcome = run.result
    cache = ModelCache(SEED)
    last_ack = run.last_ack
    with StateManager(harness.state_dir, **manager_kwargs(log_config, cleaner=False)) as manager:
        state = read_store_state(open_kv(manager, "full"))
    seq = seq_of(state)
    stats.record(
        "disk-full.store",
        trials=1,
        faults=1,
        acked=run.ack_count,
        lost=max(0, last_ack - seq),
        wrong=int(state != cache.after(seq)),
    )
    assert run.ack_count > 10
    assert outcome["error"] == "CommitFailedError", outcome
    assert outcome["cause"] == "LogStorageError", outcome
    assert outcome["errno"] == errno.EFBIG
    assert outcome["failed"] == last_ack + 1
    assert seq >= last_ack
    assert state == cache.after(seq)
    assert seq == last_ack, "the commit that raised is visible after restart"
