"""``statestore repair roll-back`` and ``repair complete``: all-or-nothing across partitions.

One template: three stores committed together 30 times (``carts`` and ``orders``
of one partition, ``stock`` of two), so every commit is one transaction over
carts, orders and one stock partition.  Rolling carts back to before commit
``CUT`` takes every later commit out of every partition (the consistent cut),
deletes the RocksDB of every partition it cuts, and the stores reopen at
commit ``CUT - 1``, together.  Killed at any file step (a real ``kill -9`` of a
real process), the state directory is exactly as before, or it holds the repair
journal and then nothing opens it (``StateManager``, every CLI command) until
the remedy run again, or ``repair complete``, ends it exactly as after.
"""

from __future__ import annotations

import io
import json
import shutil
import signal
from pathlib import Path

import pytest

from changelog import LogConfig
from changelog.fs.files import SimulatedCrash, inject_faults
from statestore import RepairInProgressError, StateManager, StateManagerConfig
from statestore.cli import main
from tests.cli.helpers import run_cli
from tests.cli.test_salvage import run_child

SMALL_LOG = LogConfig(segment_bytes=2048, index_interval_bytes=128)
QUIET = StateManagerConfig(run_cleaner=False)
COMMITS = 30
CUT = 12
"""The commit rolled back (with every later one): its data in carts is at offset ``2 * CUT``."""
PARTITIONS = ("carts-changelog-0", "orders-changelog-0", "stock-changelog-0", "stock-changelog-1")
ROCKSDB = ("carts-rocksdb-0", "orders-rocksdb-0", "stock-rocksdb-0", "stock-rocksdb-1")
JOURNAL = ".repair-journal"


def build_three_stores(state_dir: Path) -> Path:
    with StateManager(state_dir, config=QUIET, log_config=SMALL_LOG) as manager:
        carts = manager.store("carts")
        orders = manager.store("orders")
        stock = manager.store("stock", partitions=2)
        for i in range(COMMITS):
            carts.put(f"c{i % 7}", {"n": i})
            orders.put(f"o{i}", {"n": i})
            stock.put(f"s{i % 5}", i)
            manager.commit()
    return state_dir


def model(commits: int) -> dict[str, dict[str, object]]:
    """What the three stores hold after commits ``0 .. commits - 1`` (from the writes above)."""
    return {
        "carts": {
            f"c{k}": {"n": max(i for i in range(commits) if i % 7 == k)}
            for k in range(7)
            if k < commits
        },
        "orders": {f"o{i}": {"n": i} for i in range(commits)},
        "stock": {
            f"s{k}": max(i for i in range(commits) if i % 5 == k) for k in range(5) if k < commits
        },
    }


def stores(state: Path) -> dict[str, dict[str, object]]:
    with StateManager(state, config=QUIET) as manager:
        return {
            "carts": dict(manager.store("carts").items()),
            "orders": dict(manager.store("orders").items()),
            "stock": dict(manager.store("stock", partitions=2).items()),
        }


def log_files(state: Path) -> dict[str, bytes]:
    return {
        f"{p.parent.name}/{p.name}": p.read_bytes()
        for name in PARTITIONS
        for p in sorted((state / name).glob("*.log"))
    }


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_three_stores(tmp_path_factory.mktemp("rollback") / "state")


@pytest.fixture
def state(tmp_path: Path, template: Path) -> Path:
    return Path(shutil.copytree(template, tmp_path / "state"))


def roll_back_args(state: Path) -> list[str]:
    return ["repair", "roll-back", str(state / "carts-changelog-0"), "--offset", str(2 * CUT)]


def test_the_template_is_what_the_model_says(template: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(template, tmp_path / "copy"))
    assert stores(copy) == model(COMMITS)


