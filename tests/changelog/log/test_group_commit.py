"""Group commit (:mod:`changelog.log.group_commit`): shared fsyncs, and nobody acknowledged early.

Three levels:

* :class:`GroupCommit` alone, over a simulated log whose "fsync" sleeps (the
  leader/follower rules, the failure rules, exactly);
* real :class:`Log` appends from 16 threads (real fsync): fewer fsyncs than
  appends, every acknowledged append back after an in-process crash, and
  every power-loss image (:mod:`tests.reliability.power_loss`) taken after
  any recorded step holds every append acknowledged before that step;
* fault injection on the shared fsync (ENOSPC, EIO via the hook in
  :mod:`changelog.fs.files`): the leader gets the storage error, every
  waiter :class:`LogFailedError`, nobody is acknowledged by the failed fsync,
  and a reopen has every append acknowledged before it.

And :func:`sync_logs` over several logs: all durable, overlapped, errors after all finished.
"""

from __future__ import annotations

import errno
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from changelog import LogConfig, LogFailedError, LogStorageError
from changelog.errors import LogClosedError, OffsetOutOfRangeError
from changelog.fs import files
from changelog.log.group_commit import GroupCommit, sync_logs
from changelog.log.log import Log
from tests.reliability.power_loss import Recorder

THREADS = 16
APPENDS = 20


class _SimulatedLog:
    """Appends that take an offset, a flush that "fsyncs" what was appended when it started."""

    def __init__(self, flush_s: float = 0.002, fail_on: int | None = None) -> None:
        self.lock = threading.Lock()
        self.end = 0
        self.durable = 0
        self.flush_s = flush_s
        self.fail_on = fail_on
        self.flush_calls = 0
        self.covered: list[int] = []  # the end each completed flush captured at its start
        self.running = 0
        self.max_running = 0

    def append(self) -> int:
        with self.lock:
            self.end += 1
            return self.end

    def flush(self, _force: bool) -> None:
        with self.lock:
            self.flush_calls += 1
            call = self.flush_calls
            end = self.end
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            time.sleep(self.flush_s)
            if call == self.fail_on:
                raise LogStorageError(Path("sim.log"), "segment.flush", OSError(errno.EIO, "EIO"))
        finally:
            with self.lock:
                self.running -= 1
        with self.lock:
            self.covered.append(end)
            self.durable = max(self.durable, end)

    def check(self, offset: int) -> None:
        if offset > self.end:
            raise OffsetOutOfRangeError(offset, 0, self.end)

    def group(self) -> GroupCommit:
        return GroupCommit(
            durable_offset=lambda: self.durable, flush=self.flush, check=self.check, label="[sim] "
        )


def _run_threads(target: Callable[[int], None], n: int = THREADS) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def run(i: int) -> None:
        start.wait()
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - collected for the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


# ----------------------------------------------------------------------------- GroupCommit alone


def test_sixteen_threads_share_fsyncs_and_none_returns_before_its_offset_is_flushed() -> None:
    sim = _SimulatedLog()
    group = sim.group()
    early: list[tuple[int, int]] = []

    def work(_i: int) -> None:
        for _ in range(APPENDS):
            offset = sim.append()
            group.sync_to(offset)
            if sim.durable < offset:
                early.append((offset, sim.durable))

    assert _run_threads(work) == []
    assert early == []
    assert sim.max_running == 1  # one leader at a time
    assert group.flushes == sim.flush_calls
    assert sim.flush_calls < THREADS * APPENDS / 3, sim.flush_calls  # shared: ~1 per round
    assert group.followers + group.flushes >= THREADS * APPENDS
    assert sim.durable == sim.end


def test_without_sharing_every_caller_runs_its_own_fsync() -> None:
    sim = _SimulatedLog(flush_s=0.0005)
    group = sim.group()
    group.sharing = False

    def work(_i: int) -> None:
        for _ in range(5):
            group.sync_to(sim.append())

    assert _run_threads(work, 8) == []
    assert sim.flush_calls == group.flushes == 40
    assert sim.max_running == 1
    assert group.followers == 0


def test_an_offset_already_durable_returns_at_once_without_a_flush() -> None:
    sim = _SimulatedLog()
    group = sim.group()
    sim.append()
    assert group.sync_to(1) is True
    assert group.sync_to(1) is False
    assert group.sync_to(0) is False
    assert sim.flush_calls == 1
    with pytest.raises(OffsetOutOfRangeError):
        group.sync_to(5)


