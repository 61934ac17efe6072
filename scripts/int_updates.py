"""A counting processor's state access: ``store.put(k, store.get(k, 0) + 1)`` on int keys and values.

Usage: PYTHONPATH=. python scripts/int_updates.py [UPDATES]

One store with ``IntSerde`` keys and values, ``UPDATES`` updates (default 200,000) over
1,000 keys, no commit in the timed loop; best of 5, CPU time per update.  Run twice in the
same process, alternating: with the compiled ``IntSerde`` the builder grants the store's
compiled put and get (``statestore/stores/_put.c``), and with the serde's Python methods.
Prints both and the 1-minute load average.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

from statestore import StateManager, StateManagerConfig
from statestore.serdes import IntSerde
from statestore.stores import typed


def _updates(root: Path, name: str, updates: int) -> float:
    with StateManager(root / name, config=StateManagerConfig(run_cleaner=False)) as manager:
        store = manager.store("sums", key_type=int, value_serde=IntSerde())
        for key in range(1000):
            store.put(key, 0)
        store.commit()
        best = float("inf")
        for _ in range(5):
            started = time.process_time()
            for i in range(updates):
                key = i % 1000
                store.put(key, store.get(key, 0) + 1)
            best = min(best, (time.process_time() - started) / updates)
        store.commit()
    return best * 1e6


def main() -> None:
    updates = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    names = ("_INT64_ORDERED", "_INT64_FROM_ORDERED")
    compiled = [getattr(typed, name) for name in names]
    if None in compiled:
        sys.exit("the compiled IntSerde is not built (or STATESTORE_PURE=1)")
    results: dict[str, list[float]] = {"compiled": [], "python": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(2):
            for mode, values in results.items():
                for name, function in zip(names, compiled, strict=True):
                    setattr(typed, name, function if mode == "compiled" else None)
                values.append(_updates(Path(tmp), f"{mode}-{rep}", updates))
    for name, function in zip(names, compiled, strict=True):
        setattr(typed, name, function)
    for mode, values in results.items():
        print(
            f"{mode:9s} get+put {min(values):.3f} us/update ({', '.join(f'{v:.3f}' for v in values)})"
        )
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
