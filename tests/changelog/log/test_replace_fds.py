"""A swap (S2-S6) that fails an I/O step fails the log and leaves no descriptor open.

A failed log is abandoned, and abandoning closes the segments of its list.
The segments a failed swap holds outside that list (new ones not yet swapped
in at S2, old ones taken out at S3 and not yet queued for deletion at S4)
used to keep their ``.log``, ``.index`` and ``.timeindex`` descriptors open for
the life of the process: ~300 in one run of
``tests/reliability/test_io_errors.py``, about 4,600 at soak size.  Here every
file-system step of one cleaning pass fails in turn (ENOSPC), and the
descriptors on the log's directory are counted in ``/proc/self/fd`` before the
open and after the failed log's close.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from changelog import CleanerConfig, LogConfig
from changelog.cleaner.clean import clean_log
from changelog.errors import ChangelogError
from changelog.fs import files
from changelog.log.log import Log
from tests.reliability.crash import fds_under

CONFIG = LogConfig(
    segment_bytes=600,
    index_interval_bytes=100,
    delete_retention_ms=0,
    min_cleanable_dirty_ratio=0.01,
    file_delete_delay_ms=0,
)
CLEANER = CleanerConfig(dedupe_buffer_size_bytes=1 << 20)
RECORDS = 24


def fill(directory: Path) -> None:
    """Several closed segments with overwritten keys: the pass rewrites and swaps them."""
    with Log.open(directory, config=CONFIG) as log:
        for i in range(RECORDS):
            log.append([(b"k%d" % (i % 7), b"v%03d" % i)])


def clean_failing_at(k: int | None, steps: list[str]) -> Callable[[str, Path], None]:
    """A fault hook: records every step; the ``k``-th (0-based) raises ENOSPC."""

    def hook(step: str, _path: Path) -> None:
        steps.append(step)
        if len(steps) - 1 == k:
            raise OSError(errno.ENOSPC, f"ENOSPC (injected at {step})")

    return hook


def test_every_failed_step_of_a_swap_closes_every_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        os, "fsync", lambda _fd: None
    )  # descriptors are the subject, not durability
    counted: list[str] = []
    fill(tmp_path / "count-0")
    with Log.open(tmp_path / "count-0", config=CONFIG) as log:
        with files.inject_faults(clean_failing_at(None, counted)):
            clean_log(log, force=True, config=CLEANER)
    swap_steps = [k for k, step in enumerate(counted) if step.startswith(("segment.", "replace."))]
    assert len(swap_steps) >= 10, counted
    failed_logs = 0
    for k in range(len(counted)):
        directory = tmp_path / f"k{k}" / "swap-0"
        fill(directory)
        before = set(fds_under(directory))
        log = Log.open(directory, config=CONFIG)
        try:
            with files.inject_faults(clean_failing_at(k, [])), contextlib.suppress(ChangelogError):
                clean_log(log, force=True, config=CLEANER)  # raises, or the pass went on
            failed_logs += log.failed is not None
        finally:
            log.close()  # a no-op for a failed log: it was abandoned
        leaked = set(fds_under(directory)) - before
        assert not leaked, f"a fault at step {k} ({counted[k]}) left {len(leaked)} descriptors open"
        with Log.open(directory, config=CONFIG) as reopened:  # and the log recovers
            assert reopened.log_end_offset == RECORDS
        assert not set(fds_under(directory)) - before
    assert failed_logs >= len(swap_steps) // 2