def test_roll_back_plans_every_partition_and_applies_all_of_them(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = log_files(state)
    dry = run_cli(roll_back_args(state), capsys)
    assert dry.status == 0, dry.err
    assert log_files(state) == before
    assert not (state / JOURNAL).exists()
    assert all((state / name).is_dir() for name in ROCKSDB)
    for name in PARTITIONS:
        assert f"J2 truncate {name} to log end offset " in dry.out
    assert f"J1 write {state / JOURNAL} naming 4 partition(s)" in dry.out
    assert "J3 delete carts-rocksdb-0, orders-rocksdb-0, stock-rocksdb-0, stock-rocksdb-1" in (
        dry.out
    )
    assert f"J4 delete {state / JOURNAL}" in dry.out
    assert "dry run: nothing was changed" in dry.out
    doc = json.loads(run_cli([*roll_back_args(state), "--json"], capsys).out)
    cut = {c["directory"].rsplit("/", 1)[1]: c["log_end_offset_after"] for c in doc["plan"]["cut"]}
    assert cut["carts-changelog-0"] == 2 * CUT
    assert cut["orders-changelog-0"] == 2 * CUT

    applied = run_cli([*roll_back_args(state), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert applied.out.count("verify: OK") == 4
    assert not (state / JOURNAL).exists()
    assert not any((state / name).exists() for name in ROCKSDB)
    assert stores(state) == model(CUT)  # every store at the same commit
    again = run_cli([*roll_back_args(state), "--apply"], capsys)
    assert again.status == 0, again.err  # the coordinator's log still names it: all cut
    assert "nothing to remove: every partition of the cut already ends there" in again.out


def test_a_pending_journal_refuses_every_open_until_it_is_completed(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str] = []

    def crash_in_the_second_partition(step: str, path: Path) -> None:
        seen.append(step)
        if step.startswith("repair.K4") and "orders-changelog-0" in str(path):
            raise SimulatedCrash(step)

    with pytest.raises(SimulatedCrash), inject_faults(crash_in_the_second_partition):
        main([*roll_back_args(state), "--apply"])
    journal = state / JOURNAL
    assert journal.exists()  # carts is cut, orders half-cut, stock untouched: between

    with pytest.raises(RepairInProgressError) as refused:
        StateManager(state, config=QUIET)
    assert refused.value.path == journal
    for args in (
        ["inspect", str(state)],
        ["verify", str(state)],
        ["dump", str(state / "carts-changelog-0")],
        ["get", str(state), "carts", "c1"],
        ["scan", str(state), "orders"],
        ["compact", str(state)],
        ["restore", str(state)],
        ["repair", "salvage", str(state / "orders-changelog-0")],
        ["repair", "rebuild-rocksdb", str(state)],
    ):
        result = run_cli(args, capsys)
        assert result.status == 1, args
        assert f"{journal}: an interrupted repair's journal is here" in result.err, args
    dry = run_cli(["repair", "complete", str(state)], capsys)
    assert dry.status == 0, dry.err
    assert "an interrupted roll-back left its journal" in dry.out
    assert "J2 truncate stock-changelog-1" in dry.out
    assert journal.exists()

    done = run_cli(["repair", "complete", str(state), "--apply"], capsys)
    assert done.status == 0, done.err
    assert "applied: the interrupted roll-back is complete" in done.out
    assert not journal.exists()
    assert stores(state) == model(CUT)
    nothing = run_cli(["repair", "complete", str(state), "--apply"], capsys)
    assert "no repair journal: nothing to complete" in nothing.out


def test_a_single_truncate_runs_under_the_journal(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["repair", "truncate", str(state / "orders-changelog-0"), "--offset", str(2 * CUT)]
    dry = run_cli(args, capsys)
    assert f"J1 write {state / JOURNAL} naming 1 partition(s)" in dry.out
    assert "    K6 truncate " in dry.out

    def crash_at_k4(step: str, _path: Path) -> None:
        if step.startswith("repair.K4"):
            raise SimulatedCrash(step)

    with pytest.raises(SimulatedCrash), inject_faults(crash_at_k4):
        main([*args, "--apply", "--split-transactions"])
    with pytest.raises(RepairInProgressError):
        StateManager(state, config=QUIET)
    again = run_cli([*args, "--apply", "--split-transactions"], capsys)  # the remedy run again
    assert again.status == 0, again.err
    assert "applied: the interrupted truncate is complete" in again.out
    assert not (state / JOURNAL).exists()
    nothing = run_cli(args, capsys)
    assert "nothing to remove" in nothing.out


def _after(tmp_path: Path, template: Path) -> tuple[dict[str, bytes], int]:
    after_dir = Path(shutil.copytree(template, tmp_path / "after"))
    full = run_child(0, [*roll_back_args(after_dir), "--apply"])
    assert full.returncode == 0, full.stderr
    return log_files(after_dir), int(full.stdout.rsplit("STEPS", 1)[1])


def _kill_and_rerun(
    trial: Path, k: int, before: dict[str, bytes], after: dict[str, bytes], *, thorough: bool
) -> str:
    """SIGKILL a real ``roll-back --apply`` process at its ``k``-th file step, check what it
    left, run the remedy again (in process) and check that it ends as after.  ``thorough``:
    also ``statestore inspect`` in a process of its own, and the stores' contents."""
    killed = run_child(k, [*roll_back_args(trial), "--apply"])
    assert killed.returncode == -signal.SIGKILL, (k, killed.stdout, killed.stderr)
    if (trial / JOURNAL).exists():
        outcome = "journal"
        with pytest.raises(RepairInProgressError):
            StateManager(trial, config=QUIET)  # no store ever opens in between
        if thorough:
            inspect = run_child(0, ["inspect", str(trial)])
            assert inspect.returncode == 1, k
            assert "an interrupted repair's journal is here" in inspect.stderr, k
    else:
        now = log_files(trial)
        assert now in (before, after), k
        outcome = "before" if now == before else "after"
        if outcome == "before":
            assert all((trial / name).is_dir() for name in ROCKSDB), k
            if thorough:
                assert stores(trial) == model(COMMITS), k
    again = io.StringIO()
    assert main([*roll_back_args(trial), "--apply"], out=again) == 0, (k, again.getvalue())
    assert not (trial / JOURNAL).exists(), k
    assert not any((trial / name).exists() for name in ROCKSDB), k
    assert log_files(trial) == after, k
    if thorough or outcome != "after":
        assert stores(trial) == model(CUT), k
    return outcome


def test_kill_9_at_sampled_steps_of_a_roll_back(tmp_path: Path, template: Path) -> None:
    before = log_files(template)
    after, steps = _after(tmp_path, template)
    assert steps >= 40
    outcomes: dict[str, int] = {}
    for k in (1, 4, 5, steps // 3, steps // 2, steps - 1, steps):
        trial = Path(shutil.copytree(template, tmp_path / f"k{k}"))
        outcome = _kill_and_rerun(trial, k, before, after, thorough=True)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        shutil.rmtree(trial)
    assert outcomes.get("journal", 0) >= 3, outcomes


def _every_step_but_most_tree_deletes(tmp_path: Path, template: Path, steps: int) -> list[int]:
    """1..steps, where J3's file-by-file deletes of the RocksDB trees (renamed ``.deleted``
    first, so every one of them leaves the same state) are sampled: first, middle, last."""
    recorded = Path(shutil.copytree(template, tmp_path / "recorded"))
    names: list[str] = []

    def record(step: str, _path: Path) -> None:
        if step.startswith(("repair.", "atomic_write")):  # as the child counts
            names.append(step)

    with inject_faults(record):
        assert main([*roll_back_args(recorded), "--apply"], out=io.StringIO()) == 0
    assert len(names) == steps
    deletes = [i + 1 for i, name in enumerate(names) if name.startswith("repair.J3.delete_tree")]
    sampled = {deletes[0], deletes[len(deletes) // 2], deletes[-1]} if deletes else set()
    return [k for k in range(1, steps + 1) if k not in deletes or k in sampled]


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_kill_9_at_every_step_of_a_roll_back_leaves_before_or_journal_then_after(
    tmp_path: Path, template: Path
) -> None:
    before = log_files(template)
    after, steps = _after(tmp_path, template)
    outcomes = {"before": 0, "journal": 0, "after": 0}
    for k in _every_step_but_most_tree_deletes(tmp_path, template, steps):
        trial = Path(shutil.copytree(template, tmp_path / f"k{k}"))
        outcomes[_kill_and_rerun(trial, k, before, after, thorough=k % 10 == 0)] += 1
        shutil.rmtree(trial)
    print("roll-back kill -9 outcomes", outcomes)
    assert outcomes["before"] and outcomes["journal"], outcomes


class _Crash(BaseException):
    """What the coordinator's fault hook raises: the process "stops" at that step."""


def test_roll_back_refuses_while_the_coordinator_still_waits_for_markers_there(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A commit decided (T3) but killed before its markers: the coordinator's latest record
    lists it, and would outlive the cut (recovery step R2 could later commit a new, undecided
    transaction starting at that offset).  The roll-back refuses until one open wrote the
    markers; then it goes through."""

    def crash_after_the_decision(step: str) -> None:
        if step == "T3":
            raise _Crash(step)

    manager = StateManager(state, config=QUIET)
    carts, orders = manager.store("carts"), manager.store("orders")
    carts.put("c-last", {"n": -1})
    orders.put("o-last", {"n": -1})
    manager.coordinator.fault_hook = crash_after_the_decision
    with pytest.raises(_Crash):
        manager.commit()
    manager.crash()
    last = 2 * COMMITS  # its data in carts: no marker yet
    args = ["repair", "roll-back", str(state / "carts-changelog-0"), "--offset", str(last)]
    refused = run_cli([*args, "--apply"], capsys)
    assert refused.status == 1
    assert "still waits for the markers of a transaction in carts-changelog-0" in refused.err
    assert not (state / JOURNAL).exists()
    truncate = ["repair", "truncate", str(state / "carts-changelog-0"), "--offset", str(last)]
    refused = run_cli([*truncate, "--apply", "--split-transactions"], capsys)
    assert refused.status == 1
    assert "still waits for the markers" in refused.err
    expected = model(COMMITS)
    expected["carts"]["c-last"] = {"n": -1}
    expected["orders"]["o-last"] = {"n": -1}
    assert stores(state) == expected  # the open writes the COMMIT markers (R2)
    done = run_cli([*args, "--apply"], capsys)
    assert done.status == 0, done.err
    assert stores(state) == model(COMMITS)
