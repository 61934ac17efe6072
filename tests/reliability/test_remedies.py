"""The operator remedies (``statestore repair``) under a fault at every step.

Each remedy's file steps go through :mod:`changelog.fs.files`, so each step is
a fault point.  For every remedy the steps of one ``--apply`` are recorded;
then, for every step ``k`` and every fault kind, a fresh copy of the damaged
directory is repaired with the fault injected at step ``k``:

- ``crash``: :class:`SimulatedCrash` before step ``k`` (an in-process ``kill -9``:
  nothing more is written, every descriptor is dropped);
- ``ENOSPC`` / ``EIO``: step ``k`` fails as the real call would (a typed
  ``LogStorageError`` reaches the caller).

After the fault:

1. a plain open of a copy is either refused with a typed ``ChangelogError``
   or returns records that are a prefix of the original and hold everything
   below the cut (never an altered record, never a loss below the cut);
2. the remedy run again (planned afresh from what is on disk) produces
   exactly the expected log, and ``statestore verify``'s check finds no error.

Fault model: in-process crashes and injected I/O errors at every
:mod:`changelog.fs.files` step.  Not power loss (un-fsynced data surviving
or not), which ``test_power_loss.py`` covers for the loader's own passes that
the remedies end with.  ``os.fsync`` is a no-op here, as in the corruption
fuzz: durability is not what these trials measure.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from changelog import LogConfig
from changelog.errors import ChangelogError, LogStorageError, RepairRefusedError
from changelog.fs.files import SimulatedCrash, inject_faults
from changelog.log.log import Log
from changelog.repair.indexes import apply_index_rebuild, plan_index_rebuild
from changelog.repair.truncate import apply_truncation, plan_torn_tail_drop, plan_truncation
from statestore import RepairInProgressError, StateManager
from statestore.cli import main
from statestore.cli.progress import Progress
from statestore.cli.verify import verify_partition
from tests.cli.helpers import QUIET, build_state, live_users, user
from tests.reliability import stats
from tests.reliability.crash import StepRecorder, abandon_dir
from tests.reliability.model import commit_ops

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=128, segment_index_bytes=4096)
KINDS = ("crash", "ENOSPC", "EIO")
Rec = tuple[int, bytes | None, bytes | None]


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", lambda _fd: None)


class FaultAt:
    """Raise the fault ``kind`` at the ``k``-th fault point (1-based) whose step starts with
    ``prefix``."""

    def __init__(self, kind: str, k: int, prefix: str = "") -> None:
        self.kind, self.k, self.prefix, self.seen = kind, k, prefix, 0

    def __call__(self, step: str, path: Path) -> None:
        if not step.startswith(self.prefix):
            return
        self.seen += 1
        if self.seen != self.k:
            return
        if self.kind == "crash":
            raise SimulatedCrash(f"crash before {step} {path}")
        code = errno.ENOSPC if self.kind == "ENOSPC" else errno.EIO
        raise OSError(code, f"{errno.errorcode[code]} (injected at {step})")


def read_all(directory: Path) -> list[Rec]:
    with Log.open(directory, config=CONFIG) as log:
        return [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]


def build(directory: Path, commits: int = 40) -> list[Rec]:
    with Log.open(directory, config=CONFIG) as log:
        for i in range(commits):
            log.append(commit_ops(13, i))
    return read_all(directory)


def verify_errors(directory: Path) -> list[str]:
    with Progress("verify", enabled=False) as progress:
        report = verify_partition(directory, progress)
    return [p.render() for p in report.problems if p.severity == "error"]


def inject(hook: FaultAt | StepRecorder, action: Callable[[], object], directory: Path) -> str:
    """Run ``action`` under ``hook``; what happened: ``ok``, ``crash`` or ``io-error``."""
    try:
        with inject_faults(hook):
            action()
    except SimulatedCrash:
        abandon_dir(directory)
        return "crash"
    except LogStorageError:
        abandon_dir(directory)
        return "io-error"
    return "ok"


def check_plain_open(directory: Path, original: list[Rec], kept: int, scratch: Path) -> str:
    """Outcome 1 of the module docstring, on a copy."""
    copy = Path(shutil.copytree(directory, scratch / directory.name))
    try:
        got = read_all(copy)
    except ChangelogError:
        return "refused"
    assert got == original[: len(got)], "a plain open after the fault returned altered records"
    assert len(got) >= kept, "a plain open after the fault lost records below the cut"
    shutil.rmtree(copy)
    return "exact" if len(got) == kept else "prefix"


OTHER_STEPS = 8
"""How many of the steps that are not the remedy's own (the loader's and ``Log.close``'s, at
K7/X2, each covered step by step by the loader's own crash tests) get a fault too."""


