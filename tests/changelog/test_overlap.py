"""A job beside an fsync (:mod:`changelog.overlap`, ``Log.append(beside=)``).

* :func:`run_beside` really runs the job while the wait is in progress (each
  side waits for the other: a sequential run would deadlock and time out),
  ends both before it returns or raises, and raises the wait's error first;
* past :data:`MAX_HELPERS` the job runs on the caller's thread, after the wait;
* a forked child starts helpers of its own;
* ``Log.append(beside=)``: with the fsync-per-append policy the job runs on a
  helper thread during the batch's fsync and has ended when the append
  returns; without it, on the caller's thread; an injected ENOSPC/EIO on the
  fsync raises the log's storage error after the job ran, and acknowledges
  nothing.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from changelog import AppendInfo, LogConfig, LogStorageError, overlap
from changelog.fs import files
from changelog.log import Log
from changelog.overlap import run_beside

TIMEOUT_S = 10.0


def test_the_job_runs_while_the_wait_is_in_progress() -> None:
    job_started = threading.Event()
    wait_started = threading.Event()
    seen: list[str] = []

    def job() -> None:
        seen.append(threading.current_thread().name)
        job_started.set()
        assert wait_started.wait(TIMEOUT_S), "the wait never started while the job ran"

    def wait() -> int:
        wait_started.set()
        assert job_started.wait(TIMEOUT_S), "the job never started while the wait ran"
        return 7

    assert run_beside(job, wait) == 7
    assert seen == ["changelog-beside"]


def test_both_have_ended_when_it_returns() -> None:
    ended: list[str] = []

    def job() -> None:
        threading.Event().wait(0.05)
        ended.append("job")

    def wait() -> None:
        ended.append("wait")

    run_beside(job, wait)
    assert sorted(ended) == ["job", "wait"]


def test_the_wait_error_wins_and_names_the_job_error() -> None:
    def job() -> None:
        raise ValueError("job failed")

    def wait() -> None:
        raise OSError(errno.EIO, "wait failed")

    with pytest.raises(OSError, match="wait failed") as info:
        run_beside(job, wait)
    assert any("job failed" in note for note in info.value.__notes__)


def test_a_job_error_is_raised_after_a_good_wait() -> None:
    waited: list[bool] = []

    def job() -> None:
        raise KeyError("job")

    with pytest.raises(KeyError, match="job"):
        run_beside(job, lambda: waited.append(True))
    assert waited == [True]


def test_a_base_exception_of_the_job_reaches_the_caller() -> None:
    def job() -> None:
        raise files.SimulatedCrash("in the job")

    with pytest.raises(files.SimulatedCrash):
        run_beside(job, lambda: None)


def test_past_the_helper_limit_the_job_runs_on_the_caller_after_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(overlap, "MAX_HELPERS", 0)
    monkeypatch.setattr(overlap, "_idle", [])
    order: list[tuple[str, str]] = []
    me = threading.current_thread().name

    def job() -> None:
        order.append(("job", threading.current_thread().name))

    def wait() -> None:
        order.append(("wait", threading.current_thread().name))

    run_beside(job, wait)
    assert order == [("wait", me), ("job", me)]


def test_helpers_are_reused() -> None:
    run_beside(lambda: None, lambda: None)
    before = overlap.helper_count()
    for _ in range(20):
        run_beside(lambda: None, lambda: None)
    assert overlap.helper_count() == before


def test_a_forked_child_starts_its_own_helpers() -> None:
    run_beside(lambda: None, lambda: None)  # the parent has an idle helper
    pid = os.fork()
    if pid == 0:  # the child: the parent's helper threads do not exist here
        code = 1
        try:
            ran: list[bool] = []
            run_beside(lambda: ran.append(True), lambda: None)
            code = 0 if ran == [True] else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# ------------------------------------------------------------------ Log.append(beside=)


def _config(*, fsync_every_append: bool) -> LogConfig:
    return LogConfig() if fsync_every_append else LogConfig(flush_messages=10**9)


def test_append_runs_beside_during_the_fsync(tmp_path: Path) -> None:
    in_fsync = threading.Event()
    job_done = threading.Event()
    calls: list[tuple[str, int]] = []

    def hook(step: str, _path: Path) -> None:
        if step == "segment.flush":  # on the appending thread, right before the fsync
            in_fsync.set()
            assert job_done.wait(TIMEOUT_S), "the job did not run during the fsync"

    def beside(info: AppendInfo) -> None:
        assert in_fsync.wait(TIMEOUT_S), "the job ran before the fsync started"
        calls.append((threading.current_thread().name, info.last_offset))
        job_done.set()

    with Log.open(tmp_path / "t-0", _config(fsync_every_append=True)) as log:
        with files.inject_faults(hook):
            info = log.append([(b"k", b"v"), (b"l", b"w")], beside=beside)
        assert info.flushed
        assert calls == [("changelog-beside", 1)]
        assert log.recovery_point >= 2


def test_append_without_an_fsync_runs_beside_on_the_caller(tmp_path: Path) -> None:
    calls: list[str] = []
    with Log.open(tmp_path / "t-0", _config(fsync_every_append=False)) as log:
        info = log.append(
            [(b"k", b"v")], beside=lambda _i: calls.append(threading.current_thread().name)
        )
        assert not info.flushed
    assert calls == [threading.current_thread().name]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_failed_fsync_raises_after_the_job_and_acknowledges_nothing(
    tmp_path: Path, code: int
) -> None:
    ran: list[int] = []

    def hook(step: str, _path: Path) -> None:
        if step == "segment.flush":
            raise OSError(code, "injected")

    log = Log.open(tmp_path / "t-0", _config(fsync_every_append=True))
    try:
        with files.inject_faults(hook), pytest.raises(LogStorageError):
            log.append([(b"k", b"v")], beside=lambda info: ran.append(info.last_offset))
        assert ran == [0]  # it ran, and ended before the error was raised
        assert log.recovery_point == 0  # nothing acknowledged as durable
    finally:
        log.close()
