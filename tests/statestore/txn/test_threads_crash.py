"""Many threads running scoped transactions, then a crash: every acknowledged block whole.

The workload (the same in-process and in the kill -9 child): thread ``t``
runs blocks ``n = start+1, start+2, ...``, each
``with manager.transaction(d<t>, p<t>[, manager.metadata]):`` writing
``k<n>-<j>`` = n (j < 3) into its data store ``d<t>``, ``n`` = n into its
position store ``p<t>`` and, every 4th block, ``pos-<t>`` = n into the
metadata store that all threads share (those blocks take turns on it).  A
block is acknowledged once its ``with`` statement returned.

After a crash and reopen, for every thread: the visible position ``v`` is the
last acknowledged block or the one in flight (acknowledged = 0 lost); the
data store holds exactly the keys of blocks ``1..v`` and the metadata store
the thread's last every-4th block ``<= v`` (nothing of a block beyond ``v``,
all of every block up to it = 0 partially visible); no changelog keeps an open
transaction.

* in-process (:func:`test_crash_of_16_threads_in_every_protocol_step`): at a
  random moment every thread's next step of the coordinator's protocol raises
  ``SimulatedCrash`` (the fault hook), so the threads die at different steps
  T1.1-T5 at once; then ``StateManager.crash`` and a fresh manager;
* real process (:func:`test_kill9_of_a_process_with_threads_in_transactions`):
  a child runs the workload on 8 threads; the parent sends SIGKILL at a random
  moment, reads the acknowledgements the child printed, reopens, checks.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from changelog.fs import files
from statestore.manager import StateManager
from tests.statestore.helpers import NO_CLEANER, kill9_and_drain

KEYS_PER_BLOCK = 3
SHARED_EVERY = 4


def run_block(manager: StateManager, t: int, n: int, pause_s: float = 0.0) -> None:
    """Block ``n`` of thread ``t``; ``pause_s`` between its writes (work, as an application does:
    other threads run meanwhile, so a commit that took another block's writes would show)."""
    data, position = manager.store(f"d{t}"), manager.store(f"p{t}")
    shared = n % SHARED_EVERY == 0
    stores = (data, position, manager.metadata) if shared else (data, position)
    with manager.transaction(*stores):
        for j in range(KEYS_PER_BLOCK):
            data[f"k{n}-{j}"] = n
            time.sleep(pause_s)
        position["n"] = n
        if shared:
            manager.metadata[f"pos-{t}"] = n


def check(state: Path, acked: dict[int, int], threads: int) -> dict[int, int]:
    """The reopened state holds every acknowledged block, each whole; returns the visible ones."""
    visible: dict[int, int] = {}
    with StateManager(state, config=NO_CLEANER) as manager:
        meta = dict(manager.metadata.items())
        for t in range(threads):
            data, position = manager.store(f"d{t}"), manager.store(f"p{t}")
            v = position.get("n", 0)
            last = acked.get(t, 0)
            assert v in (last, last + 1), f"thread {t}: visible {v}, acknowledged {last}"
            expected = {f"k{n}-{j}": n for n in range(1, v + 1) for j in range(KEYS_PER_BLOCK)}
            assert dict(data.items()) == expected, f"thread {t}: data not exactly blocks 1..{v}"
            shared = [n for n in range(1, v + 1) if n % SHARED_EVERY == 0]
            assert meta.get(f"pos-{t}") == (shared[-1] if shared else None), (t, v)
            visible[t] = v
            for log in (*data.changelogs, *position.changelogs):
                assert log.last_stable_offset == log.log_end_offset
        for log in manager.metadata.changelogs:
            assert log.last_stable_offset == log.log_end_offset
        assert set(meta) <= {f"pos-{t}" for t in range(threads)}
    return visible


# ------------------------------------------------------------------ in-process


def crash_round(state: Path, threads: int, start: dict[int, int], delay_s: float) -> dict[int, int]:
    """One run until the simulated crash; returns each thread's last acknowledged block."""
    acked = dict(start)
    dying = threading.Event()
    died: list[str] = []
    early: list[BaseException] = []
    lock = threading.Lock()
    manager = StateManager(state, config=NO_CLEANER)
    for t in range(threads):
        manager.store(f"d{t}")
        manager.store(f"p{t}")
    manager.metadata  # noqa: B018 - opened before the threads start

    def hook(step: str) -> None:
        if dying.is_set():
            with lock:
                died.append(step)
            raise files.SimulatedCrash(step)

    manager.coordinator.fault_hook = hook

    def work(t: int) -> None:
        n = start.get(t, 0)
        while True:
            n += 1
            try:
                run_block(manager, t, n, pause_s=0.0005)
            except BaseException as exc:  # noqa: BLE001 - the crash (or its aftermath) ends it
                if not dying.is_set():
                    early.append(exc)  # an error before the crash is a bug
                return
            acked[t] = n

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    time.sleep(delay_s)
    dying.set()
    for worker in workers:
        worker.join(60)
        assert not worker.is_alive()
    manager.crash()
    assert early == [], early
    print(f"crashed at steps {sorted(set(died))} ({len(died)} threads died in a step)")
    return acked


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_crash_of_16_threads_in_every_protocol_step(tmp_path: Path) -> None:
    state, threads = tmp_path / "state", 16
    rng = random.Random(1416)
    visible: dict[int, int] = {}
    total = 0
    for round_ in range(4):
        acked = crash_round(state, threads, visible, rng.uniform(0.2, 0.8))
        total += sum(acked.values()) - sum(visible.values())
        visible = check(state, acked, threads)
        print(f"round {round_}: visible {sorted(visible.values())}")
    assert total > threads  # the threads did commit between the crashes


# ------------------------------------------------------------------ kill -9

WRITER = r"""
import sys, threading
sys.path.insert(0, sys.argv[3])
from statestore.config import StateManagerConfig
from statestore.manager import StateManager
from tests.statestore.txn.test_threads_crash import run_block

state_dir, threads = sys.argv[1], int(sys.argv[2])
manager = StateManager(state_dir, config=StateManagerConfig(run_cleaner=True))
starts = {t: manager.store(f"p{t}").get("n", 0) for t in range(threads)}
for t in range(threads):
    manager.store(f"d{t}")
manager.metadata
out = threading.Lock()
ready = threading.Barrier(threads + 1)

def work(t):
    ready.wait()
    n = starts[t]
    while True:
        n += 1
        run_block(manager, t, n)
        with out:
            sys.stdout.write(f"{t} {n}\n")
            sys.stdout.flush()

for t in range(threads):
    threading.Thread(target=work, args=(t,), daemon=True).start()
ready.wait()
print("go", flush=True)
threading.Event().wait()
"""


def kill9_trials(tmp_path: Path, trials: int, threads: int, seed: int) -> int:
    state = tmp_path / "state"
    root = Path(__file__).resolve().parents[3]
    rng = random.Random(seed)
    visible: dict[int, int] = {}
    total = 0
    for trial in range(trials):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(state), str(threads), str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first.strip() == "go", child.stderr.read() if child.stderr else first
        time.sleep(rng.uniform(0.3, 1.2))
        out, err = kill9_and_drain(child)
        assert child.returncode == -signal.SIGKILL, err
        acked = dict(visible)
        for line in out.splitlines():
            t, n = map(int, line.split())
            assert n == acked.get(t, 0) + 1, (t, n, acked.get(t))
            acked[t] = n
        total += sum(acked.values()) - sum(visible.values())
        visible = check(state, acked, threads)
        print(f"trial {trial}: {total} acknowledged so far, visible {sorted(visible.values())}")
    return total


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_kill9_of_a_process_with_threads_in_transactions(tmp_path: Path) -> None:
    assert kill9_trials(tmp_path, trials=4, threads=8, seed=149) > 8


@pytest.mark.slow
def test_kill9_of_a_process_with_16_threads_soak(tmp_path: Path) -> None:
    assert kill9_trials(tmp_path, trials=20, threads=16, seed=1499) > 16
