"""The coordinator's log lost or emptied beside changelogs that hold transactions.

Without ``__transaction_state-0`` a transaction whose COMMIT markers were not
durable cannot be decided: a new coordinator would abort an acknowledged
commit in every store.  So the open is refused with a typed error (as a
missing changelog directory is refused with ``StoreLayoutError``), nothing is
written, and ``verify`` reports the same.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from statestore.errors import TransactionStateMissingError
from statestore.manager import StateManager
from statestore.txn.coordinator import TRANSACTION_LOG_DIR
from tests.cli.helpers import run_cli
from tests.statestore.helpers import NO_CLEANER
from tests.statestore.txn.test_crash_steps import (
    Crash,
    baseline,
    commits_visible,
    crash_at,
    write_commit,
)


def snapshot(state: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(state)): path.read_bytes()
        for path in sorted(state.rglob("*"))
        if path.is_file() and path.name != ".lock" and "rocksdb" not in path.parts[-2]
    }


def lose(state: Path, how: str) -> None:
    directory = state / TRANSACTION_LOG_DIR
    if how == "missing":
        shutil.rmtree(directory)
    else:  # emptied: the directory is there, its files are gone
        for path in directory.iterdir():
            path.unlink()


def decided_without_markers(state: Path) -> None:
    """Commits 1-2 complete; commit 3 decided (T3 durable) but no marker written."""
    baseline(state)
    manager = StateManager(state, config=NO_CLEANER)
    write_commit(manager, 3)
    manager.coordinator.fault_hook = crash_at("T3")
    with pytest.raises(Crash):
        manager.commit()
    manager.crash()


@pytest.mark.parametrize("how", ["missing", "emptied"])
def test_a_decided_transaction_without_markers_is_not_aborted(tmp_path: Path, how: str) -> None:
    state = tmp_path / "state"
    decided_without_markers(state)
    lose(state, how)
    before = snapshot(state)
    with pytest.raises(TransactionStateMissingError) as caught:
        StateManager(state, config=NO_CLEANER)
    error = caught.value
    assert error.path == state / TRANSACTION_LOG_DIR
    assert error.changelog.parent == state
    assert error.changelog.name.split("-changelog-")[0] in {"one", "three", "__metadata"}
    assert snapshot(state) == before  # nothing written, nothing created
    assert (state / TRANSACTION_LOG_DIR).exists() == (how == "emptied")
    # the state directory's lock was released: a second try refuses the same way
    with pytest.raises(TransactionStateMissingError):
        StateManager(state, config=NO_CLEANER)


def test_a_lost_coordinator_beside_completed_transactions_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    baseline(state)
    lose(state, "missing")
    with pytest.raises(TransactionStateMissingError):
        StateManager(state, config=NO_CLEANER)


def test_a_state_dir_without_transactions_opens_without_the_coordinator(tmp_path: Path) -> None:
    """One store, single-partition commits (no transactional batch): nothing to decide."""
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        manager.store("only")["k"] = 1
        manager.commit()
    lose(state, "missing")
    with StateManager(state, config=NO_CLEANER) as manager:
        assert manager.store("only")["k"] == 1


@pytest.mark.parametrize("how", ["missing", "emptied"])
def test_verify_reports_the_lost_coordinator(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    decided_without_markers(state)
    lose(state, how)
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 1, result.out
    assert f"ERROR {state / TRANSACTION_LOG_DIR}" in result.out
    assert "TransactionStateMissingError" in result.out
    assert "verify: FAILED" in result.out


def test_the_coordinators_index_appends_need_no_fsync(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A power cut keeps the coordinator's ``.log`` up to the last decision (fsynced in T3)
    but may lose every index append since the last roll (as in every log: only the
    ``.log`` is fsynced by a commit).  The next open rebuilds the indexes from the
    recovery point on (L8): every decision is read, every commit visible."""
    state = tmp_path / "state"
    baseline(state)
    manager = StateManager(state, config=NO_CLEANER)
    for n in range(3, 40):
        write_commit(manager, n)
        manager.commit()
    manager.crash()
    indexes = [
        path
        for path in (state / TRANSACTION_LOG_DIR).iterdir()
        if path.suffix in {".index", ".timeindex"}
    ]
    assert any(path.stat().st_size for path in indexes)  # entries were appended
    for path in indexes:
        path.write_bytes(b"")  # the appends lost (the files were created fsynced, empty)
    with StateManager(state, config=NO_CLEANER) as again:
        assert commits_visible(again, 39) == set(range(1, 40))
    assert run_cli(["verify", str(state)], capsys).status == 0
