"""ENOSPC and EIO at every file-system step: the log fails, nothing acknowledged is lost, reopen recovers.

A workload (appends that roll, explicit rolls, forced cleaning passes that swap
segments, retention of ``.deleted`` files, a truncation, close, then an open
that has to recover) runs once with a counting hook to learn its fault points
(every write, fsync, truncate, rename, delete and directory fsync of
:mod:`changelog.fs.files`).  Then, for every point ``k`` and every fault kind:

- ``ENOSPC`` / ``EIO``: the k-th step fails as the real call would;
- ``short-write``: at a write step, half of the data is written, then ENOSPC;

the workload runs again with the k-th step failing.  In the normal suite each
point gets one fault kind, round robin (so every kind lands on a third of the
points); the ``slow`` test gives every point every kind, over a longer
workload.  ``os.fsync`` is a no-op here (a few milliseconds each, hundreds of
runs): this test is about error paths; what fsync makes durable is the
power-loss test's subject (``test_power_loss.py``).  Checked:

- the failing call raises a typed ``ChangelogError`` (``LogStorageError``), never
  anything else;
- afterwards the log is failed (every call raises ``LogFailedError``), unless the
  failure hit the cleaner's own ``.cleaned`` files, in which case the log must
  still take appends;
- nothing acknowledged is lost: reopened without faults, the log is exactly the
  model after some commit ``j >= the last acknowledged``, and takes appends;
- no descriptor on the trial's directory is left open (``/proc/self/fd``).

Each trial goes to the ``io-error.<kind>`` lines of the reliability summary.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from changelog import CleanerConfig, LogConfig
from changelog.cleaner.clean import clean_log
from changelog.errors import ChangelogError, LogFailedError
from changelog.fs import files
from changelog.log.log import Log
from tests.reliability import stats
from tests.reliability.conftest import SOAK_SCALE
from tests.reliability.crash import fds_under
from tests.reliability.model import ModelCache, commit_ops, seq_of
from tests.reliability.writers import read_log_state

SEED = 31
CLEANER = CleanerConfig(dedupe_buffer_size_bytes=1 << 20)
CONFIG = LogConfig(
    segment_bytes=1500,
    index_interval_bytes=200,
    segment_index_bytes=4096,
    delete_retention_ms=0,
    min_cleanable_dirty_ratio=0.01,
    file_delete_delay_ms=0,
)
KINDS = ("ENOSPC", "EIO", "short-write")
POINT_PREFIX = "io-error-point."


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", lambda _fd: None)


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 7
        return self.now


@attrs.define
class Outcome:
    acked: int = -1
    error: BaseException | None = None
    in_cleaner: bool = False


def workload(directory: Path, outcome: Outcome, commits: int) -> None:
    """Commits with rolls, cleaning passes and a truncation; stops at the first error."""
    clock = _Clock()
    log = Log.open(directory, config=CONFIG, clock=clock)
    for i in range(commits):
        log.append(commit_ops(SEED, i))
        outcome.acked = i
        if i % 9 == 8:
            log.roll()
        if i % 12 == 11:
            outcome.in_cleaner = True
            try:
                clean_log(log, force=True, config=CLEANER)
            except ChangelogError:
                if log.failed is not None:
                    raise
                # the pass failed writing its own files: the log goes on (next append)
            outcome.in_cleaner = False
    log.close()
    # a second life: an unclean one (crash after a roll), then an open that recovers
    log = Log.open(directory, config=CONFIG, clock=clock)
    for i in range(commits, commits + 4):
        log.append(commit_ops(SEED, i))
        outcome.acked = i
    log.roll()
    log.abandon()
    log = Log.open(directory, config=CONFIG, clock=clock)
    log.append(commit_ops(SEED, commits + 4))
    outcome.acked = commits + 4
    log.close()


def count_steps(tmp_path: Path, commits: int) -> list[str]:
    steps: list[str] = []
    with files.inject_faults(lambda step, _path: steps.append(step)):
        workload(tmp_path / "count" / "io-0", Outcome(), commits)
    return steps


def failing_at(k: int, kind: str, steps: list[str]) -> Callable[[str, Path], None]:
    seen = 0

    def hook(step: str, _path: Path) -> None:
        nonlocal seen
        seen += 1
        if seen != k + 1:
            return
        if kind == "short-write":
            raise files.ShortWrite(errno.ENOSPC, "No space left on device (injected)")
        code = errno.ENOSPC if kind == "ENOSPC" else errno.EIO
        raise OSError(code, f"{errno.errorcode[code]} (injected at {steps[k]})")

    return hook


def run_trial(
    directory: Path, k: int, kind: str, steps: list[str], cache: ModelCache, commits: int
) -> str:
    outcome = Outcome()
    with files.inject_faults(failing_at(k, kind, steps)):
        try:
            workload(directory, outcome, commits)
        except ChangelogError as exc:
            outcome.error = exc
    if outcome.error is None:  # the failure hit a cleaning pass, and the log went on
        stats.note(f"io-error.{kind}", "cleaner_pass_failed_log_went_on")
    reopened = Log.open(directory, config=CONFIG)
    try:
        state = read_log_state(reopened)
        seq = seq_of(state)
        lost = max(0, outcome.acked - seq)
        wrong = int(state != cache.after(seq))
        stats.record(
            f"io-error.{kind}", trials=1, faults=1, acked=outcome.acked + 1, lost=lost, wrong=wrong
        )
        point = f"{POINT_PREFIX}{steps[k]}"  # per fault point, for the report
        stats.record(point, trials=1, faults=1, acked=outcome.acked + 1, lost=lost, wrong=wrong)
        stats.note(point, kind)
        assert lost == 0, f"fault at step {k} ({steps[k]}): acknowledged {outcome.acked}, got {seq}"
        assert wrong == 0, f"fault at step {k} ({steps[k]}): not the model after commit {seq}"
        reopened.append(commit_ops(SEED, seq + 1))
    finally:
        reopened.close()
    # The failed log was abandoned and the reopened one closed: nothing may keep a descriptor
    # (a failed swap used to leak its segments': tests/changelog/log/test_replace_fds.py).
    leaked = fds_under(directory)
    assert not leaked, f"fault at step {k} ({steps[k]}): {len(leaked)} descriptors left open"
    return "failed" if outcome.error is not None else "cleaner"


def run_all(tmp_path: Path, commits: int, *, every_kind: bool) -> None:
    steps = count_steps(tmp_path, commits)
    assert len(steps) > 100, steps
    cache = ModelCache(SEED)
    writes = {i for i, step in enumerate(steps) if "write" in step or "append" in step}
    trials = 0
    for k in range(len(steps)):
        possible = KINDS if k in writes else KINDS[:2]  # short writes need data to cut short
        kinds = possible if every_kind else (possible[k % len(possible)],)
        for kind in kinds:
            run_trial(tmp_path / f"t{k}-{kind}" / "io-0", k, kind, steps, cache, commits)
            trials += 1
    stats.note("io-error.ENOSPC", f"fault_points_{commits}_commits", len(steps))
    assert trials >= len(steps)


def test_every_step_fails_typed_and_loses_nothing(tmp_path: Path) -> None:
    run_all(tmp_path, 20, every_kind=False)


@pytest.mark.slow
def test_every_step_every_fault_kind(tmp_path: Path) -> None:
    run_all(tmp_path, 16 * SOAK_SCALE, every_kind=True)


def test_a_failed_log_refuses_every_call(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "io-0", config=CONFIG)
    log.append(commit_ops(SEED, 0))

    def hook(step: str, _path: Path) -> None:
        if step == "segment.flush":
            raise OSError(errno.EIO, "injected")

    with files.inject_faults(hook), pytest.raises(ChangelogError):
        log.append(commit_ops(SEED, 1))
    calls: list[Callable[[], object]] = [
        lambda: log.append(commit_ops(SEED, 1)),
        log.roll,
        log.flush,
        lambda: list(log.read(0)),
        lambda: log.truncate_to(0),
        log.delete_old_segments,
    ]
    for call in calls:
        with pytest.raises(LogFailedError):
            call()
    log.close()  # a no-op: the lock was released when the log failed
    with Log.open(tmp_path / "io-0", config=CONFIG) as reopened:
        assert seq_of(read_log_state(reopened)) in (0, 1)
