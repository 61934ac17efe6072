"""Concurrency: one owner per directory, consistent readers during cleaner swaps, close during a pass.

- A second owner of a state directory (another process, or the same process)
  gets ``StateDirLockedError`` naming the lock file and the holder's pid; a
  second owner of a partition directory gets ``LogLockedError``.  A SIGKILLed
  owner leaves no stale lock.
- Readers iterating a log while a cleaner thread swaps segments and a writer
  appends: every full read is exactly the model at one commit boundary, and
  successive reads never go back.
- A store read while the manager's background cleaner compacts its changelog
  is exactly the model after every commit.
- Closing during a cleaning pass aborts it: ``close()`` returns promptly, no
  ``.cleaned``/``.swap`` file is left, and the reopened state is unchanged.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog import CleanerConfig, LogConfig
from changelog.cleaner.clean import clean_log
from changelog.cleaner.service import CleanerService
from changelog.errors import LogLockedError
from changelog.log.log import Log
from statestore.errors import StateDirLockedError
from statestore.manager import StateManager
from tests.reliability import stats
from tests.reliability.model import ModelCache, commit_ops, seq_of
from tests.reliability.writers import (
    PARTITION_DIR,
    hold_state_dir,
    manager_kwargs,
    new_harness,
    open_kv,
    read_log_state,
    read_store_state,
    store_writer,
    try_open_log,
    try_open_state_dir,
)

CLEANER = CleanerConfig(dedupe_buffer_size_bytes=1 << 20)
SEED = 31
SMALL: dict[str, Any] = {
    "segment_bytes": 2048,
    "index_interval_bytes": 256,
    "segment_index_bytes": 4096,
    "min_cleanable_dirty_ratio": 0.0,
    "delete_retention_ms": 0,
}
LEFTOVERS = (".cleaned", ".swap")
# throttled to 40 kB/s: a pass over ~100 kB of segments recopies for seconds, checking
# its abort flag between batches, so a close lands in the middle of it
SLOW_CLEANER = CleanerConfig(
    dedupe_buffer_size_bytes=1 << 20, io_max_bytes_per_second=40_000, backoff_ms=5
)


# ------------------------------------------------------------------------------ locks


def test_second_process_gets_a_typed_lock_error(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    with StateManager(state_dir) as manager:
        manager.store("held")
        run = new_harness(state_dir).run(try_open_state_dir)
    stats.record("concurrency.lock", trials=1, faults=1, wrong=int(run.result["error"] is None))
    assert run.result["error"] == "StateDirLockedError"
    assert run.result["path"] == str(state_dir / ".lock")
    assert run.result["holder"] == f"pid {os.getpid()}"


def test_second_owner_in_the_same_process_gets_a_typed_lock_error(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    with StateManager(state_dir):
        with pytest.raises(StateDirLockedError) as info:
            StateManager(state_dir)
        assert info.value.holder == f"pid {os.getpid()}"
    with StateManager(state_dir):  # released by the close
        pass
    stats.record("concurrency.lock", trials=1, faults=1)


def test_second_log_owner_gets_a_typed_lock_error(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    with Log.open(state_dir / PARTITION_DIR):
        with pytest.raises(LogLockedError):
            Log.open(state_dir / PARTITION_DIR)
        run = new_harness(state_dir).run(try_open_log)
    assert run.result["error"] == "LogLockedError"
    assert run.result["holder"] == f"pid {os.getpid()}"
    stats.record("concurrency.lock", trials=2, faults=2)


def test_a_killed_owner_leaves_no_stale_lock(tmp_path: Path) -> None:
    harness = new_harness(tmp_path / "state")
    holder = harness.run(hold_state_dir, kill_at_mark="locked")
    assert holder.killed
    run = harness.run(try_open_state_dir)
    assert run.result["error"] is None
    stats.record("concurrency.lock", trials=1, faults=1)


# ------------------------------------------------------------------------------ readers vs cleaner


def test_log_readers_see_whole_commits_while_the_cleaner_swaps(tmp_path: Path) -> None:
    cache = ModelCache(SEED)
    stop = threading.Event()
    errors: list[BaseException] = []
    passes = 0
    with Log.open(tmp_path / PARTITION_DIR, config=LogConfig(**SMALL)) as log:

        def write() -> None:
            try:
                for i in range(100_000):
                    if stop.is_set():
                        return
                    log.append(commit_ops(SEED, i))
            except BaseException as exc:  # noqa: BLE001 - surfaced in the main thread below
                errors.append(exc)

        def clean() -> None:
            nonlocal passes
            try:
                while not stop.is_set():
                    if clean_log(log, force=True, config=CLEANER) is not None:
                        passes += 1
            except BaseException as exc:  # noqa: BLE001 - surfaced in the main thread below
                errors.append(exc)

        threads = [threading.Thread(target=write), threading.Thread(target=clean)]
        for thread in threads:
            thread.start()
        reads = wrong = 0
        last_seq = -1
        deadline = time.monotonic() + 3.0
        try:
            while time.monotonic() < deadline or passes < 3:
                if time.monotonic() > deadline + 20:
                    break
                offsets = []
                state: dict[bytes, bytes] = {}
                for record in log.read(log.log_start_offset):
                    offsets.append(record.offset)
                    assert record.key is not None
                    if record.value is None:
                        state.pop(record.key, None)
                    else:
                        state[record.key] = record.value
                seq = seq_of(state)
                reads += 1
                ok = (
                    state == cache.after(seq)
                    and seq >= last_seq
                    and offsets == sorted(set(offsets))
                )
                wrong += int(not ok)
                assert ok, (
                    f"read {reads}: not the model after commit {seq} (previous read: {last_seq})"
                )
                last_seq = seq
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    stats.record("concurrency.read-during-swap", trials=reads, faults=passes, wrong=wrong)
    assert not errors, errors
    assert passes >= 3, "the cleaner never swapped while readers read"


def test_store_reads_are_exact_while_the_background_cleaner_runs(tmp_path: Path) -> None:
    cache = ModelCache(SEED)
    kwargs = manager_kwargs(SMALL, cleaner=True)
    wrong = 0
    with StateManager(tmp_path / "state", **kwargs) as manager:
        store = open_kv(manager, "full")
        cleaner = manager.cleaner
        assert cleaner is not None
        # At least 400 commits, and on until a pass has finished (a worker process takes a
        # while to start on a loaded machine), reading the whole store every 10 commits.
        deadline = time.monotonic() + 60
        i = -1
        while i < 399 or (not cleaner.history and time.monotonic() < deadline):
            i += 1
            with store.transaction():
                for key, value in commit_ops(SEED, i):
                    store.put(key, value)
            if i % 10 == 0:
                state = read_store_state(store)
                wrong += int(state != cache.after(i))
                assert state == cache.after(i)
        passes = len(cleaner.history)
    with StateManager(tmp_path / "state", **manager_kwargs(SMALL, cleaner=False)) as manager:
        restored = read_store_state(open_kv(manager, "full"))
    stats.record(
        "concurrency.store-read-during-clean",
        trials=1,
        faults=passes,
        wrong=wrong + int(restored != cache.after(i)),
    )
    assert restored == cache.after(i)
    assert passes > 0, "the background cleaner never ran"


# ------------------------------------------------------------------------------ close during a pass


def _wait_for_cleaned_files(partition: Path, timeout_s: float = 20.0) -> bool:
    """Poll until a pass has created its ``.cleaned`` files (it is then recopying)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.name.endswith(".cleaned") for p in partition.iterdir()):
            return True
        time.sleep(0.002)
    return False


