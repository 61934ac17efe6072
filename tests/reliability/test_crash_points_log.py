"""Crash after every file-system step of every on-disk protocol of the changelog.

For each protocol (append, append that rolls, roll, flush, close with its
checkpoints, a cleaning pass with its segment swap, tombstone removal,
retention deletes, truncation, and recovery at open itself) the operation is
first run once under a :class:`~tests.reliability.crash.StepRecorder` to list its
fault points; then, for every ``k``, a copy of the same starting directory is
opened, the operation crashes before step ``k`` (``files.inject_faults``), every
descriptor is dropped as by a dying process, and the directory is reopened.

The recovered log must be *exactly before or exactly after* the operation
(record for record: offset, key, value); for a cleaning pass, which swaps
groups one at a time, every record must be one that existed before and every
record the finished pass kept must still be there; for retention, a suffix of
the log between the two.  Then the recovered log must accept an append at its
log end offset and return it after a clean reopen.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog import CleanerConfig, LogConfig
from changelog.cleaner.clean import clean_log
from changelog.errors import ChangelogError
from changelog.fs.checkpoint import CLEANER_SWAP_CHECKPOINT
from changelog.log.log import Log
from changelog.record.batch import encode_batch
from tests.reliability import stats
from tests.reliability.conftest import SOAK_SCALE
from tests.reliability.crash import CrashAt, StepRecorder, abandon_dir, crashing_at
from tests.reliability.model import ModelCache, commit_ops

SEED = 7
SWAP_CHECKPOINT = CLEANER_SWAP_CHECKPOINT
PARTITION = "cp-0"
CLEANER = CleanerConfig(dedupe_buffer_size_bytes=1 << 20)
Rec = tuple[int, bytes | None, bytes | None]


@attrs.frozen
class Snapshot:
    """Everything a reader can observe of a log."""

    records: tuple[Rec, ...]
    log_start: int
    log_end: int

    def state(self) -> dict[bytes, bytes]:
        """The key -> value map the records imply."""
        out: dict[bytes, bytes] = {}
        for _offset, key, value in self.records:
            assert key is not None
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out


class Clock:
    """A settable clock in milliseconds."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        """Start at ``now_ms``."""
        self.now_ms = now_ms

    def __call__(self) -> int:
        """The current time."""
        return self.now_ms


def open_log(directory: Path, config: dict[str, Any], clock: Clock | None = None) -> Log:
    """Open the log in ``directory`` with ``config``."""
    return Log.open(directory, config=LogConfig(**config), clock=clock)


def snapshot(directory: Path, config: dict[str, Any], clock: Clock | None = None) -> Snapshot:
    """Open, read everything, close cleanly."""
    with open_log(directory, config, clock) as log:
        records = tuple((r.offset, r.key, r.value) for r in log.read(log.log_start_offset))
        return Snapshot(records, log.log_start_offset, log.log_end_offset)


def recover_and_use(directory: Path, config: dict[str, Any], clock: Clock) -> Snapshot:
    """Reopen after the crash and snapshot; then the log must take an append at its end.

    The appended record must come back, after the recovered records, from a
    clean reopen.
    """
    with open_log(directory, config, clock) as log:
        records = tuple((r.offset, r.key, r.value) for r in log.read(log.log_start_offset))
        got = Snapshot(records, log.log_start_offset, log.log_end_offset)
        offsets = [offset for offset, _k, _v in records]
        assert offsets == sorted(set(offsets)), "offsets repeat or go backwards after recovery"
        assert all(got.log_start <= o < got.log_end for o in offsets), "offset outside the log"
        log.append([(b"after-crash", b"ok")])
    again = snapshot(directory, config, clock)
    assert again.records == (*got.records, (got.log_end, b"after-crash", b"ok")), (
        "the recovered log did not take an append at its log end offset"
    )
    return got


def _append_commits(log: Log, first: int, last: int) -> None:
    for i in range(first, last + 1):
        log.append(commit_ops(SEED, i))


Check = Callable[[Snapshot, Snapshot, Snapshot], None]


def exactly_before_or_after(before: Snapshot, after: Snapshot, got: Snapshot) -> None:
    """The recovered log is the log before or the log after, record for record."""
    assert got.records in (before.records, after.records), (
        f"recovered {len(got.records)} records, ends at {got.log_end}: "
        f"neither before ({before.log_end}) nor after ({after.log_end})"
    )


def compaction_between(before: Snapshot, after: Snapshot, got: Snapshot) -> None:
    """Only records that existed, at their offsets; all the pass kept; same key -> value map."""
    assert set(got.records) <= set(before.records), "a record that never existed appeared"
    assert set(after.records) <= set(got.records), "a record the pass kept is missing"
    assert got.state() == before.state(), "compaction changed the key -> value map"
    assert got.log_end == before.log_end


def prefix_between(before: Snapshot, after: Snapshot, got: Snapshot) -> None:
    """Truncation: a prefix of the log before, at least as long as the log after (no hole)."""
    assert got.records == before.records[: len(got.records)], (
        f"recovered {len(got.records)} records ending at {got.log_end}: not a prefix of the "
        f"log before the truncation (a hole: {_holes(before, got)})"
    )
    assert len(got.records) >= len(after.records)


def _holes(before: Snapshot, got: Snapshot) -> list[int]:
    kept = {offset for offset, _k, _v in got.records}
    last = max(kept, default=-1)
    return sorted(o for o, _k, _v in before.records if o not in kept and o < last)[:5]


def suffix_between(before: Snapshot, after: Snapshot, got: Snapshot) -> None:
    """Retention: a contiguous suffix of the log before, containing the log after."""
    assert got.records == before.records[len(before.records) - len(got.records) :]
    assert set(after.records) <= set(got.records)
    assert got.log_end == before.log_end
    assert before.log_start <= got.log_start <= after.log_start


@attrs.frozen
class Scenario:
    """One protocol to crash: how to build the start, open it, run it, and judge the result."""

    name: str
    config: dict[str, Any]
    prepare: Callable[[Path, Clock], None]
    operation: Callable[[Path, Clock], None]
    check: Check
    min_steps: int = 1
    holes: bool = False
    """A cleaning pass that must leave holes between segments (emptied last batches dropped),
    so that its crash points exercise the loader's refusal of holes compaction cannot explain."""
    swap_checkpoint: bool = False
    """The pass must raise the swap checkpoint (S1b): its write's fault points are crashed at."""


