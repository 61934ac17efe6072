"""get / get_many / range / prefix scans vs raw rocksdict (same options and cache), interleaved.

Usage: PYTHONPATH=. python scripts/get_ratio.py KEYS REPS [JSON_OUT]

One process: a store and a raw database of KEYS keys (written the suite's way, both closed and
reopened with statestore's options; the raw side keeps its 64 MiB block cache on reopen).  Each
repetition runs every case over all its work in chunks (10,000 gets, 100 scans), and each chunk
runs on both sides back to back, the side that goes first alternating from chunk to chunk, so a
change of the machine's load hits both sides of a chunk alike.  Prints, per case, the median over
the chunks of the wall and CPU ratios (statestore's throughput over raw's, >1: statestore
faster), the ratio of the total times, and the range of the 1-minute load average; the JSON
keeps every chunk.

Raw sides: ``db.get`` + ``msgpack.unpackb``; ``db.get(list of 1,000)`` + ``unpackb``;
``items(from_key=lo)`` with ``iterate_upper_bound`` over 2,000 scans of 100 keys (range) and over
2,000 prefixes of 100 keys each (prefix scan, bound = the prefix's upper bound), values unpacked.
statestore: ``store.get``, ``store.get_many``, ``store.range(lo, hi)``, ``store.prefix_scan(p)``.
"""

import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import baselines, store_bench
from benchmarks._harness import Stopwatch, make_keys, make_values, scratch_dir
from statestore.stores.bytes_store import prefix_upper_bound


def main(n: int, reps: int, out_path: str | None) -> None:
    keys, values = make_keys(n), make_values(n)
    lookups = make_keys(n, seed=99)
    sk = sorted(keys)
    rng = random.Random(5)
    bounds = [(sk[i], sk[i + 100]) for i in (rng.randrange(n - 100) for _ in range(2000))]
    prefixes = [b"user:%010d" % j for j in (rng.randrange(n // 100) for _ in range(2000))]
    prefix_bounds = [(p, prefix_upper_bound(p)) for p in prefixes]
    res: dict[str, list[dict[str, float]]] = {k: [] for k in ("get", "get_many", "range", "prefix")}
    with scratch_dir("getratio") as d:
        baselines.raw_put(d / "raw", keys, values, options=baselines.engine_options())
        with store_bench.open_manager(d / "ss") as mgr:
            store_bench.write_store(store_bench.open_store(mgr), keys, values, commit_every=1000)
        with store_bench.open_manager(d / "ss") as mgr:
            store = store_bench.open_store(mgr)
            db = baselines.raw_open(d / "raw", baselines.engine_options())
            # RocksDB compacts both databases in the background for a while after they are
            # built (at 1M keys: 6 L0 files each), and that CPU is charged to this process,
            # to whichever side happens to run: measure once both have settled.
            baselines.settle(db, baselines.store_db(store))

            def ss_get(ks: list[bytes]) -> None:
                g = store.get
                for k in ks:
                    if g(k) is None:
                        raise KeyError(k)

            def ss_get_many(ks: list[bytes]) -> None:
                gm = store.get_many
                for s in range(0, len(ks), 1000):
                    if None in gm(ks[s : s + 1000]):
                        raise KeyError(s)

            def ss_range(bs: list[tuple[bytes, bytes]]) -> None:
                scan = store.range
                for lo, hi in bs:
                    for _ in scan(lo, hi):
                        pass

            def ss_prefix(ps: list[bytes]) -> None:
                scan = store.prefix_scan
                for p in ps:
                    for _ in scan(p):
                        pass

            # (ours, raw, work items, items per chunk)
            cases: dict[str, tuple[Any, Any, list[Any], list[Any], int]] = {
                "get": (ss_get, baselines.raw_get, lookups, lookups, 10_000),
                "get_many": (ss_get_many, baselines.raw_multi_get, lookups, lookups, 10_000),
                "range": (ss_range, baselines.raw_range, bounds, bounds, 100),
                "prefix": (ss_prefix, baselines.raw_range, prefixes, prefix_bounds, 100),
            }
            flip = 0
            for _rep in range(reps):
                for name, (ours, raw, work, raw_work, chunk) in cases.items():
                    for s in range(0, len(work), chunk):
                        timings = {}
                        flip += 1
                        for side in ("ss", "raw") if flip % 2 else ("raw", "ss"):
                            if side == "ss":
                                sw = Stopwatch().start()
                                ours(work[s : s + chunk])
                                timings[side] = sw.stop()
                            else:
                                timings[side] = raw(db, raw_work[s : s + chunk])
                        ss, rw = timings["ss"], timings["raw"]
                        res[name].append(
                            {
                                "wall": rw.wall / ss.wall,
                                "cpu": rw.cpu / ss.cpu if ss.cpu > 0 and rw.cpu > 0 else 1.0,
                                "ss_wall_s": ss.wall,
                                "raw_wall_s": rw.wall,
                                "load": os.getloadavg()[0],
                            }
                        )
            db.close()
    out: dict[str, object] = {"keys": n, "reps": reps}
    for name, rows in res.items():
        out[name] = {
            "wall": statistics.median(r["wall"] for r in rows),
            "cpu": statistics.median(r["cpu"] for r in rows),
            "samples": rows,
        }
        out[name]["total_wall"] = sum(r["raw_wall_s"] for r in rows) / sum(  # type: ignore[index]
            r["ss_wall_s"] for r in rows
        )
        loads = [r["load"] for r in rows]
        print(
            f"{name:9s} median of {len(rows)} chunk ratios: wall {out[name]['wall']:.3f}x "  # type: ignore[index]
            f"cpu {out[name]['cpu']:.3f}x; total wall {out[name]['total_wall']:.3f}x; "  # type: ignore[index]
            f"load {min(loads):.1f}-{max(loads):.1f}"
        )
    out["load"] = os.getloadavg()
    print("load average", out["load"])
    if out_path:
        with Path(out_path).open("w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