def _segment_files(partition: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(partition.glob("*.log"))}


def _big_log(directory: Path, commits: int) -> dict[bytes, bytes]:
    with Log.open(directory, config=LogConfig(**SMALL)) as log:
        for i in range(commits):
            log.append(commit_ops(SEED, i))
        log.roll()
        return read_log_state(log)


def test_close_during_a_cleaner_service_pass_aborts_it_cleanly(tmp_path: Path) -> None:
    partition = tmp_path / PARTITION_DIR
    before = _big_log(partition, 300)
    segments_before = _segment_files(partition)
    log = Log.open(partition, config=LogConfig(**SMALL))
    service = CleanerService(lambda: [log], SLOW_CLEANER)
    service.start()
    in_pass = _wait_for_cleaned_files(partition)
    started = time.monotonic()
    service.close()
    log.close()
    took = time.monotonic() - started
    assert in_pass, "the cleaner never started a pass"
    leftovers = [p.name for p in partition.iterdir() if p.name.endswith(LEFTOVERS)]
    unchanged = _segment_files(partition) == segments_before
    with Log.open(partition, config=LogConfig(**SMALL)) as reopened:
        after = read_log_state(reopened)
    ok = not leftovers and after == before and unchanged
    stats.record("concurrency.close-during-clean", trials=1, faults=1, wrong=int(not ok))
    assert took < 5, f"close took {took:.1f}s"
    assert not leftovers, leftovers
    assert unchanged, "the pass was not aborted: it swapped segments in after close began"
    assert after == before