def fault_points(recorder: StepRecorder) -> list[int]:
    """Every step of the remedy itself (``repair.*``), and an even sample of the others."""
    own = [i + 1 for i, (step, _) in enumerate(recorder.steps) if step.startswith("repair.")]
    others = [i + 1 for i, (step, _) in enumerate(recorder.steps) if not step.startswith("repair.")]
    stride = max(1, len(others) // OTHER_STEPS)
    assert len(own) >= 5
    return sorted(own + others[::stride])


def run_trials(
    tmp_path: Path,
    base: Path,
    remedy: Callable[[Path], None],
    check: Callable[[Path], None],
    original: list[Rec],
    kept: int,
    name: str,
) -> int:
    """Record the steps of ``remedy`` on a copy, then fault every step (module docstring)."""
    recorder = StepRecorder()
    first = Path(shutil.copytree(base, tmp_path / "recorded" / base.name))
    assert inject(recorder, lambda: remedy(first), first) == "ok"
    check(first)
    ks = fault_points(recorder)
    trials = 0
    for k in ks:
        for kind in KINDS:
            trial = Path(shutil.copytree(base, tmp_path / f"{kind}-{k}" / base.name))
            outcome = inject(FaultAt(kind, k), lambda d=trial: remedy(d), trial)  # type: ignore[misc]
            assert outcome in ("crash", "io-error", "ok")
            opened = check_plain_open(trial, original, kept, trial.parent.parent / f"s-{kind}-{k}")
            remedy(trial)  # the re-run, without faults
            check(trial)
            stats.record(f"remedies.{name}", trials=1, faults=1)
            stats.note(f"remedies.{name}", f"{kind}-then-open-{opened}")
            trials += 1
            shutil.rmtree(trial.parent)
    return trials


# --------------------------------------------------------------------------- the remedies


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_truncate_survives_a_fault_at_every_step(tmp_path: Path) -> None:
    base = tmp_path / "base" / "trunc-0"
    original = build(base)
    logs = sorted(base.glob("*.log"))
    assert len(logs) >= 4
    damaged = logs[1]
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) - 30])  # a closed segment cut mid-batch
    with pytest.raises(ChangelogError):
        read_all(base)
    with pytest.raises(RepairRefusedError) as info:
        plan_truncation(base, int(logs[2].name[:20]) - 1)
    offset = info.value.offset
    assert offset is not None
    expected = [r for r in original if r[0] < offset]

    def remedy(directory: Path) -> None:
        plan = plan_truncation(directory, offset)
        if not plan.nothing_to_do:
            apply_truncation(plan, config=CONFIG)

    def check(directory: Path) -> None:
        assert read_all(directory) == expected
        assert verify_errors(directory) == []

    trials = run_trials(tmp_path, base, remedy, check, original, len(expected), "truncate")
    assert trials >= 3 * 20


def test_drop_torn_tail_survives_a_fault_at_every_step(tmp_path: Path) -> None:
    base = tmp_path / "base" / "torn-0"
    original = build(base)
    active = sorted(base.glob("*.log"))[-1]
    data = active.read_bytes()
    active.write_bytes(data + data[:50])  # half a batch after the clean close
    with pytest.raises(ChangelogError):
        read_all(base)

    def remedy(directory: Path) -> None:
        try:
            plan = plan_torn_tail_drop(directory)
        except RepairRefusedError as exc:
            if "there is no torn tail" not in exc.reason:  # else done by the faulted run
                raise
            Log.open(directory, config=CONFIG).close()
            return
        apply_truncation(plan, config=CONFIG)

    def check(directory: Path) -> None:
        assert read_all(directory) == original
        assert verify_errors(directory) == []

    trials = run_trials(tmp_path, base, remedy, check, original, len(original), "drop-torn-tail")
    assert trials >= 3 * 10


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_rebuild_indexes_survives_a_fault_at_every_step(tmp_path: Path) -> None:
    base = tmp_path / "base" / "idx-0"
    original = build(base)
    index = max(base.glob("*.index"), key=lambda p: p.stat().st_size)
    good = {p.name: p.read_bytes() for p in base.iterdir() if p.suffix in (".index", ".timeindex")}
    damaged = bytearray(good[index.name])
    assert len(damaged) >= 16
    damaged[4:8] = (int.from_bytes(damaged[4:8], "big") + 5).to_bytes(4, "big")
    index.write_bytes(bytes(damaged))
    assert read_all(base) == original  # the loader does not read middle entries

    def remedy(directory: Path) -> None:
        apply_index_rebuild(plan_index_rebuild(directory, config=CONFIG), config=CONFIG)

    def check(directory: Path) -> None:
        now = {
            p.name: p.read_bytes()
            for p in directory.iterdir()
            if p.suffix in (".index", ".timeindex")
        }
        assert now == good
        assert read_all(directory) == original
        assert verify_errors(directory) == []

    trials = run_trials(tmp_path, base, remedy, check, original, len(original), "rebuild-indexes")
    assert trials >= 3 * 10


