"""Which typed error -> which remedy, checked on random damage (docs/recovery.md's table).

The corruption fuzz's partitions (``test_corruption_fuzz.build``: several
segments, a cleaning pass, a clean or a crashed close) get one random damage
to a ``.log`` file (flip / zero / truncate / append, in a closed or the active
segment).  Whenever the open is refused, or a read fails, with a typed
``CorruptDataError`` carrying an offset, the remedy the table names is run:

- ``repair truncate`` at the error's offset (or, when the remedy refuses
  that one, at the offset its ``RepairRefusedError`` names);
- for damage in the active segment after a clean shutdown, ``drop-torn-tail``
  first (falling back to ``truncate`` when it refuses).

Then the log must open, read exactly the original records below the new
log end offset (never an altered or a missing one below it), agree with the
plan's figures (log end offset, removed records), and pass verify.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from changelog.errors import ChangelogError, CorruptDataError, RepairRefusedError
from changelog.log.log import Log
from changelog.repair.truncate import apply_truncation, plan_torn_tail_drop, plan_truncation
from statestore.cli.progress import Progress
from statestore.cli.verify import verify_partition
from tests.reliability import stats
from tests.reliability.test_corruption_fuzz import CONFIG, build, damage, target_file

Rec = tuple[int, bytes | None, bytes | None]
TRIALS = 96
KINDS = ("closed.log", "active.log")
DAMAGES = ("flip", "zero", "truncate", "append")


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", lambda _fd: None)


def read_all(directory: Path) -> list[Rec]:
    with Log.open(directory, config=CONFIG) as log:
        return [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]


def first_failure(directory: Path) -> CorruptDataError | None:
    """The typed error an open, or a full read, meets (``None``: everything reads)."""
    try:
        read_all(directory)
    except CorruptDataError as exc:
        return exc
    return None


def read_error_offset(directory: Path) -> int:
    """After a read error: the offset after the last record read before it."""
    last = -1
    try:
        with Log.open(directory, config=CONFIG) as log:
            for record in log.read(log.log_start_offset):
                last = record.offset
    except CorruptDataError:
        pass
    return last + 1


def test_every_refusal_with_an_offset_is_remedied_by_the_documented_remedy(
    tmp_path: Path,
) -> None:
    bases = {}
    originals = {}
    for clean in (True, False):
        directory = tmp_path / f"base-{clean}" / "fuzz-0"
        originals[clean] = build(directory, clean=clean)
        bases[clean] = directory
    rng = random.Random(29)
    outcomes: dict[str, int] = {}
    remedied = 0
    for trial in range(TRIALS):
        clean = trial % 2 == 0
        kind = KINDS[(trial // 2) % len(KINDS)]
        how = DAMAGES[(trial // 4) % len(DAMAGES)]
        directory = Path(shutil.copytree(bases[clean], tmp_path / f"t{trial}" / "fuzz-0"))
        original = originals[clean]
        damage(target_file(directory, kind, rng), how, rng)
        error = first_failure(directory)
        if error is None:
            outcomes["no-error"] = outcomes.get("no-error", 0) + 1
            shutil.rmtree(directory.parent)
            continue
        offset = error.offset if error.offset is not None else read_error_offset(directory)
        plan = None
        if kind == "active.log" and clean:
            try:
                plan = plan_torn_tail_drop(directory)
                outcomes["drop-torn-tail"] = outcomes.get("drop-torn-tail", 0) + 1
            except RepairRefusedError as exc:
                if exc.offset is not None:
                    offset = min(offset, exc.offset)
        if plan is None:
            suggested: int | None = None
            try:
                plan = plan_truncation(directory, offset)
            except RepairRefusedError as exc:
                suggested = exc.offset
            if suggested is not None:
                assert suggested < offset, f"trial {trial}: suggested {suggested} >= {offset}"
                plan = plan_truncation(directory, suggested)
            assert plan is not None, f"trial {trial}: refused without an offset to use"
            outcomes["truncate"] = outcomes.get("truncate", 0) + 1
        if not plan.nothing_to_do:
            assert apply_truncation(plan, config=CONFIG) == plan.log_end_offset_after
        try:
            got = read_all(directory)
        except ChangelogError as exc:  # pragma: no cover - the finding this test is for
            pytest.fail(f"trial {trial} ({kind}, {how}, clean={clean}): still refused: {exc}")
        end = plan.log_end_offset_after
        assert got == [r for r in original if r[0] < end], f"trial {trial}: wrong data"
        readable_removed = [r for r in original if r[0] >= end]
        assert plan.removed_records <= len(readable_removed)
        with Progress("verify", enabled=False) as progress:
            report = verify_partition(directory, progress)
        assert report.errors == 0, [p.render() for p in report.problems]
        remedied += 1
        shutil.rmtree(directory.parent)
    stats.record("remedies.fuzz", trials=TRIALS, faults=TRIALS)
    for name, count in outcomes.items():
        stats.note("remedies.fuzz", name, count)
    assert remedied >= TRIALS // 2