def test_manager_close_during_a_background_pass_aborts_it_cleanly(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    cache = ModelCache(SEED)
    with StateManager(state_dir, **manager_kwargs(SMALL, cleaner=False)) as manager:
        store = open_kv(manager, "full")
        for i in range(300):
            with store.transaction():
                for key, value in commit_ops(SEED, i):
                    store.put(key, value)
    partition = state_dir / "kv-changelog-0"
    segments_before = _segment_files(partition)
    kwargs = manager_kwargs(SMALL, cleaner=True)
    kwargs["config"] = attrs.evolve(kwargs["config"], cleaner=SLOW_CLEANER)
    manager = StateManager(state_dir, **kwargs)
    open_kv(manager, "full")
    in_pass = _wait_for_cleaned_files(partition)
    started = time.monotonic()
    manager.close()
    took = time.monotonic() - started
    assert in_pass, "the background cleaner never started a pass"
    leftovers = [p.name for p in partition.iterdir() if p.name.endswith(LEFTOVERS)]
    unchanged = _segment_files(partition) == segments_before
    with StateManager(state_dir, **manager_kwargs(SMALL, cleaner=False)) as manager:
        after = read_store_state(open_kv(manager, "full"))
    ok = not leftovers and after == cache.after(299) and unchanged
    stats.record("concurrency.close-during-clean", trials=1, faults=1, wrong=int(not ok))
    assert took < 5, f"close took {took:.1f}s"
    assert not leftovers, leftovers
    assert unchanged, "the pass was not aborted: it swapped segments in after close began"
    assert after == cache.after(299)


# ------------------------------------------------------------------------------ orphans


def _other_holders(directory: Path) -> set[int]:
    """Processes other than this one with a descriptor on ``directory`` or below."""
    root = str(directory.resolve())
    holders = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            links = list((proc / "fd").iterdir())
        except OSError:
            continue
        for link in links:
            try:
                target = str(link.readlink())
            except OSError:
                continue
            if target == root or target.startswith(root + os.sep):
                holders.add(int(proc.name))
                break
    return holders


def test_nothing_of_a_killed_service_keeps_working_in_its_state_dir(tmp_path: Path) -> None:
    """After ``kill -9`` of a service, no helper process of it (e.g. a cleaner worker) survives.

    An orphan that keeps writing ``.cleaned`` files into a directory that the
    restarted service owns races with that service's own cleaner.
    """
    settings = {**SMALL}
    orphans = 0
    trials = 6
    for trial in range(trials):
        harness = new_harness(tmp_path / f"s{trial}")
        harness.run(
            store_writer,
            kwargs={
                "seed": trial,
                "log_config": settings,
                "restore_mode": "full",
                "cleaner": True,
                "max_commits": 10**6,
                "mark_cleaning": True,
            },
            # half the kills as soon as a pass has .cleaned files, half at a moment
            kill_at_mark="cleaning" if trial % 2 else "writing",
            kill_delay_s=0.0 if trial % 2 else 0.6 + 0.2 * trial,
        )
        # The writer was reaped; a worker dies with it (PR_SET_PDEATHSIG), within the time
        # the kernel takes to deliver SIGKILL to a busy process on a loaded machine.
        deadline = time.monotonic() + 0.5
        holders = _other_holders(harness.state_dir)
        while holders and time.monotonic() < deadline:
            time.sleep(0.01)
            holders = _other_holders(harness.state_dir)
        orphans += bool(holders)
        for pid in holders:  # do not leave them running after the test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    stats.record("concurrency.orphans-after-kill9", trials=trials, faults=trials, wrong=orphans)
    assert orphans == 0, (
        f"{orphans} of {trials} killed services left a process working in the state dir"
    )
