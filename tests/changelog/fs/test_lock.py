"""DirectoryLock: one owner per directory, across threads, objects and processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from changelog.errors import LogLockedError
from changelog.fs.lock import LOCK_FILE_NAME, DirectoryLock


def _held(lock: DirectoryLock) -> bool:
    return lock.held  # a call, so that mypy does not narrow the property across release()


def test_acquire_writes_pid_and_release_unlocks(tmp_path: Path) -> None:
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert lock.held
    assert (tmp_path / LOCK_FILE_NAME).read_text().strip() == str(os.getpid())
    lock.release()
    assert not _held(lock)
    again = DirectoryLock(tmp_path)
    again.acquire()
    again.release()
    assert (tmp_path / LOCK_FILE_NAME).exists()  # never deleted


def test_second_owner_in_same_process_is_refused_with_path_and_pid(tmp_path: Path) -> None:
    with DirectoryLock(tmp_path):
        with pytest.raises(LogLockedError) as info:
            DirectoryLock(tmp_path).acquire()
        assert info.value.path == tmp_path / LOCK_FILE_NAME
        assert info.value.holder == f"pid {os.getpid()}"
        assert str(tmp_path) in str(info.value)


def test_second_owner_in_another_thread_is_refused(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def other() -> None:
        try:
            DirectoryLock(tmp_path).acquire()
        except LogLockedError as exc:
            errors.append(exc)

    with DirectoryLock(tmp_path):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert len(errors) == 1


def test_acquire_twice_on_same_object_is_a_noop(tmp_path: Path) -> None:
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    lock.acquire()
    lock.release()
    lock.release()
    assert not _held(lock)


_CHILD = """
import sys
from changelog.errors import LogLockedError
from changelog.fs.lock import DirectoryLock
try:
    DirectoryLock(sys.argv[1]).acquire()
except LogLockedError as exc:
    print("locked", exc.holder)
    sys.exit(3)
print("acquired")
"""


def test_second_owner_in_child_process_is_refused(tmp_path: Path) -> None:
    with DirectoryLock(tmp_path):
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(tmp_path)],
            capture_output=True,
            text=True,
            check=False,
        )
    assert child.returncode == 3, child.stderr
    assert child.stdout.strip() == f"locked pid {os.getpid()}"
    free = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert free.returncode == 0, free.stderr
    assert free.stdout.strip() == "acquired"


def test_lock_of_a_killed_holder_is_free(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom changelog.fs.lock import DirectoryLock\n"
            "DirectoryLock(sys.argv[1]).acquire()\nprint('ready', flush=True)\ntime.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(LogLockedError) as info:
            DirectoryLock(tmp_path).acquire()
        assert info.value.holder == f"pid {holder.pid}"
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    with DirectoryLock(tmp_path) as lock:
        assert lock.held
