"""ENOSPC and EIO at every file-system step of a commit over several stores and partitions.

Through :class:`StateManager`, with the stores of ``test_crash_steps`` (one of
one partition, one of three, and the metadata store): the files module's
fault hook makes the k-th file-system step of commit 3 fail with ``ENOSPC``
or ``EIO`` (before it is done, as a full or failing disk refuses it).  Then:

* the commit raises a typed :class:`~statestore.errors.StateStoreError`
  (never a bare ``OSError``), or returns (a step whose failure the protocol
  tolerates), and then commit 3 must be visible after a reopen;
* after the process is abandoned (as ``kill -9`` leaves it) and the disk has
  space again, a fresh manager opens the directory: commits 1 and 2 (acknowledged)
  are there, commit 3 is all there or all absent, no transaction is left open,
  and the directory goes on working (commit 4 is acknowledged and survives a reopen).
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from changelog.fs import files
from statestore.errors import StateStoreError
from statestore.manager import StateManager
from tests.statestore.helpers import NO_CLEANER
from tests.statestore.txn.test_crash_steps import (
    baseline,
    commits_visible,
    no_open_transactions,
    write_commit,
)


def steps_of_commit_3(state: Path) -> list[tuple[str, str]]:
    """The file-system steps (step name, file name) commit 3 makes, in order."""
    seen: list[tuple[str, str]] = []
    manager = StateManager(state, config=NO_CLEANER)
    write_commit(manager, 3)
    with files.inject_faults(lambda step, path: seen.append((step, path.name))):
        manager.commit()
    manager.crash()
    return seen


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, str]]]:
    root = tmp_path_factory.mktemp("io-errors")
    baseline(root / "state")
    probe = root / "probe"
    shutil.copytree(root / "state", probe)
    return root / "state", steps_of_commit_3(probe)


def test_the_commit_makes_file_system_steps_to_fail(
    template: tuple[Path, list[tuple[str, str]]],
) -> None:
    _, steps = template
    names = {step for step, _ in steps}
    assert len(steps) >= 8, steps  # data appends, fsyncs, the decision, markers
    assert len(steps) >= 8, steps  # data appends and fsyncs, the decision, the markers
    assert {"segment.append", "segment.flush"} <= names, names


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
@pytest.mark.slow  # a long fault sweep: the slow tier
def test_an_io_error_at_every_step_of_a_commit_loses_nothing_and_is_typed(
    template: tuple[Path, list[tuple[str, str]]], tmp_path: Path, code: int
) -> None:
    source, steps = template
    outcomes: dict[str, int] = {}
    for k, (step, name) in enumerate(steps):
        state = tmp_path / f"state-{k}"
        shutil.copytree(source, state)
        manager = StateManager(state, config=NO_CLEANER)
        write_commit(manager, 3)
        calls = 0

        def fail_kth(step_name: str, path: Path, k: int = k) -> None:
            nonlocal calls
            calls += 1
            if calls == k + 1:
                raise OSError(code, f"injected at {step_name} {path.name}")

        returned = False
        with files.inject_faults(fail_kth):
            try:
                manager.commit()
                returned = True
            except StateStoreError:
                pass
        manager.crash()
        with StateManager(state, config=NO_CLEANER) as again:
            seen = commits_visible(again, 3)
            assert {1, 2} <= seen, (k, step, name)
            if returned:
                assert 3 in seen, (k, step, name)
            outcomes["visible" if 3 in seen else "absent"] = (
                outcomes.get("visible" if 3 in seen else "absent", 0) + 1
            )
            no_open_transactions(again)
            write_commit(again, 4)
            again.commit()
        with StateManager(state, config=NO_CLEANER) as third:
            assert 4 in commits_visible(third, 4), (k, step, name)
        shutil.rmtree(state)
    print(f"{len(steps)} fault points, {errno.errorcode[code]}: commit 3 {outcomes}")
    assert sum(outcomes.values()) == len(steps)
    assert outcomes.get("visible", 0) and outcomes.get("absent", 0)  # faults before and after T3
