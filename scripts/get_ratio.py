"""get / get_many / range scans vs raw rocksdict (same options and cache), interleaved in one process.

Usage: PYTHONPATH=. python scripts/get_ratio.py KEYS REPS

Prints the median wall and CPU ratios (statestore's throughput over raw's) of each case,
every sample, and the load average.  Raw: ``db.get`` + ``unpackb``; ``db.get(list of
1,000)`` + ``unpackb``; ``items(from_key=lo)`` with ``iterate_upper_bound`` over 2,000
scans of 100 keys.
"""

import json
import os
import random
import statistics
import sys

from benchmarks import baselines, store_bench
from benchmarks._harness import Stopwatch, make_keys, make_values, scratch_dir

n, reps = int(sys.argv[1]), int(sys.argv[2])
keys, values = make_keys(n), make_values(n)
lookups = make_keys(n, seed=99)
sk = sorted(keys)
rng = random.Random(5)
bounds = [(sk[i], sk[i + 100]) for i in (rng.randrange(n - 100) for _ in range(2000))]
res = {k: [] for k in ("get", "get_many", "range")}
with scratch_dir("getratio") as d:
    baselines.raw_put(d / "raw", keys, values, options=baselines.engine_options())
    with store_bench.open_manager(d / "ss") as mgr:
        store_bench.write_store(store_bench.open_store(mgr), keys, values, commit_every=1000)
    with store_bench.open_manager(d / "ss") as mgr:
        store = store_bench.open_store(mgr)
        db = baselines.raw_open(d / "raw", baselines.engine_options())
        for _r in range(reps):
            sw = Stopwatch().start()
            g = store.get
            for k in lookups:
                g(k)
            ss = sw.stop()
            raw = baselines.raw_get(db, lookups)
            res["get"].append((raw.wall / ss.wall, raw.cpu / ss.cpu))
            sw = Stopwatch().start()
            gm = store.get_many
            for s in range(0, n, 1000):
                gm(lookups[s : s + 1000])
            ss = sw.stop()
            raw = baselines.raw_multi_get(db, lookups)
            res["get_many"].append((raw.wall / ss.wall, raw.cpu / ss.cpu))
            sw = Stopwatch().start()
            for lo, hi in bounds:
                for _ in store.range(lo, hi):
                    pass
            ss = sw.stop()
            raw = baselines.raw_range(db, bounds)
            res["range"].append((raw.wall / ss.wall, raw.cpu / ss.cpu))
        db.close()
out = {
    k: {
        "wall": statistics.median(x[0] for x in v),
        "cpu": statistics.median(x[1] for x in v),
        "samples": v,
    }
    for k, v in res.items()
}
out["load"] = os.getloadavg()
print(json.dumps(out))