def holes_between_segments(directory: Path, config: dict[str, Any]) -> int:
    """How many segments of the (closed) log end before the next one begins."""
    with open_log(directory, config) as log:
        segments = log.segments
        return sum(
            1
            for current, following in itertools.pairwise(segments)
            if current.read_next_offset() < following.base_offset
        )


SMALL: dict[str, Any] = {"segment_bytes": 1024, "index_interval_bytes": 128}


def _prepare_commits(
    n: int, config: dict[str, Any], *, clean_close: bool = True
) -> Callable[[Path, Clock], None]:
    def prepare(directory: Path, clock: Clock) -> None:
        log = open_log(directory, config, clock)
        _append_commits(log, 0, n - 1)
        if clean_close:
            log.close()
        else:
            log.abandon()  # crash: no checkpoints, no marker
            abandon_dir(directory)

    return prepare


def _op(
    config: dict[str, Any], action: Callable[[Log, Clock], object]
) -> Callable[[Path, Clock], None]:
    def operation(directory: Path, clock: Clock) -> None:
        # ``with``: a SimulatedCrash makes Log.__exit__ abandon the log (descriptors
        # closed, lock released, nothing written), as the process's death would.
        with open_log(directory, config, clock) as log:
            action(log, clock)

    return operation


def _advance_and_clean(log: Log, clock: Clock) -> None:
    clean_log(log, force=True, config=CLEANER)
    clock.now_ms += 10 * 24 * 3600 * 1000  # past delete_retention_ms: tombstones may go
    clean_log(log, force=True, config=CLEANER)


def _prepare_cleaned(n: int, config: dict[str, Any]) -> Callable[[Path, Clock], None]:
    def prepare(directory: Path, clock: Clock) -> None:
        log = open_log(directory, config, clock)
        _append_commits(log, 0, n - 1)
        log.roll()
        clean_log(log, force=True, config=CLEANER)
        log.close()

    return prepare


def _prepare_overwrites(n: int, config: dict[str, Any]) -> Callable[[Path, Clock], None]:
    """``n`` one-record batches over three keys, rolled every 3: small segments, so groups merge."""

    def prepare(directory: Path, clock: Clock) -> None:
        with open_log(directory, config, clock) as log:
            for i in range(n):
                log.append([(b"k%d" % (i % 3), b"v%d" % i)])
                if i % 3 == 2:
                    log.roll()

    return prepare