def _users(state: Path) -> dict[str, object]:
    from statestore.config import StoreConfig  # noqa: PLC0415

    with StateManager(state, config=QUIET) as manager:
        return dict(manager.store("users", config=StoreConfig(restore_mode="incremental")).items())


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_rebuild_rocksdb_survives_a_fault_at_every_file_step(tmp_path: Path) -> None:
    import msgpack  # noqa: PLC0415

    from statestore.config import RocksDBConfig  # noqa: PLC0415
    from statestore.stores.engine import RocksDBEngine  # noqa: PLC0415

    base = build_state(tmp_path / "base" / "state")
    _users(base)  # records restore_mode=incremental (a switch: rebuilt once, then trusted)
    engine = RocksDBEngine.open(base / "users-rocksdb-0", config=RocksDBConfig(), cache=None)
    applied = engine.applied_offset()
    assert applied is not None
    engine.write([(user(1).encode(), msgpack.packb({"round": -1}))], applied)
    engine.close()
    poisoned = _users(base)
    assert poisoned != live_users()
    args = ["repair", "rebuild-rocksdb", "", "--store", "users", "--apply"]

    recorder = StepRecorder()
    first = Path(shutil.copytree(base, tmp_path / "recorded" / "state"))
    quiet = io.StringIO()
    assert (
        inject(recorder, lambda: main([*args[:2], str(first), *args[3:]], out=quiet), first) == "ok"
    )
    assert _users(first) == live_users()
    file_steps = [s for s, _ in recorder.steps if s.startswith("repair.B")]
    assert len(file_steps) > 10  # B1 rename + fsync, B2 one delete per RocksDB file
    trials = 0
    for k in range(1, len(file_steps) + 1):
        for kind in KINDS:
            trial = Path(shutil.copytree(base, tmp_path / f"{kind}-{k}" / "state"))
            hook = FaultAt(kind, k, prefix="repair.B")
            try:
                with inject_faults(hook):
                    status = main([*args[:2], str(trial), *args[3:]], out=quiet)
                assert status == 1  # ENOSPC/EIO: a typed error, one line, exit 1
            except SimulatedCrash:
                abandon_dir(trial)
            assert _users(trial) in (live_users(), poisoned)  # the next open: old or rebuilt
            assert main([*args[:2], str(trial), *args[3:]], out=quiet) == 0  # the re-run
            assert _users(trial) == live_users()
            assert not (trial / "users-rocksdb-0.deleted").exists()
            stats.record("remedies.rebuild-rocksdb", trials=1, faults=1)
            stats.note("remedies.rebuild-rocksdb", kind)
            trials += 1
            shutil.rmtree(trial.parent)
    assert trials >= 3 * 10


