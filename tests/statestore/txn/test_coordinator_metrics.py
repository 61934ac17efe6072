"""The coordinator's metrics: decided, aborted, rolled forward and aborted at open, decision latency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from changelog.config import LogConfig
from statestore.config import StateManagerConfig
from statestore.errors import CommitFailedError
from statestore.manager import StateManager

CONFIG = StateManagerConfig(run_cleaner=False, block_cache_size_bytes=1 << 20)


def transactions(manager: StateManager) -> dict[str, Any]:
    found: dict[str, Any] = manager.metrics()["transactions"]
    return found


class Crash(BaseException):
    """The fault hook's crash."""


def test_decisions_and_aborts_are_counted_and_timed(tmp_path: Path) -> None:
    with StateManager(tmp_path / "state", config=CONFIG) as manager:
        a, b = manager.store("a"), manager.store("b")
        small = manager.store("small", log_config=LogConfig(max_message_bytes=1024))
        a["k"] = 1
        manager.commit()  # one partition: a plain batch, not a transaction
        assert transactions(manager)["transactions-committed-total"] == 0
        for n in range(3):
            with manager.transaction(a, b):
                a["k"], b["k"] = n, n
        a["x"] = 1
        for i in range(8):
            small[f"k{i}"] = "v" * 200  # the batch is over max_message_bytes: T1 fails
        with pytest.raises(CommitFailedError):
            manager.commit()
        found = transactions(manager)
        assert found["transactions-committed-total"] == 3
        assert found["transactions-aborted-total"] == 1
        assert found["transactions-rolled-forward-at-open-total"] == 0
        assert found["transactions-aborted-at-open-total"] == 0
        latency = found["decision-latency"]
        assert latency["count"] == 3
        assert 0 < latency["max"] < 60


@pytest.mark.parametrize(("step", "rolled", "aborted"), [("T3", 2, 0), ("T2", 0, 2)])
def test_recovery_at_open_is_counted_per_partition(
    tmp_path: Path, step: str, rolled: int, aborted: int
) -> None:
    state = tmp_path / "state"
    manager = StateManager(state, config=CONFIG)
    a, b = manager.store("a"), manager.store("b")
    a["k"], b["k"] = 1, 2

    def hook(name: str) -> None:
        if name == step:
            raise Crash(name)

    manager.coordinator.fault_hook = hook
    with pytest.raises(Crash):
        manager.commit()
    manager.crash()
    with StateManager(state, config=CONFIG) as manager:
        manager.store("a")
        manager.store("b")
        found = transactions(manager)
        assert found["transactions-rolled-forward-at-open-total"] == rolled
        assert found["transactions-aborted-at-open-total"] == aborted
        assert found["transactions-committed-total"] == 0


def test_metrics_off_leaves_the_coordinator_unobserved(tmp_path: Path) -> None:
    config = StateManagerConfig(run_cleaner=False, metrics_recording_level="OFF")
    with StateManager(tmp_path / "state", config=config) as manager:
        assert manager.coordinator.decision_observer is None
        a, b = manager.store("a"), manager.store("b")
        a["k"], b["k"] = 1, 2
        manager.commit()
        assert manager.coordinator.totals.committed == 1  # counted all the same, never read
        assert transactions(manager) == {}