def _prepare_holes(n: int, config: dict[str, Any]) -> Callable[[Path, Clock], None]:
    """``n`` one-record batches of 300 bytes over three keys, a roll every two: each segment is
    its own group, and its last batch is superseded later, so the pass empties and drops it
    (Kafka's rule): a hole after every rewritten segment but the round's last."""

    def prepare(directory: Path, clock: Clock) -> None:
        with open_log(directory, config, clock) as log:
            for i in range(n):
                log.append([(b"k%d" % (i % 3), bytes([i % 256]) * 300)])
                if i % 2 == 1:
                    log.roll()

    return prepare


def _prepare_torn(n: int, config: dict[str, Any]) -> Callable[[Path, Clock], None]:
    def prepare(directory: Path, clock: Clock) -> None:
        log = open_log(directory, config, clock)
        _append_commits(log, 0, n - 1)
        active = log.active_segment.log_path
        size = log.active_segment.size_bytes
        end = log.log_end_offset
        log.abandon()  # crash: no checkpoints, no marker
        abandon_dir(directory)
        os.truncate(active, size)  # no preallocated zeros: the file ends at its last batch
        torn = encode_batch(end, [(b"torn", b"t" * 300)], timestamp_ms=1)
        with active.open("ab") as handle:
            handle.write(torn[:40])  # a write cut short: the start of a real batch
        for index in directory.glob("*.index"):
            index.unlink()
            break

    return prepare


def _recover(config: dict[str, Any]) -> Callable[[Path, Clock], None]:
    def operation(directory: Path, clock: Clock) -> None:
        with open_log(directory, config, clock):
            pass

    return operation


MEDIUM: dict[str, Any] = {"segment_bytes": 2048, "index_interval_bytes": 128}
RETENTION = {**SMALL, "cleanup_policy": "delete", "retention_bytes": 1024}


