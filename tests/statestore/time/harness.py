"""Harness pieces the tests of stores in time share.

:func:`kill9_trials`:
a writer process killed with SIGKILL after some acknowledged commits, again and again.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statestore.config import StoreConfig
from statestore.manager import StateManager
from statestore.serdes import LongSerde


def kill9_trials(
    writer: str, tmp_path: Path, mode: str, acks: tuple[int, int], trials: int = 4
) -> Iterator[tuple[int, Path, list[int]]]:
    """``trials`` runs of :func:`kill9_writer` on one state directory (random: seeded by
    ``mode``): after each kill, the trial, the state directory and the acknowledged commits."""
    state_dir = tmp_path / "state"
    rng = random.Random(mode)
    for trial in range(trials):
        err_path = tmp_path / f"writer-{trial}.err"
        yield trial, state_dir, kill9_writer(writer, state_dir, mode, err_path, rng, acks)


def kill9_writer(
    writer: str,
    state_dir: Path,
    mode: str,
    err_path: Path,
    rng: random.Random,
    acks: tuple[int, int],
) -> list[int]:
    """Run the ``writer`` source on ``state_dir`` and ``mode``; SIGKILL it after a random
    number (within ``acks``) of the commit numbers it printed; every number it printed."""
    with err_path.open("w") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", writer, str(state_dir), mode],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        assert child.stdout is not None
        acked: list[int] = []
        for _ in range(rng.randint(*acks)):  # kill after a random number of acknowledgements
            line = child.stdout.readline()
            if not line:
                break
            acked.append(int(line))
        child.send_signal(signal.SIGKILL)
        # the rest through the same buffered reader (readline may have read ahead)
        acked += [int(line) for line in child.stdout.read().splitlines() if line.strip()]
        child.stdout.close()
        child.wait(timeout=120)
    assert acked, err_path.read_text()
    return acked


def open_window_store(manager: StateManager, config: StoreConfig) -> Any:
    """The kill -9 writers' window store ``win`` (10 ms windows, 2 s retention)."""
    return manager.window_store(
        "win",
        window_size_ms=10,
        retention_ms=2_000,
        segment_interval_ms=100,
        value_serde=LongSerde(),
        config=config,
    )
