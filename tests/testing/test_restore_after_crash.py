"""statestore.testing against real stores: SIGKILL a service, restore, check; in-process crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from statestore.errors import InvalidStateStoreError
from statestore.manager import StateManager
from statestore.testing import CrashHarness, RestoredStores, simulate_crash
from tests.testing import services


def _check_counters(stores: RestoredStores, last_ack: int) -> int:
    counters = stores["counters"]
    if last_ack < 0 and "a" not in counters:
        return -1  # killed before its first commit
    a, b = counters["a"], counters["b"]
    assert a >= last_ack, "an acknowledged commit was lost"
    assert b == -a, "half a commit is visible"
    return int(a)


def test_kill_after_acks_then_restored(crash_harness: CrashHarness) -> None:
    run = crash_harness.run(services.counter_service, args=(10**6,), kill_after_acks=30)
    assert run.killed
    assert run.exitcode == -9
    with crash_harness.restored("counters", value_type=int) as stores:
        assert isinstance(stores.manager, StateManager)
        assert list(stores) == ["counters"]
        assert len(stores) == 1
        _check_counters(stores, run.last_ack)


def test_restart_resumes_and_random_kills_lose_nothing(crash_harness: CrashHarness) -> None:
    last = -1
    for delay in (0.1, 0.5, 1.0):
        run = crash_harness.run(services.counter_service, args=(10**6,), kill_delay_s=delay)
        assert run.killed
        if run.acks:
            assert run.acks[0] == last + 1  # resumed right after what survived
            last = run.last_ack
        with crash_harness.restored("counters", value_type=int) as stores:
            last = _check_counters(stores, last)


def test_kill_during_restore(crash_harness: CrashHarness) -> None:
    crash_harness.run(services.counter_service, args=(300,))
    run = crash_harness.run(services.restoring_service, kill_at_mark="restoring", kill_delay_s=0.0)
    assert run.killed
    with crash_harness.restored("counters", value_type=int) as stores:
        assert _check_counters(stores, 299) == 299


def test_reopen_yields_a_manager(crash_harness: CrashHarness) -> None:
    crash_harness.run(services.counter_service, args=(3,))
    with crash_harness.reopen() as manager:
        assert manager.store("counters", value_type=int)["a"] == 2


def test_simulate_crash_loses_only_uncommitted_writes(state_dir: Path) -> None:
    manager = StateManager(state_dir)
    store = manager.store("counters", value_type=int)
    store.put("a", 1)
    store.commit()
    store.put("a", 2)  # buffered, never committed
    simulate_crash(manager)
    with pytest.raises(InvalidStateStoreError):
        store.get("a")
    simulate_crash(manager)  # idempotent
    with StateManager(state_dir) as manager:
        assert manager.store("counters", value_type=int)["a"] == 1


def test_simulate_crash_releases_the_directory_lock_and_writes_no_marker(state_dir: Path) -> None:
    manager = StateManager(state_dir)
    store = manager.store("counters", value_type=int)
    store.put("a", 1)
    store.commit()
    simulate_crash(manager)
    partition = state_dir / "counters-changelog-0"
    assert not (partition / ".kafka_cleanshutdown").exists(), "a crash must not write the marker"
    with StateManager(state_dir) as again:  # the lock was released
        assert again.store("counters", value_type=int)["a"] == 1
