"""Crash after every numbered step of the coordinator's commit protocol and recovery pass.

Through :class:`StateManager`, with three stores (one of one partition, one of
three, and the built-in metadata store): a fault hook raises at step k (as a
crash there would stop the process), the manager is abandoned as ``kill -9``
would leave it (:meth:`StateManager.crash`), and a fresh manager reopens the
directory.  Every acknowledged commit must be there and the commit in flight
must be all visible or all absent: visible exactly when the crash came after
T3, the decision.  Recovery steps are crashed the same way on a directory
whose recovery has work to do (an undecided transaction to abort, a decided
one to roll forward), then the directory is reopened cleanly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from changelog import Log
from statestore.manager import StateManager
from statestore.txn.coordinator import COMMIT_STEPS, RECOVERY_STEPS
from tests.statestore.helpers import NO_CLEANER

DECIDED = frozenset({"T3", "T4.1", "T4", "T5"})
"""Steps after which the commit in flight is committed (its decision is durable)."""


class Crash(BaseException):
    """What the fault hook raises: the process "stops" at that step."""


def crash_at(step: str) -> Any:
    def hook(name: str) -> None:
        if name == step:
            raise Crash(step)

    return hook


def open_stores(manager: StateManager) -> tuple[Any, Any, Any]:
    return manager.store("one"), manager.store("three", partitions=3), manager.metadata


def write_commit(manager: StateManager, n: int) -> None:
    """Commit ``n``: writes in every store and every partition (keys spread over the three)."""
    one, three, meta = open_stores(manager)
    one[f"c{n}"] = n
    one["last"] = n
    for j in range(9):
        three[f"c{n}-{j}"] = n
    three["last"] = n
    meta["position"] = n


def commits_visible(manager: StateManager, upto: int) -> set[int]:
    """Which commits 1..upto are visible; asserts each is all there or all absent."""
    one, three, meta = open_stores(manager)
    seen: set[int] = set()
    for n in range(1, upto + 1):
        parts = [one.get(f"c{n}") == n] + [three.get(f"c{n}-{j}") == n for j in range(9)]
        assert all(parts) or not any(parts), f"commit {n} is partially visible: {parts}"
        if all(parts):
            seen.add(n)
    last = max(seen, default=0)
    assert one.get("last", 0) == three.get("last", 0) == meta.get("position", 0) == last
    return seen


def no_open_transactions(manager: StateManager) -> None:
    for store in manager.stores.values():
        for log in store.changelogs:
            assert log.open_transactions() == {}, log.dir
            assert log.last_stable_offset == log.log_end_offset


def baseline(state: Path) -> None:
    """Two acknowledged commits (a transaction each) and a clean close."""
    with StateManager(state, config=NO_CLEANER) as manager:
        for n in (1, 2):
            write_commit(manager, n)
            manager.commit()


@pytest.mark.parametrize("step", COMMIT_STEPS)
def test_crash_after_each_commit_step_is_all_or_nothing(tmp_path: Path, step: str) -> None:
    state = tmp_path / "state"
    baseline(state)
    manager = StateManager(state, config=NO_CLEANER)
    write_commit(manager, 3)
    manager.coordinator.fault_hook = crash_at(step)
    with pytest.raises(Crash):
        manager.commit()
    manager.crash()
    with StateManager(state, config=NO_CLEANER) as again:
        seen = commits_visible(again, 3)
        assert seen == ({1, 2, 3} if step in DECIDED else {1, 2}), step
        no_open_transactions(again)
        write_commit(again, 4)  # the directory goes on working
        again.commit()
    with StateManager(state, config=NO_CLEANER) as third:
        assert commits_visible(third, 4) == ({1, 2, 3, 4} if step in DECIDED else {1, 2, 4})
        no_open_transactions(third)


def leave_recovery_work(state: Path) -> None:
    """Commit 3 decided without markers (crash after T3), and an undecided one (after T2).

    The undecided transaction writes stores ``x`` (two partitions) and ``y``,
    opened by a second manager that never opened the stores of commit 3, so
    commit 3 stays waiting in the coordinator's log (O2 carries it forward).
    """
    baseline(state)
    manager = StateManager(state, config=NO_CLEANER)
    write_commit(manager, 3)
    manager.coordinator.fault_hook = crash_at("T3")
    with pytest.raises(Crash):
        manager.commit()
    manager.crash()
    second = StateManager(state, config=NO_CLEANER)
    x, y = second.store("x", partitions=2), second.store("y")
    for i in range(6):
        x[f"x{i}"] = i
    y["y"] = "undecided"
    second.coordinator.fault_hook = crash_at("T2")
    with pytest.raises(Crash):
        second.commit()
    second.crash()


def check_recovered(manager: StateManager) -> None:
    assert commits_visible(manager, 3) == {1, 2, 3}
    assert dict(manager.store("x", partitions=2).items()) == {}
    assert dict(manager.store("y").items()) == {}
    no_open_transactions(manager)
    assert manager.coordinator.waiting() == {}


@pytest.mark.parametrize("first", ["decided", "undecided"])
@pytest.mark.parametrize("step", RECOVERY_STEPS)
def test_crash_after_each_recovery_step_then_reopen(tmp_path: Path, step: str, first: str) -> None:
    state = tmp_path / "state"
    leave_recovery_work(state)
    try:
        manager = StateManager(state, config=NO_CLEANER, fault_hook=crash_at(step))
    except Crash:
        assert step in ("O0", "O1", "O2")
    else:

        def open_all() -> None:
            if first == "undecided":
                manager.store("x", partitions=2)
                manager.store("y")
            open_stores(manager)
            manager.store("x", partitions=2)

        with pytest.raises(Crash):
            open_all()
        manager.crash()
    with StateManager(state, config=NO_CLEANER) as again:
        check_recovered(again)
    with StateManager(state, config=NO_CLEANER) as third:  # recovery left nothing to redo
        check_recovered(third)


def test_an_undecided_transaction_is_aborted_with_abort_markers(tmp_path: Path) -> None:
    state = tmp_path / "state"
    baseline(state)
    manager = StateManager(state, config=NO_CLEANER)
    write_commit(manager, 3)
    manager.coordinator.fault_hook = crash_at("T2")
    with pytest.raises(Crash):
        manager.commit()
    manager.crash()
    log_dir = state / "three-changelog-1"
    with Log.open(log_dir) as log:
        assert log.open_transactions()  # the crash left it open
    with StateManager(state, config=NO_CLEANER) as again:
        assert commits_visible(again, 3) == {1, 2}
        log = again.store("three", partitions=3).changelogs[1]
        aborted = log.aborted_transactions(0, log.log_end_offset)
        assert [txn.producer_id for txn in aborted] == [again.coordinator.producer_id]


def test_the_epoch_is_bumped_at_every_open_and_fences_the_old_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as first:
        pid, epoch = first.coordinator.producer_id, first.coordinator.producer_epoch
    with StateManager(state, config=NO_CLEANER) as second:
        assert second.coordinator.producer_id == pid
        assert second.coordinator.producer_epoch == epoch + 1
        write_commit(second, 1)
        second.commit()
        log = second.store("three", partitions=3).changelogs[0]
        from changelog.errors import InvalidProducerEpochError  # noqa: PLC0415

        with pytest.raises(InvalidProducerEpochError):
            log.append_transactional([(b"z", b"zombie")], producer_id=pid, producer_epoch=epoch)
