"""Full restore vs the raw floor (WriteBatch load + flush, same options), interleaved in one process.

Usage: PYTHONPATH=. python scripts/restore_ratio.py KEYS REPS
       PYTHONPATH=. python scripts/restore_ratio.py rss KEYS REPS   (peak RSS growth, fresh processes)

Writes a store of KEYS distinct 16-byte keys in random order (commit every 1,000), then per
repetition: a full restore (manager open + ``manager.store``: log load, replay, flush) and the
raw baseline over the very same pairs, alternating which goes first.  Prints wall and CPU
ratios per repetition and their medians, and the load average.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks import baselines, store_bench
from benchmarks._harness import make_keys, make_values, scratch_dir


def main(n: int, reps: int) -> None:
    keys, values = make_keys(n), make_values(n)
    pairs = store_bench.packed_pairs(keys, values)
    rows = []
    with scratch_dir("restore-ratio") as d:
        with store_bench.open_manager(d / "ss") as mgr:
            store_bench.write_store(store_bench.open_store(mgr), keys, values, commit_every=1000)
        for rep in range(reps):
            order = ("ss", "raw") if rep % 2 == 0 else ("raw", "ss")
            got = {}
            for side in order:
                if side == "ss":
                    got[side] = store_bench._timed_manager_open(d / "ss")
                else:
                    got[side] = baselines.raw_restore(
                        d / "raw",
                        pairs,
                        batch_records=10_000,
                        flush=True,
                        options=baselines.engine_options(),
                    )
                    shutil.rmtree(d / "raw")
            row = {
                "ss_wall": got["ss"].wall,
                "raw_wall": got["raw"].wall,
                "wall_ratio": got["raw"].wall / got["ss"].wall,
                "cpu_ratio": got["raw"].cpu / got["ss"].cpu,
                "load": os.getloadavg()[0],
            }
            rows.append(row)
            print(row, flush=True)
    summary = {
        "keys": n,
        "median_wall_ratio": statistics.median(r["wall_ratio"] for r in rows),
        "median_cpu_ratio": statistics.median(r["cpu_ratio"] for r in rows),
        "median_ss_wall": statistics.median(r["ss_wall"] for r in rows),
        "median_raw_wall": statistics.median(r["raw_wall"] for r in rows),
        "rows": rows,
    }
    print(json.dumps(summary))


def _status(name: str) -> int:
    with Path("/proc/self/status").open() as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    return 0


def rss_child(side: str, state_dir: str, n: int) -> None:
    """In a fresh process: reset VmHWM, restore (or raw-load), print the RSS growth.

    statestore's modules are imported before the measurement on both sides (they add
    ~38 MB of RSS, numpy included, which is the library's import, not the restore's).
    """
    store_bench._imports()
    if side == "raw":
        ks, vs = make_keys(n), make_values(n)
        prs = store_bench.packed_pairs(ks, vs)
        del ks, vs
    with Path("/proc/self/clear_refs").open("w") as f:
        f.write("5")
    before = _status("VmRSS")
    if side == "ss":
        store_bench._timed_manager_open(Path(state_dir))
    else:
        baselines.raw_restore(
            Path(state_dir) / "raw-rss",
            prs,
            batch_records=10_000,
            flush=True,
            options=baselines.engine_options(),
        )
        shutil.rmtree(Path(state_dir) / "raw-rss")
    print(json.dumps({"side": side, "before": before, "growth": _status("VmHWM") - before}))


def rss(n: int, reps: int) -> None:
    """Peak RSS growth of a full restore and of the raw load, each in fresh processes."""
    keys, values = make_keys(n), make_values(n)
    with scratch_dir("restore-rss") as d:
        with store_bench.open_manager(d / "ss") as mgr:
            store_bench.write_store(store_bench.open_store(mgr), keys, values, commit_every=1000)
        del keys, values
        out = []
        for _ in range(reps):
            for side in ("ss", "raw"):
                proc = subprocess.run(
                    [sys.executable, __file__, "rss-child", side, str(d / "ss"), str(n)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                out.append(row)
                print(row, flush=True)
    for side in ("ss", "raw"):
        growth = statistics.median(r["growth"] for r in out if r["side"] == side)
        print(f"{side}: median peak RSS growth {growth / 2**20:.1f} MiB")


if __name__ == "__main__":
    if sys.argv[1] == "rss-child":
        rss_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "rss":
        rss(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main(int(sys.argv[1]), int(sys.argv[2]))
