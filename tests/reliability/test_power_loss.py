"""Power loss: every disk image a power cut could leave opens, with no acknowledged commit lost.

The file operations of a workload are recorded with their durability
(:mod:`tests.reliability.power_loss`: POSIX rules, directory entries
included).  For a power cut right after every recorded step, images are
built: the *strict* one keeps only what was fsynced (a file never fsynced is
empty, an entry whose directory was never fsynced is gone, an unlink or a
rename not made durable is undone), and random ones keep each un-durable
change (directory entry, newer file content, a prefix of it) or not.  Each
image must open (0 unopenable images) and hold every commit acknowledged
before the cut, exactly the model after some commit ``j >= the last ack``.

Workloads: ``commit`` (appends that roll, a clean close, an open that deletes
the marker, a crash, an open that recovers, more commits), ``swap`` (forced
cleaning passes swapping segments in), ``interrupted-swap`` (a crash in the
middle of a swap, then the open whose loader completes it), ``retention`` (a delete-policy log
deleting its oldest segments; checked as a suffix of what was appended).
The state directory's parent is fresh: the partition directory itself is
created by the workload, so its own directory entry must be made durable.

Also a syscall-order check: the recorded steps of one commit, one roll and one
swap are what the protocols in ``docs/recovery.md`` promise.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog import CleanerConfig, LogConfig
from changelog.cleaner.clean import clean_log
from changelog.fs import files
from changelog.fs.checkpoint import CLEANER_SWAP_CHECKPOINT
from changelog.log.log import Log
from tests.reliability import stats
from tests.reliability.conftest import SOAK_SCALE
from tests.reliability.crash import abandon_dir
from tests.reliability.model import ModelCache, commit_ops, seq_of
from tests.reliability.power_loss import Recorder
from tests.reliability.writers import read_log_state

SEED = 41
CLEANER = CleanerConfig(dedupe_buffer_size_bytes=1 << 20)
COMPACT = LogConfig(
    segment_bytes=1200,
    index_interval_bytes=200,
    segment_index_bytes=4096,
    delete_retention_ms=0,
    min_cleanable_dirty_ratio=0.01,
    file_delete_delay_ms=0,
)
MERGING = attrs.evolve(COMPACT, segment_bytes=6000)
SMALL_EXTENTS = attrs.evolve(COMPACT, preallocate_extent_bytes=150)
"""The active segment grows its preallocated zeros several times per segment (each growth
write carries the batch and the zeros after it, so a cut can land in either)."""
NOT_PREALLOCATED = attrs.evolve(COMPACT, preallocate=False)
"""The ``.log`` ends at its last batch (Kafka's default; files a broker wrote)."""
RETENTION = LogConfig(
    segment_bytes=1000,
    index_interval_bytes=200,
    segment_index_bytes=4096,
    cleanup_policy="delete",
    retention_bytes=2500,
    file_delete_delay_ms=0,
)
RANDOM_IMAGES = {1: 1}
"""Random images per crash point besides the strict one, by scale (the ``slow`` run: 3)."""
PARTITION = "pl-0"


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 11
        return self.now


Workload = Callable[[Path, Recorder, int], None]


def commit_workload(root: Path, rec: Recorder, commits: int, config: LogConfig = COMPACT) -> None:
    clock = _Clock()
    directory = root / "state" / PARTITION
    log = Log.open(directory, config=config, clock=clock)
    i = 0
    for i in range(commits):
        log.append(commit_ops(SEED, i))
        rec.mark("ack", i)
    log.close()
    log = Log.open(directory, config=config, clock=clock)  # L10 deletes the marker
    for i in range(commits, commits + 4):
        log.append(commit_ops(SEED, i))
        rec.mark("ack", i)
    log.roll()
    log.append(commit_ops(SEED, commits + 4))
    rec.mark("ack", commits + 4)
    log.abandon()  # a crash (the active segment keeps its zeros): the next open recovers
    log = Log.open(directory, config=config, clock=clock)
    for i in range(commits + 5, commits + 8):
        log.append(commit_ops(SEED, i))
        rec.mark("ack", i)
    log.close()


def swap_workload(root: Path, rec: Recorder, commits: int) -> None:
    clock = _Clock()
    directory = root / "state" / PARTITION
    log = Log.open(directory, config=COMPACT, clock=clock)
    for i in range(commits):
        log.append(commit_ops(SEED, i))
        rec.mark("ack", i)
        if i % 8 == 7:
            log.roll()
            clean_log(log, force=True, config=CLEANER)
    log.close()


def interrupted_swap_workload(root: Path, rec: Recorder, commits: int) -> None:
    """A crash in the middle of a swap (after its first ``.deleted`` rename, S4), then the open
    whose loader finishes it (L2, L4, L5: each delete and rename made durable in order)."""
    clock = _Clock()
    directory = root / "state" / PARTITION
    log = Log.open(directory, config=MERGING, clock=clock)
    for i in range(commits):
        log.append(commit_ops(SEED, i))
        rec.mark("ack", i)
        if i % 2 == 1:
            log.roll()  # small segments: the cleaner merges several into one (L4's case)
    log.roll()
    renames = 0

    def crash_in_s4(step: str, path: Path) -> None:
        nonlocal renames
        if step == "segment.rename" and path.suffix in (".log", ".index", ".timeindex"):
            renames += 1  # S4: an old segment's ordinary file renamed to .deleted
            if renames == 4:
                raise files.SimulatedCrash(step)

    with files.inject_faults(crash_in_s4), contextlib.suppress(files.SimulatedCrash):
        clean_log(log, force=True, config=CLEANER)
    log.abandon()
    abandon_dir(directory)
    log = Log.open(directory, config=MERGING, clock=clock)
    log.append(commit_ops(SEED, commits))
    rec.mark("ack", commits)
    log.close()


def retention_workload(root: Path, rec: Recorder, commits: int) -> None:
    clock = _Clock()
    directory = root / "state" / PARTITION
    log = Log.open(directory, config=RETENTION, clock=clock)
    for i in range(commits):
        info = log.append(commit_ops(SEED, i))
        rec.mark("ack", (i, info.first_offset, info.last_offset))
        if i % 5 == 4:
            log.delete_old_segments()
    log.close()


def check_model(
    image: Path, acks: list[Any], cache: ModelCache, config: LogConfig
) -> tuple[int, int]:
    """``(lost, wrong)`` of an image of the compact workloads."""
    with Log.open(image / "state" / PARTITION, config=config) as log:
        state = read_log_state(log)
    seq = seq_of(state)
    last = max(acks, default=-1)
    return max(0, last - seq), int(state != cache.after(seq))


def check_suffix(
    image: Path, acks: list[Any], _cache: ModelCache, config: LogConfig
) -> tuple[int, int]:
    """Retention: every record read is the one appended at its offset; every acknowledged
    commit at or above the log start offset is there."""
    expected: dict[int, tuple[bytes, bytes | None]] = {}
    for i, first, _last in acks:
        for n, (key, value) in enumerate(commit_ops(SEED, i)):
            expected[first + n] = (key, value)
    with Log.open(image / "state" / PARTITION, config=config) as log:
        got = {r.offset: (r.key, r.value) for r in log.read(log.log_start_offset)}
        start = log.log_start_offset
    wrong = int(any(expected.get(o, v) != v for o, v in got.items()))
    lost = sum(1 for i, first, _ in acks if first >= start and first not in got)
    return lost, wrong


CASES: dict[str, tuple[Workload, LogConfig, Callable[..., tuple[int, int]], int]] = {
    "commit": (commit_workload, COMPACT, check_model, 10),
    "commit-small-extents": (
        functools.partial(commit_workload, config=SMALL_EXTENTS),
        SMALL_EXTENTS,
        check_model,
        10,
    ),
    "commit-not-preallocated": (
        functools.partial(commit_workload, config=NOT_PREALLOCATED),
        NOT_PREALLOCATED,
        check_model,
        10,
    ),
    "interrupted-swap": (interrupted_swap_workload, MERGING, check_model, 16),
    "swap": (swap_workload, COMPACT, check_model, 16),
    "retention": (retention_workload, RETENTION, check_suffix, 14),
}


@pytest.fixture(autouse=True)
def _no_fsync_while_checking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Images are opened hundreds of times; their fsyncs prove nothing (the recorder models
    durability) and cost milliseconds each."""
    monkeypatch.setattr(os, "fsync", lambda _fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda _fd: None)


def run_case(tmp_path: Path, name: str, scale: int) -> None:
    workload, config, check, commits = CASES[name]
    root = tmp_path / "root"
    root.mkdir()
    rec = Recorder(root)
    rec.start()
    with rec.recording():
        workload(root, rec, commits * scale)
    cache = ModelCache(SEED)
    rng = random.Random(name)
    images = unopenable = lost_total = wrong_total = 0
    failures: list[str] = []
    for step in range(rec.steps + 1):
        acks = rec.marks_before_crash(step)
        for variant in range(1 + RANDOM_IMAGES.get(scale, 3)):
            target = tmp_path / f"img{step}-{variant}"
            rec.image(step, target, None if variant == 0 else rng)
            images += 1
            if not (target / "state" / PARTITION).exists():
                # the partition directory's entry was not durable yet: nothing may be acked
                lost = len(acks)
                wrong = 0
            else:
                try:
                    lost, wrong = check(target, acks, cache, config)
                except Exception as exc:  # noqa: BLE001 - any failure to open is the finding
                    unopenable += 1
                    failures.append(f"step {step} variant {variant}: {type(exc).__name__}: {exc}")
                    continue
            lost_total += lost
            wrong_total += wrong
            if lost or wrong:
                failures.append(f"step {step} variant {variant}: lost={lost} wrong={wrong}")
    stats.record(
        f"power-loss.{name}",
        trials=images,
        faults=images,
        acked=len(rec.marks_before_crash(rec.steps)),
        lost=lost_total,
        wrong=wrong_total + unopenable,
    )
    stats.note(f"power-loss.{name}", "steps", rec.steps)
    stats.note(f"power-loss.{name}", "unopenable", unopenable)
    assert not failures, f"{len(failures)} bad image(s) of {images}: {failures[:5]}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_power_loss_image_opens_with_nothing_acknowledged_lost(
    tmp_path: Path, name: str
) -> None:
    run_case(tmp_path, name, 1)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_power_loss_images_bigger(tmp_path: Path, name: str) -> None:
    run_case(tmp_path, name, SOAK_SCALE)


# ----------------------------------------------------------------- syscall order


def _ops(rec: Recorder, start: int) -> list[str]:
    return [f"{e.op} {Path(e.path).name or '<root>'}" for e in rec.events[start:] if e.op != "mark"]


def test_syscall_order_of_commit_roll_swap_and_partition_creation(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    rec = Recorder(root)
    rec.start()
    with rec.recording():
        log = Log.open(root / "state" / PARTITION, config=COMPACT, clock=_Clock())
        created = _ops(rec, 0)
        mark = len(rec.events)
        log.append(commit_ops(SEED, 0))
        commit = _ops(rec, mark)
        mark = len(rec.events)
        log.roll()
        roll = _ops(rec, mark)
        for i in range(1, 12):
            log.append(commit_ops(SEED, i))
        log.roll()
        mark = len(rec.events)
        clean_log(log, force=True, config=CLEANER)
        swap = _ops(rec, mark)
        log.close()
    # the new directories: each mkdir, then an fsync of its parent, before anything inside
    assert created[:4] == ["mkdir state", "fsync <root>", "mkdir pl-0", "fsync state"], created
    # a commit: one write of the batch, then the fsync of that .log before append returns
    log_name = "00000000000000000000.log"
    assert commit[0] == f"write {log_name}" and f"fsync {log_name}" in commit, commit
    # a roll: old segment fsynced (R1), new files created, directory fsynced (R3), then R4
    first_create = next(i for i, op in enumerate(roll) if op.startswith("create"))
    assert f"fsync {log_name}" in roll[:first_create], roll
    dir_sync = roll.index(f"fsync {PARTITION}", first_create)
    checkpoint = next(i for i, op in enumerate(roll) if "recovery-point" in op)
    assert dir_sync < checkpoint, roll
    # a swap: every rename is followed by an fsync of the directory before the next step
    renames = [i for i, op in enumerate(swap) if op.startswith("rename")]
    assert renames, swap
    for i in renames:
        assert swap[i + 1] == f"fsync {PARTITION}", swap[i : i + 2]
    # S1b: the swap checkpoint is durable (renamed into place, directory fsynced) before the
    # first .cleaned -> .swap rename (S2), so every hole the swap leaves is explained first
    checkpoint = swap.index(f"rename {CLEANER_SWAP_CHECKPOINT}.tmp")
    first_s2 = next(i for i in renames if swap[i].endswith(".cleaned"))
    assert checkpoint < first_s2 and swap[checkpoint + 1] == f"fsync {PARTITION}", swap


# ----------------------------------------------------------------- store creation (issue 13, part 3)

STORE_PARENT = "apps/service-a"
"""The state directory's parent does not exist either: the manager creates both."""


def store_workload(root: Path, rec: Recorder, commits: int) -> None:
    """Manager open (state directory and its parent created), a new store (partition
    directory, metadata file), first commits, a clean close; then a reopen that switches
    the restore mode (metadata rewritten), more commits, a crash.

    RocksDB's own file operations are not seen by the recorder (they are not Python
    ``os`` calls): every image has no RocksDB at all, which each open must survive by
    replaying the changelog (RocksDB is a cache of it).
    """
    from statestore import StateManager, StateManagerConfig, StoreConfig  # noqa: PLC0415

    state = root / STORE_PARENT / "state"
    quiet = StateManagerConfig(run_cleaner=False, metrics_recording_level="OFF")
    clock = _Clock()
    incremental = StoreConfig(restore_mode="incremental")
    manager = StateManager(state, clock, config=quiet, log_config=COMPACT)
    store = manager.store("kv", key_type=bytes, value_type=bytes, config=incremental)
    for i in range(commits):
        for key, value in commit_ops(SEED, i):
            if value is None:
                store.delete(key)
            else:
                store.put(key, value)
        manager.commit()
        rec.mark("ack", i)
    manager.close()
    manager = StateManager(state, clock, config=quiet)  # log_config: the recorded one
    store = manager.store("kv", key_type=bytes, value_type=bytes)  # full: a mode switch
    for i in range(commits, commits + 3):
        for key, value in commit_ops(SEED, i):
            if value is None:
                store.delete(key)
            else:
                store.put(key, value)
        manager.commit()
        rec.mark("ack", i)
    manager.crash()


def check_store_image(image: Path, acks: list[Any], cache: ModelCache) -> tuple[int, int]:
    """``(lost, wrong)`` of one image: open it as the service would, read the store."""
    from statestore import StateManager, StateManagerConfig  # noqa: PLC0415

    state = image / STORE_PARENT / "state"
    last = max(acks, default=-1)
    if not state.exists():
        return last + 1, 0  # the state directory's entry was not durable: nothing may be acked
    quiet = StateManagerConfig(run_cleaner=False, metrics_recording_level="OFF")
    with StateManager(state, config=quiet) as manager:
        found = dict(manager.store("kv", key_type=bytes, value_type=bytes).items())
    seq = seq_of(found)
    return max(0, last - seq), int(found != cache.after(seq))


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_power_loss_images_of_store_creation_lose_no_acknowledged_commit(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    rec = Recorder(root)
    rec.start()
    with rec.recording():
        store_workload(root, rec, 6)
    cache = ModelCache(SEED)
    rng = random.Random("store")
    images = lost_total = wrong_total = unopenable = 0
    failures: list[str] = []
    for step in range(rec.steps + 1):
        acks = rec.marks_before_crash(step)
        for variant in range(2):
            target = tmp_path / f"img{step}-{variant}"
            rec.image(step, target, None if variant == 0 else rng)
            images += 1
            try:
                lost, wrong = check_store_image(target, acks, cache)
            except Exception as exc:  # noqa: BLE001 - any failure to open is the finding
                unopenable += 1
                failures.append(f"step {step} variant {variant}: {type(exc).__name__}: {exc}")
                continue
            lost_total += lost
            wrong_total += wrong
            if lost or wrong:
                failures.append(f"step {step} variant {variant}: lost={lost} wrong={wrong}")
    stats.record(
        "power-loss.store-creation",
        trials=images,
        faults=images,
        acked=len(rec.marks_before_crash(rec.steps)),
        lost=lost_total,
        wrong=wrong_total + unopenable,
    )
    stats.note("power-loss.store-creation", "steps", rec.steps)
    assert images > 100
    assert not failures, f"{len(failures)} bad image(s) of {images}: {failures[:5]}"


def test_syscall_order_of_manager_open_and_store_creation(tmp_path: Path) -> None:
    """Every new directory entry is fsynced in its parent before anything depends on it:
    the state directory's parent and the state directory (manager open), the partition
    directory (store creation), the metadata file (temp, fsync, rename, fsync)."""
    from statestore import StateManager, StateManagerConfig  # noqa: PLC0415

    root = tmp_path / "root"
    root.mkdir()
    rec = Recorder(root)
    rec.start()
    quiet = StateManagerConfig(run_cleaner=False, metrics_recording_level="OFF")
    with rec.recording():
        manager = StateManager(root / "apps" / "state", _Clock(), config=quiet, log_config=COMPACT)
        opened = _ops(rec, 0)
        mark = len(rec.events)
        store = manager.store("kv", key_type=bytes, value_type=bytes)
        created = _ops(rec, mark)
        mark = len(rec.events)
        store.put(b"k", b"v")
        manager.commit()
        commit = _ops(rec, mark)
        manager.close()
    assert opened[:4] == ["mkdir apps", "fsync <root>", "mkdir state", "fsync apps"], opened
    assert created[:2] == ["mkdir kv-changelog-0", "fsync state"], created
    meta = "kv.metadata.json"
    tail = [op for op in created if meta in op or op == "fsync state"]
    assert tail[-5:] == [
        f"create {meta}.tmp",
        f"write {meta}.tmp",
        f"fsync {meta}.tmp",
        f"rename {meta}.tmp",
        "fsync state",
    ], created
    log_name = "00000000000000000000.log"
    assert commit[0] == f"write {log_name}" and f"fsync {log_name}" in commit, commit