def scenarios(scale: int) -> list[Scenario]:
    """Every protocol; ``scale`` multiplies the number of commits prepared (1 in CI)."""
    return [
        Scenario(
            "append",
            {},
            _prepare_commits(10 * scale, {}),
            _op({}, lambda log, _c: log.append(commit_ops(SEED, 10_000))),
            exactly_before_or_after,
        ),
        Scenario(
            "append.unclean-start",
            SMALL,
            _prepare_commits(10 * scale, SMALL, clean_close=False),
            _op(SMALL, lambda log, _c: log.append(commit_ops(SEED, 10_000))),
            exactly_before_or_after,
        ),
        Scenario(
            "append.rolling",
            SMALL,
            _prepare_commits(10 * scale, SMALL),
            _op(SMALL, lambda log, _c: _append_commits(log, 10_000, 10_000)),
            exactly_before_or_after,
        ),
        Scenario(
            "roll",
            SMALL,
            _prepare_commits(6 * scale, SMALL),
            _op(SMALL, lambda log, _c: log.roll()),
            exactly_before_or_after,
        ),
        Scenario(
            "flush",
            SMALL,
            _prepare_commits(6 * scale, SMALL),
            _op(SMALL, lambda log, _c: log.flush()),
            exactly_before_or_after,
        ),
        Scenario(
            "truncate",
            SMALL,
            _prepare_commits(8 * scale, SMALL),
            _op(SMALL, lambda log, _c: log.truncate_to(log.log_end_offset // 2)),
            prefix_between,
        ),
        Scenario(
            "clean.swap",
            MEDIUM,
            _prepare_commits(8 * scale, MEDIUM),
            _op(MEDIUM, lambda log, _c: (log.roll(), clean_log(log, force=True, config=CLEANER))),
            compaction_between,
        ),
        Scenario(
            "clean.tombstones",
            SMALL,
            _prepare_cleaned(16 * scale, SMALL),
            _op(SMALL, _advance_and_clean),
            compaction_between,
        ),
        Scenario(
            "clean.merge",
            SMALL,
            _prepare_overwrites(12 * scale, SMALL),
            _op(SMALL, lambda log, _c: (log.roll(), clean_log(log, force=True, config=CLEANER))),
            compaction_between,
        ),
        Scenario(
            "clean.holes",
            SMALL,
            _prepare_holes(12 * scale, SMALL),
            _op(SMALL, lambda log, _c: (log.roll(), clean_log(log, force=True, config=CLEANER))),
            compaction_between,
            holes=True,
            swap_checkpoint=True,
        ),
        Scenario(
            "retention.delete",
            RETENTION,
            _prepare_commits(10 * scale, RETENTION),
            _op(RETENTION, lambda log, _c: log.delete_old_segments()),
            suffix_between,
        ),
        Scenario(
            "recovery.torn-tail",
            SMALL,
            _prepare_torn(10 * scale, SMALL),
            _recover(SMALL),
            exactly_before_or_after,
        ),
    ]


def run_scenario(tmp_path: Path, scenario: Scenario, prefix: str) -> int:
    """Crash ``scenario`` at every step; returns the number of crash points."""
    kind = f"{prefix}.{scenario.name}"
    base = tmp_path / "base" / PARTITION
    clock = Clock()
    scenario.prepare(base, clock)
    start_ms = clock.now_ms

    def fresh(name: str) -> tuple[Path, Clock]:
        target = tmp_path / name / PARTITION
        shutil.copytree(base, target)
        return target, Clock(start_ms)

    before_dir, before_clock = fresh("before")
    before = snapshot(before_dir, scenario.config, before_clock)

    full_dir, full_clock = fresh("full")
    recorder = StepRecorder()
    with crashing_at(recorder):
        scenario.operation(full_dir, full_clock)
    after = snapshot(full_dir, scenario.config, full_clock)
    steps = recorder.steps
    assert len(steps) >= scenario.min_steps, f"{scenario.name}: no fault points passed"
    if scenario.holes:
        holes = holes_between_segments(full_dir, scenario.config)
        assert holes > 0, f"{scenario.name}: the pass left no hole between segments"
        stats.note(kind, "holes_after_pass", holes)
    at_s1b = [k for k, (_step, path) in enumerate(steps, 1) if SWAP_CHECKPOINT in path.name]
    if scenario.swap_checkpoint:
        assert at_s1b, f"{scenario.name}: no fault point in the swap checkpoint write (S1b)"
        stats.note(kind, "crash_points_in_swap_checkpoint", len(at_s1b))

    failures: list[str] = []
    for k in range(1, len(steps) + 1):
        crash_dir, crash_clock = fresh(f"crash-{k}")
        hook = CrashAt(k)
        with crashing_at(hook):
            scenario.operation(crash_dir, crash_clock)
        abandon_dir(crash_dir)
        assert hook.crashed_at is not None, f"{scenario.name}: step {k} was never reached"
        ok = True
        try:
            got = recover_and_use(crash_dir, scenario.config, crash_clock)
            scenario.check(before, after, got)
        except (AssertionError, ChangelogError) as exc:
            ok = False
            step, path = hook.crashed_at
            failures.append(f"crash before step {k} ({step} {path.name}): {exc}".splitlines()[0])
        stats.record(kind, trials=1, faults=1, wrong=int(not ok))
        shutil.rmtree(crash_dir.parent)
    stats.note(kind, "steps", len(steps))
    assert not failures, f"{len(failures)} of {len(steps)} crash points: " + "; ".join(failures[:3])
    return len(steps)


SCENARIOS = scenarios(1)
BIG_SCENARIOS = scenarios(SOAK_SCALE)


LONG_SWEEPS = {"clean.holes", "clean.merge", "clean.swap", "clean.tombstones"}
"""Over 30 s each on a loaded 2-core machine: in the slow tier (``./dev test --tier slow``)."""


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, id=s.name, marks=[pytest.mark.slow] if s.name in LONG_SWEEPS else [])
        for s in SCENARIOS
    ],
)
def test_crash_at_every_step(tmp_path: Path, scenario: Scenario) -> None:
    run_scenario(tmp_path, scenario, "crashpoint.log")


@pytest.mark.slow
@pytest.mark.parametrize("scenario", BIG_SCENARIOS, ids=[s.name for s in BIG_SCENARIOS])
def test_crash_at_every_step_big(tmp_path: Path, scenario: Scenario) -> None:
    """The same with ``STATESTORE_SOAK_SCALE`` times the data: more segments, groups, swaps."""
    run_scenario(tmp_path, scenario, "crashpoint.log.big")


def test_model_is_deterministic() -> None:
    cache = ModelCache(SEED)
    assert cache.after(30) == ModelCache(SEED).after(30)