def test_a_failed_flush_fails_every_waiter_and_every_later_caller() -> None:
    sim = _SimulatedLog(flush_s=0.01, fail_on=3)
    group = sim.group()
    acknowledged: list[int] = []
    outcome: list[type[BaseException]] = []
    lock = threading.Lock()

    def work(_i: int) -> None:
        for _ in range(APPENDS):
            offset = sim.append()
            try:
                group.sync_to(offset)
            except (LogStorageError, LogFailedError) as exc:
                with lock:
                    outcome.append(type(exc))
                return
            with lock:
                acknowledged.append(offset)

    assert _run_threads(work) == []
    assert len(outcome) == THREADS  # every thread saw the failure, none went on
    assert outcome.count(LogStorageError) == 1  # the leader's own error
    assert outcome.count(LogFailedError) == THREADS - 1
    assert sim.flush_calls == 3  # nobody flushed after the failure
    assert sorted(acknowledged) == sorted(set(acknowledged))
    assert max(acknowledged) <= sim.durable  # only what the two good flushes covered
    assert isinstance(group.failure, LogStorageError)
    with pytest.raises(LogFailedError) as info:
        group.sync_to(1)  # even an offset that was durable: the group is failed
    assert isinstance(info.value.cause, LogStorageError)


# ----------------------------------------------------------------------------- real logs


def _key(thread: int, i: int) -> bytes:
    return b"t%02d-%04d" % (thread, i)


def _appending_threads(
    log: Log, acknowledged: list[set[bytes]], *, on_ack: Callable[[bytes], None] | None = None
) -> list[BaseException]:
    def work(n: int) -> None:
        for i in range(APPENDS):
            key = _key(n, i)
            log.append([(key, b"v" * 40)])
            acknowledged[n].add(key)
            if on_ack is not None:
                on_ack(key)

    return _run_threads(work)


def _keys_in(directory: Path, config: LogConfig | None = None) -> set[bytes]:
    with Log.open(directory, config) as log:
        return {record.key for record in log.read(log.log_start_offset) if record.key is not None}