def test_truncate_power_loss_images(tmp_path: Path) -> None:
    """A power cut after any file operation of a truncation (only what was fsynced survives,
    POSIX rules, ``power_loss.Recorder``): the image opens refused (typed) or with a prefix
    holding everything below the cut, and the remedy run again gives exactly the result."""
    import random  # noqa: PLC0415

    from tests.reliability.power_loss import Recorder  # noqa: PLC0415

    root = tmp_path / "root"
    base = root / "trunc-0"
    original = build(base)
    logs = sorted(base.glob("*.log"))
    data = logs[1].read_bytes()
    logs[1].write_bytes(data[: len(data) - 30])
    with pytest.raises(RepairRefusedError) as info:
        plan_truncation(base, int(logs[2].name[:20]) - 1)
    offset = info.value.offset
    assert offset is not None
    expected = [r for r in original if r[0] < offset]
    rec = Recorder(root)
    rec.start()
    with rec.recording():
        apply_truncation(plan_truncation(base, offset), config=CONFIG)
    rng = random.Random(5)
    images = 0
    outcomes: dict[str, int] = {}
    for step in range(rec.steps + 1):
        for variant in range(2):
            target = tmp_path / f"img{step}-{variant}"
            rec.image(step, target, None if variant == 0 else rng)
            image = target / base.name
            opened = check_plain_open(
                image, original, len(expected), tmp_path / f"s{step}-{variant}"
            )
            outcomes[opened] = outcomes.get(opened, 0) + 1
            plan = plan_truncation(image, offset)
            if not plan.nothing_to_do:
                apply_truncation(plan, config=CONFIG)
            assert read_all(image) == expected, f"step {step} variant {variant}"
            assert verify_errors(image) == []
            images += 1
            shutil.rmtree(target)
    stats.record("remedies.truncate.power-loss", trials=images, faults=images)
    for name, count in outcomes.items():
        stats.note("remedies.truncate.power-loss", f"then-open-{name}", count)
    assert images >= 2 * 20


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_rebuild_indexes_power_loss_images(tmp_path: Path) -> None:
    """A power cut after any file operation of an index rebuild: the image opens exactly
    (a missing index is rebuilt by the loader), and the remedy run again restores the
    index bytes as they were before the damage."""
    import random  # noqa: PLC0415

    from tests.reliability.power_loss import Recorder  # noqa: PLC0415

    root = tmp_path / "root"
    base = root / "idx-0"
    original = build(base)
    good = {p.name: p.read_bytes() for p in base.iterdir() if p.suffix in (".index", ".timeindex")}
    index = max(base.glob("*.index"), key=lambda p: p.stat().st_size)
    damaged = bytearray(good[index.name])
    damaged[4:8] = (int.from_bytes(damaged[4:8], "big") + 5).to_bytes(4, "big")
    index.write_bytes(bytes(damaged))
    rec = Recorder(root)
    rec.start()
    with rec.recording():
        apply_index_rebuild(plan_index_rebuild(base, config=CONFIG), config=CONFIG)
    rng = random.Random(7)
    images = 0
    for step in range(rec.steps + 1):
        for variant in range(2):
            target = tmp_path / f"img{step}-{variant}"
            rec.image(step, target, None if variant == 0 else rng)
            image = target / base.name
            opened = check_plain_open(image, original, len(original), tmp_path / f"s{step}")
            assert opened == "exact", f"step {step} variant {variant}: {opened}"
            apply_index_rebuild(plan_index_rebuild(image, config=CONFIG), config=CONFIG)
            now = {
                p.name: p.read_bytes()
                for p in image.iterdir()
                if p.suffix in (".index", ".timeindex")
            }
            assert now == good, f"step {step} variant {variant}"
            assert read_all(image) == original
            images += 1
            shutil.rmtree(target)
    stats.record("remedies.rebuild-indexes.power-loss", trials=images, faults=images)
    assert images >= 2 * 10


# --------------------------------------------------------------------------- roll-back


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_roll_back_survives_a_fault_at_every_step(tmp_path: Path) -> None:
    """``repair roll-back --apply`` over three stores (four partitions), a crash, ``ENOSPC``
    or ``EIO`` at each of its own steps (J1-J4, K1-K6) and at a sample of the loader's: after
    the fault the state directory is as before (no journal: every store opens as before), or
    it holds the journal and ``StateManager`` refuses it; ``repair complete --apply`` (or the
    remedy run again) then ends with every ``.log`` byte for byte as after and every store at
    the same commit."""
    from tests.cli.test_roll_back import (  # noqa: PLC0415 - the three-store template
        COMMITS,
        CUT,
        build_three_stores,
        log_files,
        model,
        roll_back_args,
        stores,
    )

    template = build_three_stores(tmp_path / "template")
    before = log_files(template)

    def remedy(state: Path) -> int:
        return main([*roll_back_args(state), "--apply"], out=io.StringIO())

    recorder = StepRecorder()
    first = Path(shutil.copytree(template, tmp_path / "recorded"))
    with inject_faults(recorder):
        assert remedy(first) == 0
    after = log_files(first)
    assert stores(first) == model(CUT)
    ks = fault_points(recorder)
    outcomes: dict[str, int] = {}
    for k in ks:
        for kind in KINDS:
            trial = Path(shutil.copytree(template, tmp_path / f"{kind}-{k}"))
            try:
                with inject_faults(FaultAt(kind, k)):
                    status = remedy(trial)
                got = "ok" if status == 0 else "io-error"
            except SimulatedCrash:
                got = "crash"
            abandon_dir(trial)
            if (trial / ".repair-journal").exists():
                seen = f"{got}-journal"
                with pytest.raises(RepairInProgressError):
                    StateManager(trial, config=QUIET)
                assert main(["repair", "complete", str(trial), "--apply"], out=io.StringIO()) == 0
            else:
                now = log_files(trial)
                assert now in (before, after), (kind, k)
                seen = f"{got}-{'before' if now == before else 'after'}"
                if now == before:
                    assert stores(trial) == model(COMMITS), (kind, k)
                    assert remedy(trial) == 0, (kind, k)
            assert not (trial / ".repair-journal").exists(), (kind, k)
            assert log_files(trial) == after, (kind, k)
            assert stores(trial) == model(CUT), (kind, k)
            outcomes[seen] = outcomes.get(seen, 0) + 1
            stats.record("remedies.roll-back", trials=1, faults=1)
            stats.note("remedies.roll-back", seen)
            shutil.rmtree(trial)
    print("roll-back fault outcomes", outcomes)
    assert any(o.endswith("-journal") for o in outcomes), outcomes
    assert any(o.endswith("-before") for o in outcomes), outcomes
