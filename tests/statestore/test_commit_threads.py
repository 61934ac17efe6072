"""Threads committing through one manager: no acknowledged write is ever dropped.

The pattern the docs present (and the one issue 14 found losing writes): one
store per thread, each thread writing its own store and calling
``manager.commit()``, which commits *every* store, so a commit of one thread
runs while other threads buffer writes into the stores it commits.  A write
is acknowledged when a ``manager.commit()`` called after it returns.
"""

from __future__ import annotations

import threading
from pathlib import Path

from statestore.config import StateManagerConfig
from statestore.manager import StateManager

THREADS = 16
WRITES = 150


def test_sixteen_committing_threads_lose_no_acknowledged_write(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = StateManagerConfig(run_cleaner=False)
    acknowledged: list[set[str]] = [set() for _ in range(THREADS)]
    errors: list[BaseException] = []
    with StateManager(state, config=config) as manager:
        stores = [manager.store(f"s{n:02d}") for n in range(THREADS)]
        start = threading.Barrier(THREADS)

        def work(n: int) -> None:
            try:
                start.wait()
                store = stores[n]
                written: list[str] = []
                for i in range(WRITES):
                    key = f"k{i:04d}"
                    store[key] = i
                    written.append(key)
                    if i % 3 == 2:
                        manager.commit()
                        acknowledged[n].update(written)
                        written.clear()
                manager.commit()
                acknowledged[n].update(written)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        manager.crash()  # as kill -9: only what the changelogs hold comes back
    with StateManager(state, config=config) as again:
        lost = 0
        for n in range(THREADS):
            store = again.store(f"s{n:02d}")
            present = {key for key, _value in store.items()}
            lost += len(acknowledged[n] - present)
            assert {store[key] for key in acknowledged[n] & present} <= set(range(WRITES))
    assert sum(len(a) for a in acknowledged) == THREADS * WRITES
    assert lost == 0, f"{lost} of {THREADS * WRITES} acknowledged writes lost"