def test_sixteen_appending_threads_share_fsyncs_and_lose_nothing_after_a_crash(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "gc-0"
    config = LogConfig(segment_bytes=4096)  # rolls while threads append
    acknowledged: list[set[bytes]] = [set() for _ in range(THREADS)]
    with Log.open(directory, config) as log:
        assert _appending_threads(log, acknowledged) == []
        group = log.group_commit
        assert log.recovery_point == log.log_end_offset == THREADS * APPENDS
        log.abandon()  # as kill -9: no close, no checkpoint
    assert group.flushes < THREADS * APPENDS, "no fsync was shared"
    present = _keys_in(directory, config)
    assert set().union(*acknowledged) <= present
    assert len(present) == THREADS * APPENDS


class _LockedRecorder:
    """A :class:`Recorder` whose wrapped ``os`` calls (and marks) are atomic between threads."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.lock = threading.RLock()

    def mark(self, name: str, detail: Any = None) -> None:
        with self.lock:
            self.recorder.mark(name, detail)

    @contextmanager
    def recording(self) -> Iterator[None]:
        import os  # noqa: PLC0415 - the module whose functions are wrapped

        names = ("open", "write", "lseek", "ftruncate", "fsync", "close", "replace", "rename")
        names += ("unlink", "mkdir")
        with self.recorder.recording():
            wrapped = {name: getattr(os, name) for name in names}

            def locked(function: Callable[..., Any]) -> Callable[..., Any]:
                def call(*args: Any, **kwargs: Any) -> Any:
                    with self.lock:
                        return function(*args, **kwargs)

                return call

            for name, function in wrapped.items():
                setattr(os, name, locked(function))
            try:
                yield
            finally:
                for name, function in wrapped.items():
                    setattr(os, name, function)


def test_every_power_loss_image_holds_every_append_acknowledged_before_the_cut(
    tmp_path: Path,
) -> None:
    """16 threads append through the group commit while every file operation is recorded;
    the strict image (only what was fsynced) after each step must hold every append
    acknowledged before that step.  ``fsync`` is the model's, so the threads interleave at
    the GIL's switch interval; the test checks the accounting, not the kernel."""
    root = tmp_path / "root"
    root.mkdir()
    directory = root / "state" / "gc-0"
    config = LogConfig(segment_bytes=2048)
    recorder = Recorder(root)
    locked = _LockedRecorder(recorder)
    acknowledged: list[set[bytes]] = [set() for _ in range(THREADS)]
    recorder.start()
    with locked.recording():
        log = Log.open(directory, config)
        errors = _appending_threads(log, acknowledged, on_ack=lambda key: locked.mark("ack", key))
        flushes = log.group_commit.flushes
        log.abandon()
    assert errors == []
    assert flushes < THREADS * APPENDS
    steps = recorder.steps
    rng = random.Random(7)
    points = sorted({steps, *rng.sample(range(1, steps), min(60, steps - 1))})
    checked = 0
    for step in points:
        acked = set(recorder.marks_before_crash(step))
        image = tmp_path / f"image-{step}"
        recorder.image(step, image)
        part = image / "state" / "gc-0"
        if not part.exists():
            assert not acked, f"step {step}: the partition directory is gone with acks"
            continue
        present = _keys_in(part, config)
        missing = acked - present
        assert not missing, f"step {step}: {len(missing)} acknowledged appends lost"
        checked += 1
    assert checked > len(points) // 2


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_failing_shared_fsync_acknowledges_nobody_and_fails_the_log(
    tmp_path: Path, code: int
) -> None:
    directory = tmp_path / "gc-0"
    acknowledged: list[set[bytes]] = [set() for _ in range(THREADS)]
    outcome: list[BaseException] = []
    flushes = 0
    failed_at: list[int] = []
    lock = threading.Lock()

    def hook(step: str, _path: Path) -> None:
        nonlocal flushes
        if step == "segment.flush":
            with lock:
                flushes += 1
                if flushes == 5:
                    time.sleep(0.01)  # let more threads queue behind the failing leader
                    failed_at.append(log.log_end_offset)
                    raise OSError(code, "injected")

    log = Log.open(directory)
    with files.inject_faults(hook):

        def work(n: int) -> None:
            for i in range(APPENDS):
                key = _key(n, i)
                try:
                    log.append([(key, b"v" * 40)])
                except LogClosedError as exc:  # LogFailedError, or closed by the failure
                    with lock:
                        outcome.append(exc)
                    return
                except LogStorageError as exc:
                    with lock:
                        outcome.append(exc)
                    return
                acknowledged[n].add(key)

        assert _run_threads(work) == []
    assert log.failed is not None
    assert len(outcome) == THREADS, "a thread went on appending after the log failed"
    assert sum(isinstance(exc, LogStorageError) for exc in outcome) == 1
    assert all(isinstance(exc, LogStorageError | LogFailedError) for exc in outcome), outcome
    with pytest.raises(LogFailedError):
        log.sync_to(1)
    present = _keys_in(directory)
    assert set().union(*acknowledged) <= present  # everything acknowledged before the failure


# ----------------------------------------------------------------------------- sync_logs


def test_sync_logs_makes_each_log_durable_with_the_fsyncs_overlapped(tmp_path: Path) -> None:
    logs = [Log.open(tmp_path / f"many-{p}") for p in range(6)]
    try:
        infos = [log.append([(b"k", b"v")], defer_flush=True) for log in logs]
        assert all(info.flush_due and not info.flushed for info in infos)
        assert all(log.recovery_point == 0 for log in logs)
        sync_logs([(log, info.last_offset + 1) for log, info in zip(logs, infos, strict=True)])
        assert all(log.recovery_point == log.log_end_offset == 1 for log in logs)
        assert all(log.group_commit.flushes == 1 for log in logs)
        sync_logs([(log, 1) for log in logs])  # already durable: no fsync
        assert all(log.group_commit.flushes == 1 for log in logs)
        sync_logs([])
    finally:
        for log in logs:
            log.close()


def test_sync_logs_raises_the_first_error_after_every_log_finished(tmp_path: Path) -> None:
    logs = [Log.open(tmp_path / f"many-{p}") for p in range(4)]
    bad = logs[2].dir

    def hook(step: str, path: Path) -> None:
        if step == "segment.flush" and path.parent == bad:
            raise OSError(errno.EIO, "injected")

    try:
        for log in logs:
            log.append([(b"k", b"v")], defer_flush=True)
        with files.inject_faults(hook), pytest.raises(LogStorageError):
            sync_logs([(log, 1) for log in logs])
        assert logs[2].failed is not None
        assert [log.recovery_point for log in logs] == [1, 1, 0, 1]
    finally:
        for log in logs:
            log.close()


def test_a_deferred_flush_is_done_by_the_next_append(tmp_path: Path) -> None:
    with Log.open(tmp_path / "defer-0") as log:
        info = log.append([(b"a", b"1")], defer_flush=True)
        assert info.flush_due and not info.flushed
        assert log.recovery_point == 0
        assert log.append([(b"b", b"2")]).flushed
        assert log.recovery_point == 2
        with pytest.raises(OffsetOutOfRangeError):
            log.sync_to(3)
