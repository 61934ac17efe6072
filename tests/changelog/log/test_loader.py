"""Recovery at open, after Kafka's LogLoaderTest, plus crash injection after every file-system step."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

from changelog.config import LogConfig
from changelog.errors import (
    CheckpointMismatchError,
    CorruptCheckpointError,
    CorruptRecordError,
    LogInconsistencyError,
)
from changelog.fs import files
from changelog.fs.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    write_offset_checkpoint,
)
from changelog.fs.files import CLEAN_SHUTDOWN_FILE
from changelog.log.log import Log
from changelog.record.batch import decode_records, encode_batch, encode_records
from changelog.segment.segment import LogSegment
from tests.changelog.conftest import FakeClock, records

State = list[tuple[int, bytes | None, bytes | None]]


def state(log: Log) -> State:
    return [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]


def fill(log: Log, batches: int, per_batch: int = 3) -> None:
    for n in range(batches):
        log.append(records(n * per_batch, per_batch))


@pytest.fixture
def recovered(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Base offsets of the segments whose ``recover()`` runs."""
    calls: list[int] = []
    original = LogSegment.recover

    def spy(segment: LogSegment, **kwargs: int | None) -> int:
        calls.append(segment.base_offset)
        return original(segment, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", spy)
    return calls


def build(
    log_dir: Path, config: LogConfig, clock: FakeClock, batches: int = 30, *, clean: bool
) -> State:
    log = Log.open(log_dir, config, clock)
    fill(log, batches)
    content = state(log)
    if clean:
        log.close()
    else:
        log.abandon()
    return content


def seg_path(log_dir: Path, base: int, suffix: str = ".log") -> Path:
    return log_dir / files.segment_file_name(base, suffix)


# ----------------------------------------------------------------- clean and unclean shutdown


def test_clean_shutdown_recovers_nothing(
    log_dir: Path, small_config: LogConfig, clock: FakeClock, recovered: list[int]
) -> None:
    content = build(log_dir, small_config, clock, clean=True)
    with Log.open(log_dir, small_config, clock) as log:
        assert recovered == []
        assert state(log) == content
        assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()


def test_unclean_shutdown_recovers_from_the_recovery_point(
    log_dir: Path, small_config: LogConfig, clock: FakeClock, recovered: list[int]
) -> None:
    content = build(log_dir, small_config, clock, clean=False)
    bases = sorted(int(p.name[:20]) for p in log_dir.glob("*.log"))
    with Log.open(log_dir, small_config, clock) as log:
        assert recovered == [bases[-1]]  # every roll checkpointed the recovery point
        assert state(log) == content
        assert log.recovery_point == bases[-1]


def test_missing_checkpoints_recover_everything(
    log_dir: Path, small_config: LogConfig, clock: FakeClock, recovered: list[int]
) -> None:
    """A Kafka partition directory copied in (no checkpoints of ours, no marker)."""
    content = build(log_dir, small_config, clock, clean=True)
    for name in (CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
        (log_dir / name).unlink()
    with Log.open(log_dir, small_config, clock) as log:
        assert recovered == sorted(int(p.name[:20]) for p in log_dir.glob("*.log"))
        assert state(log) == content


def _snapshot(log_dir: Path) -> dict[str, bytes]:
    """Every file of the directory, by name, with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(log_dir.iterdir()) if p.is_file()}


def refused(
    log_dir: Path, config: LogConfig, clock: FakeClock, error: type[Exception]
) -> Exception:
    """Open must raise ``error`` and change nothing on disk; returns the error."""
    before = _snapshot(log_dir)
    with pytest.raises(error) as info:
        Log.open(log_dir, config, clock)
    assert _snapshot(log_dir) == before, "a refused open changed the directory"
    return info.value


def test_garbage_recovery_point_checkpoint_is_refused(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    build(log_dir, small_config, clock, clean=False)
    (log_dir / RECOVERY_POINT_CHECKPOINT).write_bytes(b"0\n7\nnonsense")
    error = refused(log_dir, small_config, clock, CorruptCheckpointError)
    assert error.path == log_dir / RECOVERY_POINT_CHECKPOINT  # type: ignore[attr-defined]


# ----------------------------------------------------------------- torn and corrupt tails


@pytest.fixture
def plain_config(small_config: LogConfig) -> LogConfig:
    """``small_config`` without preallocation: the ``.log`` ends at its last batch, as
    Kafka's (``preallocate=false``) do; the zero-filled tail has its own tests below."""
    return attrs.evolve(small_config, preallocate=False)


def test_torn_tail_is_truncated(log_dir: Path, plain_config: LogConfig, clock: FakeClock) -> None:
    content = build(log_dir, plain_config, clock, clean=False)
    active = max(log_dir.glob("*.log"))
    size = active.stat().st_size
    os.truncate(active, size - 5)  # cut into the last batch (3 records)
    with Log.open(log_dir, plain_config, clock) as log:
        assert state(log) == content[:-3]
        assert log.log_end_offset == content[-3][0]
        log.append(records(1000, 1))
        expected = [*content[:-3], (content[-3][0], b"k1000", records(1000, 1)[0][1])]
        assert state(log) == expected
    with Log.open(log_dir, plain_config, clock) as log:
        assert state(log) == expected


def test_a_torn_write_of_a_long_batch_is_truncated(
    log_dir: Path, plain_config: LogConfig, clock: FakeClock
) -> None:
    """The start of a batch whose declared length runs past the end of the file: cut."""
    content = build(log_dir, plain_config, clock, clean=False)
    active = max(log_dir.glob("*.log"))
    size = active.stat().st_size
    head = encode_batch(content[-1][0] + 1, [(b"k", b"v" * 500)], timestamp_ms=1)
    with active.open("ab") as f:
        f.write(head[:300])
    with Log.open(log_dir, plain_config, clock) as log:
        assert state(log) == content
    assert active.stat().st_size == size


@pytest.mark.parametrize(
    "garbage",
    [
        (0).to_bytes(8, "big") + (100).to_bytes(4, "big") + b"\x07" * 100,  # bad magic
        (0).to_bytes(8, "big") + (10).to_bytes(4, "big") + b"\x02" * 10,  # too short a batch
        b"\x01" * 20,  # a negative length
    ],
    ids=["bad-magic", "short-length", "negative-length"],
)
def test_garbage_appended_is_refused(
    log_dir: Path, plain_config: LogConfig, clock: FakeClock, garbage: bytes
) -> None:
    """Bytes no interrupted write leaves are not a torn tail: an error, nothing cut."""
    build(log_dir, plain_config, clock, clean=False)
    active = max(log_dir.glob("*.log"))
    size = active.stat().st_size
    with active.open("ab") as f:
        f.write(garbage)
    error = refused(log_dir, plain_config, clock, CorruptRecordError)
    assert error.path == active  # type: ignore[attr-defined]
    assert error.position == size  # type: ignore[attr-defined]


def test_corruption_in_a_closed_segment_past_the_recovery_point_is_refused(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    """Kafka truncates here and deletes every later segment; a replica refetches them.  We
    have no replica: a closed segment was flushed when the log rolled past it, so damage
    in it is an error naming the file, the position and the offset, and nothing changes."""
    build(log_dir, small_config, clock, clean=False)
    (log_dir / RECOVERY_POINT_CHECKPOINT).unlink()  # recovery point 0: everything is re-validated
    bases = sorted(int(p.name[:20]) for p in log_dir.glob("*.log"))
    assert len(bases) >= 3
    victim = seg_path(log_dir, bases[1])
    with LogSegment.open(log_dir, bases[1], config=small_config) as segment:
        positions = [(p, h) for p, h in segment.headers()]
    position, header = positions[2]
    with victim.open("r+b") as f:
        f.seek(position + 40)
        f.write(b"\x00\x01\x02")
    error = refused(log_dir, small_config, clock, CorruptRecordError)
    assert error.path == victim  # type: ignore[attr-defined]
    assert error.position == position  # type: ignore[attr-defined]
    assert error.offset == header.base_offset  # type: ignore[attr-defined]


def test_corruption_in_the_middle_of_the_active_segment_is_refused(
    log_dir: Path, plain_config: LogConfig, clock: FakeClock
) -> None:
    """Valid batches after the damage: not a torn tail, so nothing is cut."""
    build(log_dir, plain_config, clock, clean=False)
    active = max(log_dir.glob("*.log"))
    base = int(active.name[:20])
    with LogSegment.open(log_dir, base, config=plain_config) as segment:
        positions = [(p, h) for p, h in segment.headers()]
    assert len(positions) >= 3
    position, _header = positions[1]
    with active.open("r+b") as f:
        f.seek(position + 65)
        f.write(b"\xff")
    error = refused(log_dir, plain_config, clock, CorruptRecordError)
    assert error.position == position  # type: ignore[attr-defined]
    assert "valid batch follows" in str(error)


def test_corruption_below_recovery_point_is_reported_on_read(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    content = build(log_dir, small_config, clock, clean=True)
    victim = seg_path(log_dir, 0)
    with LogSegment.open(log_dir, 0, config=small_config) as segment:
        position, header = list(segment.headers())[3]
    with victim.open("r+b") as f:
        f.seek(position + 70)
        f.write(b"\xee")
    with Log.open(log_dir, small_config, clock) as log:
        reader = log.read()
        assert [next(reader).offset for _ in range(header.base_offset)] == list(
            range(header.base_offset)
        )
        with pytest.raises(CorruptRecordError) as info:
            next(reader)
        assert info.value.path == victim
        assert info.value.position == position
        with pytest.raises(CorruptRecordError):
            list(log.read_batches(header.base_offset))
        # everything after the damaged batch is still readable
        after = header.next_offset
        assert state_from(log, after) == [r for r in content if r[0] >= after]


def state_from(log: Log, offset: int) -> State:
    return [(r.offset, r.key, r.value) for r in log.read(offset)]


# ----------------------------------------------------------------- indexes


def _index_bytes(log_dir: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(log_dir.iterdir())
        if p.suffix in (".index", ".timeindex")
    }


def test_deleted_index_files_are_rebuilt_after_clean_shutdown(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    content = build(log_dir, small_config, clock, clean=True)
    before = _index_bytes(log_dir)
    seg_path(log_dir, 0, ".index").unlink()
    bases = sorted(int(p.name[:20]) for p in log_dir.glob("*.log"))
    seg_path(log_dir, bases[1], ".timeindex").unlink()
    with Log.open(log_dir, small_config, clock) as log:
        assert state(log) == content
        assert _index_bytes(log_dir) == before
        assert next(r.offset for r in log.read(bases[1] + 1)) == bases[1] + 1


def test_garbage_index_files_are_rebuilt(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    content = build(log_dir, small_config, clock, clean=True)
    before = _index_bytes(log_dir)
    seg_path(log_dir, 0, ".index").write_bytes(os.urandom(45))
    seg_path(log_dir, 0, ".timeindex").write_bytes(b"\xff" * 24)
    with Log.open(log_dir, small_config, clock) as log:
        assert _index_bytes(log_dir) == before
        assert state(log) == content


def test_index_pointing_past_the_log_is_rebuilt(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    content = build(log_dir, small_config, clock, clean=True)
    before = _index_bytes(log_dir)
    # a well-formed entry (relative offset 1, position 10**6) that cannot be right
    seg_path(log_dir, 0, ".index").write_bytes((1).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    with Log.open(log_dir, small_config, clock) as log:
        assert _index_bytes(log_dir) == before
        assert state(log) == content


def test_orphan_index_files_are_deleted(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    content = build(log_dir, small_config, clock, clean=True)
    for suffix in (".index", ".timeindex"):
        seg_path(log_dir, 5000, suffix).write_bytes(b"")
    with Log.open(log_dir, small_config, clock) as log:
        assert state(log) == content
    assert not seg_path(log_dir, 5000, ".index").exists()
    assert not seg_path(log_dir, 5000, ".timeindex").exists()


# ----------------------------------------------------------------- leftovers


def test_tmp_deleted_and_cleaned_leftovers_are_removed(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    content = build(log_dir, small_config, clock, clean=True)
    stray = [
        log_dir / "recovery-point-offset-checkpoint.tmp",
        seg_path(log_dir, 0, ".log.deleted"),
        seg_path(log_dir, 0, ".index.deleted"),
        seg_path(log_dir, 0, ".log.cleaned"),
        seg_path(log_dir, 0, ".timeindex.cleaned"),
        seg_path(log_dir, 24, ".log.swap"),  # above the lowest .cleaned: an unfinished S2
    ]
    for path in stray:
        path.write_bytes(b"junk")
    with Log.open(log_dir, small_config, clock) as log:
        assert state(log) == content
    assert not any(path.exists() for path in stray)


def test_swap_files_complete_the_replace(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    """State after replace step S4 crashed: new segment as .swap, some old ones already .deleted."""
    content = build(log_dir, small_config, clock, clean=True)
    bases = sorted(int(p.name[:20]) for p in log_dir.glob("*.log"))
    old = bases[:2]
    end = bases[2]
    keep = {o for o in range(end) if o % 2 == 0}
    new = LogSegment.create(log_dir, 0, config=small_config, file_suffix=files.SWAP_SUFFIX)
    for base in old:
        with LogSegment.open(log_dir, base, config=small_config) as segment:
            for position, header, data in segment.batches():
                kept = [
                    r
                    for r in decode_records(data, path=segment.log_path, position=position)
                    if r.offset in keep
                ]
                new.append(
                    encode_records(
                        kept,
                        base_offset=header.base_offset,
                        last_offset_delta=header.last_offset_delta,
                    ),
                    largest_offset=header.last_offset,
                    largest_timestamp_ms=header.max_timestamp,
                    offset_of_max_timestamp=header.last_offset,
                )
    new.flush()
    new.close()
    for suffix in (".log", ".index", ".timeindex"):  # the first old segment already renamed
        seg_path(log_dir, 0, suffix).rename(seg_path(log_dir, 0, suffix + ".deleted"))
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    with Log.open(log_dir, small_config, clock) as log:
        assert [s.base_offset for s in log.segments] == [0, *bases[2:]]
        assert state(log) == [r for r in content if r[0] >= end or r[0] in keep]
    names = {p.name for p in log_dir.iterdir()}
    assert files.segment_file_name(old[1], ".log") not in names
    assert not any(n.endswith((".swap", ".deleted")) for n in names)


@pytest.mark.parametrize("offset", [1, 5000])
def test_log_start_checkpoint_above_the_first_segment_is_refused(
    log_dir: Path, small_config: LogConfig, clock: FakeClock, offset: int
) -> None:
    """Kafka deletes every segment below it (its DeleteRecords moves the log start); ours
    only ever moves to a segment's base offset, so such a checkpoint is damage."""
    build(log_dir, small_config, clock, clean=True)
    write_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, "changelog", 0, offset)
    error = refused(log_dir, small_config, clock, CheckpointMismatchError)
    assert error.actual == offset  # type: ignore[attr-defined]


def test_recovery_point_above_the_log_end_is_refused(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    build(log_dir, small_config, clock, clean=False)
    write_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, "changelog", 0, 10_000)
    refused(log_dir, small_config, clock, LogInconsistencyError)


def test_a_missing_segment_is_refused(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    build(log_dir, small_config, clock, clean=True)
    bases = sorted(int(p.name[:20]) for p in log_dir.glob("*.log"))
    for suffix in (".log", ".index", ".timeindex"):
        seg_path(log_dir, bases[1], suffix).unlink()
    error = refused(log_dir, small_config, clock, LogInconsistencyError)
    assert error.path == seg_path(log_dir, bases[0])  # type: ignore[attr-defined]
    assert error.offset is not None and bases[1] <= error.offset < bases[2]  # type: ignore[attr-defined]
    assert error.expected == bases[2]  # type: ignore[attr-defined]


def test_a_closed_segment_cut_at_a_batch_boundary_is_refused(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    build(log_dir, small_config, clock, clean=True)
    victim = seg_path(log_dir, 0)
    with LogSegment.open(log_dir, 0, config=small_config) as segment:
        position, header = list(segment.headers())[-1]
    os.truncate(victim, position)
    error = refused(log_dir, small_config, clock, LogInconsistencyError)
    assert error.path == victim  # type: ignore[attr-defined]
    assert error.position == position  # type: ignore[attr-defined]
    assert error.offset == header.base_offset  # type: ignore[attr-defined]


def test_a_closed_segment_cut_mid_batch_is_refused(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    build(log_dir, small_config, clock, clean=True)
    victim = seg_path(log_dir, 0)
    os.truncate(victim, victim.stat().st_size - 7)
    error = refused(log_dir, small_config, clock, CorruptRecordError)
    assert error.path == victim  # type: ignore[attr-defined]


# ----------------------------------------------------------------- crash injection

Operation = Callable[[Log], object]


def _replace_first_two(log: Log) -> None:
    old = log.segments[:2]
    new = LogSegment.create(
        log.dir, old[0].base_offset, config=log.config, file_suffix=files.CLEANED_SUFFIX
    )
    for segment in old:
        for position, header, data in segment.batches():
            kept = [
                r
                for r in decode_records(data, path=segment.log_path, position=position)
                if r.offset % 2
            ]
            new.append(
                encode_records(
                    kept, base_offset=header.base_offset, last_offset_delta=header.last_offset_delta
                ),
                largest_offset=header.last_offset,
                largest_timestamp_ms=header.max_timestamp,
                offset_of_max_timestamp=header.last_offset,
            )
    log.replace_segments([new], old)


def _replace_first_and_third(log: Log) -> None:
    """One replace of two non-adjacent segments (the second stays): loader pass L4 per swap."""
    old = [log.segments[0], log.segments[2]]
    new = []
    for segment in old:
        cleaned = LogSegment.create(
            log.dir, segment.base_offset, config=log.config, file_suffix=files.CLEANED_SUFFIX
        )
        for position, header, data in segment.batches():
            kept = [
                r
                for r in decode_records(data, path=segment.log_path, position=position)
                if r.offset % 2
            ]
            cleaned.append(
                encode_records(
                    kept, base_offset=header.base_offset, last_offset_delta=header.last_offset_delta
                ),
                largest_offset=header.last_offset,
                largest_timestamp_ms=header.max_timestamp,
                offset_of_max_timestamp=header.last_offset,
            )
        new.append(cleaned)
    log.replace_segments(new, old)


def _append_rolling(log: Log) -> None:
    """One append too big for what is left of the active segment: roll, then append."""
    before = len(log.segments)
    log.append(records(500, 40))
    assert len(log.segments) == before + 1


OPERATIONS: dict[str, Operation] = {
    "append": lambda log: log.append(records(500, 4)),
    "append_with_roll": _append_rolling,
    "roll": lambda log: log.roll(),
    "replace_segments": _replace_first_two,
    "replace_non_adjacent_segments": _replace_first_and_third,
    "close": lambda log: log.close(),
    "truncate": lambda log: log.truncate_to(40),
}


def _runs(template: Path, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    for k in range(10_000):
        work = tmp_path / f"run{k}" / template.name
        shutil.copytree(template, work)
        yield k, work


@pytest.mark.parametrize(
    ("name", "delete_delay_ms"),
    [(name, 0) for name in sorted(OPERATIONS)]
    + [("replace_segments", 60_000), ("replace_non_adjacent_segments", 60_000)]
    + [("truncate", 60_000)],
)
def test_crash_after_every_step_leaves_before_or_after(
    tmp_path: Path, small_config: LogConfig, clock: FakeClock, name: str, delete_delay_ms: int
) -> None:
    """``files.inject_faults`` crashes after step k = 0, 1, 2, ... until the operation completes."""
    small_config = attrs.evolve(small_config, file_delete_delay_ms=delete_delay_ms)
    operation = OPERATIONS[name]
    template = tmp_path / "template" / "changelog-0"
    build(template, small_config, clock, clean=True)
    # the state after a successful run, from a copy
    reference = tmp_path / "reference" / "changelog-0"
    shutil.copytree(template, reference)
    with Log.open(reference, small_config, clock) as log:
        before = state(log)
        operation(log)
    with Log.open(reference, small_config, clock) as log:
        after = state(log)
    crashes = 0
    for k, work in _runs(template, tmp_path):
        log = Log.open(work, small_config, clock)
        seen = 0

        def hook(step: str, path: Path, k: int = k) -> None:
            nonlocal seen
            seen += 1
            if seen > k:
                raise files.SimulatedCrash(f"{step} {path.name}")

        try:
            with files.inject_faults(hook):
                operation(log)
        except files.SimulatedCrash:
            crashes += 1
            log.abandon()
        else:
            log.close()
            shutil.rmtree(work.parent)
            break
        with Log.open(work, small_config, clock) as reopened:
            got = state(reopened)
            if name == "truncate":  # not atomic across segments (as in Kafka): a prefix in between
                assert got == before[: len(got)] and len(got) >= len(after), f"crash at step {k}"
            else:
                assert got in (before, after), f"crash at step {k} of {name}"
            reopened.append(records(9000, 1))
            again = state(reopened)
        with Log.open(work, small_config, clock) as reopened:
            assert state(reopened) == again
        shutil.rmtree(work.parent)
    assert crashes > 0


# ----------------------------------------------------------------- a real kill -9

_WRITER = """
import sys
from changelog.config import LogConfig
from changelog.log.log import Log

log = Log.open(sys.argv[1], LogConfig(segment_bytes=4096, index_interval_bytes=256))
n = log.log_end_offset
while True:
    info = log.append([(b"k%d" % (n + i), b"v%d" % (n + i)) for i in range(5)])
    n = info.last_offset + 1
    print(info.last_offset, flush=True)  # acknowledged: fsynced before append returned
"""


def test_kill_9_loses_nothing_acknowledged(log_dir: Path) -> None:
    for _round in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(log_dir)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        acknowledged = -1
        for _ in range(200):
            acknowledged = int(child.stdout.readline())
        child.send_signal(signal.SIGKILL)
        child.wait()
        acknowledged = max([acknowledged, *(int(line) for line in child.stdout.read().split())])
        child.stdout.close()
        assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
        with Log.open(log_dir) as log:
            got = [(r.offset, r.key, r.value) for r in log.read()]
            assert log.log_end_offset > acknowledged
            assert len(log.segments) > 1
        assert got == [(n, b"k%d" % n, b"v%d" % n) for n in range(len(got))]  # a prefix, no holes
