"""In-process crash machinery: crash after file-system step k, and abandon what was open.

:class:`StepRecorder` and :class:`CrashAt` are hooks for
:func:`changelog.fs.files.inject_faults`: the first lists every fault point an
operation passes (``(step, path)``), the second raises
:class:`~changelog.fs.files.SimulatedCrash` when the k-th one is reached (1-based),
that is *before* that mutation happens: crashing "at step k" leaves steps
``1..k-1`` done.

:func:`abandon_dir` is what the kernel does to a killed process's files: every
descriptor this process holds on a file under a directory is closed (and with
it the directory lock's ``flock``), and nothing is written.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from pathlib import Path

from changelog.fs.files import SimulatedCrash


class StepRecorder:
    """Records ``(step, path)`` of every fault point passed."""

    def __init__(self) -> None:
        """Start with no steps."""
        self.steps: list[tuple[str, Path]] = []

    def __call__(self, step: str, path: Path) -> None:
        """Record one step."""
        self.steps.append((step, Path(path)))


class CrashAt:
    """Raises :class:`SimulatedCrash` at the ``k``-th fault point (1-based); records the steps."""

    def __init__(self, k: int) -> None:
        """Crash at step ``k``."""
        self.k = k
        self.seen = 0
        self.crashed_at: tuple[str, Path] | None = None

    def __call__(self, step: str, path: Path) -> None:
        """Count the step; crash on the k-th."""
        self.seen += 1
        if self.seen == self.k:
            self.crashed_at = (step, Path(path))
            raise SimulatedCrash(f"crash before step {self.k}: {step} {path}")


def fds_under(directory: Path) -> list[int]:
    """The descriptors of this process open on ``directory`` or a file below it (``/proc/self/fd``)."""
    root = str(directory.resolve())
    found = []
    for link in Path("/proc/self/fd").iterdir():
        try:
            target = str(link.readlink())
        except OSError:
            continue
        if target == root or target.startswith(root + os.sep):
            found.append(int(link.name))
    return found


def abandon_dir(directory: Path) -> int:
    """Close (as a dying process would) every descriptor on ``directory`` or below; returns how many.

    Call it once nothing alive refers to the crashed objects (after the
    ``with`` block that crashed, or after ``Log.abandon()``): a garbage
    collection first lets dropped readers close their own descriptors, and what
    is left belongs to garbage that will never close it.
    """
    gc.collect()
    fds = fds_under(directory)
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    return len(fds)


@contextlib.contextmanager
def crashing_at(hook: CrashAt | StepRecorder) -> Iterator[None]:
    """Run the block under ``hook``; a :class:`SimulatedCrash` ends the block quietly."""
    from changelog.fs.files import inject_faults  # noqa: PLC0415 - keep imports beside their use

    with inject_faults(hook), contextlib.suppress(SimulatedCrash):
        yield
