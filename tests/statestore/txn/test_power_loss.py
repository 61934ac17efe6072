"""Power loss during transactions over several stores: every image is all-or-nothing per commit.

Every file operation of a workload (a manager committing transactions over two
stores, three partitions plus the metadata store) is recorded with POSIX's
durability rules (:mod:`tests.reliability.power_loss`); then, after each
recorded step, the image a power cut could leave there (strict: only what was
fsynced; and one random variant that keeps some un-fsynced changes) is opened
by a fresh manager.  Every commit acknowledged before the cut must be there,
each commit whole, nothing of a later one.  RocksDB's own files are written by
C++ and are not in the images: full restore rebuilds RocksDB at every open.
Without T2's fsync this test fails (a decided commit loses one partition's
data); it also found that a new state directory's entry in its parent was
never fsynced (a cut after the first acknowledged commit lost the directory).
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from statestore.manager import StateManager
from tests.reliability.power_loss import Recorder
from tests.statestore.helpers import NO_CLEANER

COMMITS = 4


class LockedRecorder:
    """The recorder with every wrapped ``os`` call made atomic (T2's fsyncs run on threads)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.lock = threading.RLock()

    def mark(self, name: str, detail: Any = None) -> None:
        with self.lock:
            self.recorder.mark(name, detail)

    @contextmanager
    def recording(self) -> Iterator[None]:
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


def write_commit(manager: StateManager, n: int) -> None:
    one, many = manager.store("one"), manager.store("many", partitions=2)
    one[f"c{n}"] = n
    for j in range(4):
        many[f"c{n}-{j}"] = n
    manager.metadata["position"] = n


def visible(state: Path) -> int:
    """Open the image; assert each commit whole; returns the last one visible."""
    with StateManager(state, config=NO_CLEANER) as manager:
        one, many = manager.store("one"), manager.store("many", partitions=2)
        m = manager.metadata.get("position", 0)
        for n in range(1, COMMITS + 1):
            parts = [one.get(f"c{n}") == n] + [many.get(f"c{n}-{j}") == n for j in range(4)]
            if n <= m:
                assert all(parts), (n, m, parts)
            else:
                assert not any(parts), (n, m, parts)
        return int(m)


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_every_power_loss_image_is_a_whole_commit_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    recorder = Recorder(root)
    locked = LockedRecorder(recorder)
    recorder.start()
    with locked.recording():
        manager = StateManager(root / "state", config=NO_CLEANER)
        for n in range(1, COMMITS + 1):
            write_commit(manager, n)
            manager.commit()
            locked.mark("ack", n)
        manager.crash()
    monkeypatch.setattr(os, "fsync", lambda _fd: None)  # images prove nothing by fsyncing
    rng = random.Random(14)
    checked = 0
    for step in range(recorder.steps + 1):
        acked = recorder.marks_before_crash(step)
        for variant in range(2):
            image = tmp_path / f"img{step}-{variant}"
            recorder.image(step, image, None if variant == 0 else rng)
            if not (image / "state").exists():
                assert not acked
                continue
            m = visible(image / "state")  # a half-created store is created anew (no refusal)
            assert m >= max(acked, default=0), (step, variant, m, acked)
            checked += 1
    print(f"{recorder.steps} steps, {checked} images opened, {COMMITS} commits")
    assert checked > recorder.steps
