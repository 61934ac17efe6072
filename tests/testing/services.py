"""Service functions run in child processes by the harness tests (module level: picklable)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from statestore.testing import Reporter

JOURNAL = "journal.txt"


def journal_service(state_dir: Path, reporter: Reporter, n: int, pause_s: float = 0.0) -> int:
    """Append ``n`` lines to a journal, fsync each, and ack its number; returns ``n``."""
    fd = os.open(state_dir / JOURNAL, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for i in range(n):
            os.write(fd, f"{i}\n".encode())
            os.fsync(fd)
            reporter.ack(i)
            if pause_s:
                time.sleep(pause_s)
    finally:
        os.close(fd)
    return n


def marking_service(state_dir: Path, reporter: Reporter) -> None:
    """Mark ``"warm"`` after 3 acks, then ack forever."""
    i = 0
    while True:
        reporter.ack(i)
        i += 1
        if i == 3:
            reporter.mark("warm")
        time.sleep(0.001)


def failing_service(state_dir: Path, reporter: Reporter) -> None:
    """Ack twice, then raise."""
    reporter.ack(0)
    reporter.ack(1)
    raise ValueError("boom in the child")


def hanging_service(state_dir: Path, reporter: Reporter) -> None:
    """Never ack, never return."""
    while True:
        time.sleep(0.05)


def exiting_service(state_dir: Path, reporter: Reporter) -> None:
    """Ack once, then die without reporting (as a segfault would)."""
    reporter.ack("only")
    os._exit(3)


def journal_lines(state_dir: Path) -> list[int]:
    """The numbers durably in the journal."""
    path = state_dir / JOURNAL
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().splitlines()]


def counter_service(state_dir: Path, reporter: Reporter, n: int) -> None:
    """Commit ``a = i, b = -i`` atomically ``n`` times through a StateManager; ack each ``i``."""
    from statestore.manager import StateManager  # noqa: PLC0415 - children import what they use

    with StateManager(state_dir) as manager:
        store = manager.store("counters", value_type=int)
        start = store.get("a", -1)
        assert start is not None
        for i in range(start + 1, start + 1 + n):
            with store.transaction():
                store.put("a", i)
                store.put("b", -i)
            reporter.ack(i)


def restoring_service(state_dir: Path, reporter: Reporter) -> int | None:
    """Mark ``"restoring"``, open the counters store (restore runs), mark ``"restored"``."""
    from statestore.manager import StateManager  # noqa: PLC0415

    reporter.mark("restoring")
    with StateManager(state_dir) as manager:
        value = manager.store("counters", value_type=int).get("a")
        reporter.mark("restored")
        # Stay alive a while so that a kill aimed at the restore cannot miss the process
        # when the restore wins the race (the test asserts the kill, not where it landed).
        time.sleep(10)
        return value
