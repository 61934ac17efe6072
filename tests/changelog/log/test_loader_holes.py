"""Holes between segments: compaction's are proved by the swap checkpoint, every other one is refused.

The cleaner drops a group's emptied last batch (Kafka's rule), so a cleaned
segment may end before the next one begins.  Before its swap it raises
``cleaner-swap-offset-checkpoint`` above the base offset of every segment it
rewrote (S1b, :mod:`changelog.log.replace`); the loader accepts a hole after a
segment whose base offset is below it and refuses any other hole with a
:class:`LogInconsistencyError` naming the file, the position and the offsets,
having changed nothing.  A directory without any checkpoint of ours (a Kafka
broker's) is allowed its holes once: the open records them.
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import shutil
from pathlib import Path

import pytest

from changelog.cleaner.clean import clean, clean_log
from changelog.cleaner.manager import log_to_clean
from changelog.cleaner.worker import clean_in_process
from changelog.config import CleanerConfig, LogConfig
from changelog.errors import CorruptCheckpointError, LogInconsistencyError, LogStorageError
from changelog.fs import files
from changelog.fs.checkpoint import (
    CLEANER_CHECKPOINT,
    CLEANER_SWAP_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
    write_offset_checkpoint,
)
from changelog.fs.files import CLEAN_SHUTDOWN_FILE
from changelog.log.load_plan import plan_load
from changelog.log.log import Log
from changelog.segment.segment import LogSegment
from tests.changelog.conftest import FakeClock

CONFIG = LogConfig(
    segment_bytes=1024,
    index_interval_bytes=100,
    segment_index_bytes=1024,
    file_delete_delay_ms=0,
    min_cleanable_dirty_ratio=0.01,
)
CLEANER = CleanerConfig(dedupe_buffer_size_bytes=1 << 20)
State = list[tuple[int, bytes | None, bytes | None]]


def state(log: Log) -> State:
    return [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]


def holes(log: Log) -> list[tuple[int, int, int]]:
    """``(base offset, next offset, next base offset)`` of every segment ending early."""
    segments = log.segments
    return [
        (current.base_offset, current.read_next_offset(), following.base_offset)
        for current, following in itertools.pairwise(segments)
        if current.read_next_offset() < following.base_offset
    ]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def refused(directory: Path, error: type[Exception]) -> Exception:
    """Open must raise ``error`` (and verify's plan the same) and change nothing on disk."""
    before = snapshot(directory)
    with pytest.raises(error) as planned:
        plan_load(directory, topic="changelog", partition=0, config=CONFIG)
    with pytest.raises(error) as info:
        Log.open(directory, CONFIG, FakeClock())
    assert snapshot(directory) == before, "a refused open changed the directory"
    assert str(planned.value) == str(info.value)
    return info.value


def build_with_holes(directory: Path, clock: FakeClock) -> State:
    """One-record batches over three keys, a roll every three: the last batch of every segment
    is superseded later, so a pass empties it and (but for the round's last) drops it."""
    with Log.open(directory, CONFIG, clock) as log:
        for i in range(30):
            log.append([(b"k%d" % (i % 3), b"v%d" % i)])
            if i % 3 == 2:
                log.roll()
        log.append([(b"k0", b"last")])
        log.roll()
        clean_log(log, force=True, config=CLEANER)
        assert holes(log), "the pass should have left holes between segments"
        return state(log)


def test_holes_the_cleaner_leaves_are_explained_by_its_swap_checkpoint(
    log_dir: Path, clock: FakeClock
) -> None:
    expected = build_with_holes(log_dir, clock)
    proof = max(read_checkpoint(log_dir / CLEANER_SWAP_CHECKPOINT).values())
    plan = plan_load(log_dir, topic="changelog", partition=0, config=CONFIG)
    assert plan.warnings == ()
    with Log.open(log_dir, CONFIG, clock) as log:
        assert state(log) == expected
        found = holes(log)
        assert found and all(base < proof for base, _next, _following in found)
        log.append([(b"k1", b"more")])
        log.roll()
        clean_log(log, force=True, config=CLEANER)  # a second pass, more holes
        expected = state(log)
    with Log.open(log_dir, CONFIG, clock) as log:
        assert state(log) == expected


def test_a_hole_without_the_swap_checkpoint_is_refused(log_dir: Path, clock: FakeClock) -> None:
    build_with_holes(log_dir, clock)
    (log_dir / CLEANER_SWAP_CHECKPOINT).unlink()
    error = refused(log_dir, LogInconsistencyError)
    assert CLEANER_SWAP_CHECKPOINT in str(error) and "missing" in str(error)
    assert error.path.parent == log_dir  # type: ignore[attr-defined]
    assert error.path.suffix == ".log"  # type: ignore[attr-defined]
    assert error.position == error.path.stat().st_size  # type: ignore[attr-defined]
    assert error.offset < error.expected  # type: ignore[attr-defined]


def test_a_swap_checkpoint_below_a_hole_is_refused(log_dir: Path, clock: FakeClock) -> None:
    build_with_holes(log_dir, clock)
    write_offset_checkpoint(log_dir / CLEANER_SWAP_CHECKPOINT, "changelog", 0, 0)
    error = refused(log_dir, LogInconsistencyError)
    assert "holds 0" in str(error)


def test_a_garbage_swap_checkpoint_is_refused_only_where_a_hole_needs_it(
    log_dir: Path, clock: FakeClock, tmp_path: Path
) -> None:
    build_with_holes(log_dir, clock)
    (log_dir / CLEANER_SWAP_CHECKPOINT).write_bytes(b"0\n1\nchangelog 0 1x\n")
    error = refused(log_dir, CorruptCheckpointError)
    assert error.path == log_dir / CLEANER_SWAP_CHECKPOINT  # type: ignore[attr-defined]
    # Without a hole nothing reads it: the open goes on (the next pass that swaps names it).
    plain = tmp_path / "plain-0"
    with Log.open(plain, CONFIG, clock) as log:
        for i in range(20):
            log.append([(b"k%d" % i, b"v")])
    (plain / CLEANER_SWAP_CHECKPOINT).write_bytes(b"garbage")
    with Log.open(plain, CONFIG, clock) as log:
        assert len(state(log)) == 20
        assert len(log.segments) > 1
        log.append([(b"k0", b"new")])
        log.roll()
        with pytest.raises(CorruptCheckpointError):
            clean_log(log, force=True, config=CLEANER)
        assert log.failed is None
        assert not list(plain.glob("*.cleaned")), "the refused pass left its files"


def test_every_batch_boundary_cut_of_a_closed_segment_above_the_checkpoint_is_refused(
    log_dir: Path, clock: FakeClock, tmp_path: Path
) -> None:
    """The issue's shape: a closed segment cut exactly at a batch boundary after a clean close."""
    with Log.open(log_dir, CONFIG, clock) as log:
        for i in range(40):
            log.append([(b"k%d" % i, b"v" * 40)])
        closed = log.segments[:-1]
        cuts = [
            (segment.base_offset, position)
            for segment in closed
            for position, _header in segment.headers()
        ]
    assert len(closed) >= 3 and len(cuts) >= 20
    for n, (base, position) in enumerate(cuts):
        copy = tmp_path / f"cut{n}" / log_dir.name
        shutil.copytree(log_dir, copy)
        victim = copy / files.segment_file_name(base, ".log")
        os.truncate(victim, position)
        error = refused(copy, LogInconsistencyError)
        assert error.path == victim  # type: ignore[attr-defined]
        assert error.position == position  # type: ignore[attr-defined]
        shutil.rmtree(copy.parent)


def test_a_failed_swap_checkpoint_write_leaves_the_log_usable(
    log_dir: Path, clock: FakeClock
) -> None:
    """S1b fails (ENOSPC): nothing is swapped, the cleaned files go, the log takes appends."""
    with Log.open(log_dir, CONFIG, clock) as log:
        for i in range(30):
            log.append([(b"k%d" % (i % 3), b"v%d" % i)])
            if i % 3 == 2:
                log.roll()
        log.roll()
        before = state(log)
        bases = [s.base_offset for s in log.segments]

        def full(step: str, path: Path) -> None:
            if CLEANER_SWAP_CHECKPOINT in Path(path).name:
                raise OSError(errno.ENOSPC, "No space left on device (injected)")

        with files.inject_faults(full), pytest.raises(LogStorageError):
            clean_log(log, force=True, config=CLEANER)
        assert log.failed is None
        assert [s.base_offset for s in log.segments] == bases
        assert state(log) == before
        assert not list(log_dir.glob("*.cleaned*")) and not list(log_dir.glob("*.swap"))
        log.append([(b"k9", b"after")])
        clean_log(log, force=True, config=CLEANER)  # the retry works
        expected = state(log)
    with Log.open(log_dir, CONFIG, clock) as log:
        assert state(log) == expected


def _make_foreign(directory: Path) -> None:
    """Remove every file of ours that is not a segment: what a broker's directory holds."""
    for name in (
        RECOVERY_POINT_CHECKPOINT,
        LOG_START_OFFSET_CHECKPOINT,
        CLEANER_CHECKPOINT,
        CLEANER_SWAP_CHECKPOINT,
        CLEAN_SHUTDOWN_FILE,
    ):
        (directory / name).unlink(missing_ok=True)


def test_a_kafka_directory_is_allowed_its_holes_once_and_then_holds_to_them(
    log_dir: Path, clock: FakeClock
) -> None:
    expected = build_with_holes(log_dir, clock)
    _make_foreign(log_dir)
    plan = plan_load(log_dir, topic="changelog", partition=0, config=CONFIG)
    assert plan.warnings and all("Kafka broker's cleaner" in w for w in plan.warnings)
    (step,) = [s for s in plan.steps if s.action == "write-checkpoint"]
    assert step.path == log_dir / CLEANER_SWAP_CHECKPOINT and step.pass_name == "L9"
    with Log.open(log_dir, CONFIG, clock) as log:
        assert state(log) == expected
        last_hole = max(following for _b, _n, following in holes(log))
        for i in range(20):  # new segments above the adopted holes
            log.append([(b"n%d" % i, b"v" * 40)])
        log.roll()
    assert max(read_checkpoint(log_dir / CLEANER_SWAP_CHECKPOINT).values()) == last_hole
    again = plan_load(log_dir, topic="changelog", partition=0, config=CONFIG)
    assert again.warnings == () and not again.steps
    # A hole above the adopted ones is damage again.
    with LogSegment.open(log_dir, last_hole, config=CONFIG) as segment:
        position, _header = list(segment.headers())[-1]
    victim = log_dir / files.segment_file_name(last_hole, ".log")
    os.truncate(victim, position)
    error = refused(log_dir, LogInconsistencyError)
    assert error.path == victim  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_pass_stopped_between_its_swap_and_its_cleaner_checkpoint_reopens(
    log_dir: Path, clock: FakeClock, mode: str
) -> None:
    """The lead's case from the last session: the swap done, the cleaner checkpoint never
    written (a crash there).  The holes are explained by the swap checkpoint written first;
    in both worker modes (the service's worker process swaps in the parent)."""
    with Log.open(log_dir, CONFIG, clock) as log:
        for i in range(30):
            log.append([(b"k%d" % (i % 3), b"v%d" % i)])
            if i % 3 == 2:
                log.roll()
        log.roll()
        expected = {r.key: r.value for r in log.read(0)}

        def crash_at_the_cleaner_checkpoint(step: str, path: Path) -> None:
            if Path(path).name.startswith(CLEANER_CHECKPOINT):
                raise files.SimulatedCrash(step)

        run = functools.partial(
            clean_in_process if mode == "process" else clean,
            log_to_clean(log, now_ms=clock(), force=True),
            config=CLEANER,
            now_ms=clock(),
        )
        with (
            files.inject_faults(crash_at_the_cleaner_checkpoint),
            pytest.raises(files.SimulatedCrash),
        ):
            run()
        log.abandon()
    assert not (log_dir / CLEANER_CHECKPOINT).exists()
    with Log.open(log_dir, CONFIG, clock) as log:
        assert holes(log), "the swap should have happened and left holes"
        assert {r.key: r.value for r in log.read(0)} == expected
