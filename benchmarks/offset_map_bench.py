"""The cleaner's offset map alone: growth to millions of distinct keys, memory, lookups.

Usage::

    python -m benchmarks.offset_map_bench [--quick | --tiny] [--reps N]

For each size ``N`` (1M, 5M and 10M distinct keys; ``--quick``: 100k and 500k), a
fresh child process builds a map sized for ``N`` keys at the default load factor
(``memory_bytes = ceil(N / 0.9) * 16``), puts ``N`` distinct 16-byte keys in random
order in batches of 1,000 (offsets 0..N-1, as a log is read), then looks up 1M of
them in batches of 1,000.  Sizes are interleaved over ``--reps`` repetitions
(smallest to largest, then the other way round).  Reported per size: the build
rate (keys/s, wall and CPU), the lookup rate, and the budget per key
(``memory_bytes / N``, working space included).  A separate child fills a 4 MiB
map to capacity under tracemalloc: keys per 4 MiB, and the traced peak over the
rows per staged record (less the batch's own keys and hashes, measured alone first)
against :data:`~changelog.cleaner.offset_map.WORK_BYTES_PER_STAGED`.

Targets (issue 18): at most 16 bytes a slot (a 4 MiB buffer maps >= 235k keys), and
growth that stays fast: the build rate at the largest size at least 0.8x the rate
at the smallest (CPU time; the wall rate is printed beside it).

Prints a table and ends with one JSON line (see :mod:`benchmarks._harness`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks._harness import Result, Target, emit_json, machine_info, median, print_table

BATCH = 1000
LOOKUPS = 1_000_000


def child_build(n: int) -> dict[str, Any]:
    """Build a map of ``n`` distinct keys and look up to 1M of them (runs in a child)."""
    import numpy as np  # noqa: PLC0415 - only the child needs it

    from changelog.cleaner.offset_map import SLOT_BYTES, OffsetMap  # noqa: PLC0415

    order = np.random.default_rng(1).permutation(n).tolist()
    keys = [b"user:%011d" % i for i in order]
    memory = -(-n * 10 // 9) * SLOT_BYTES + 64 * SLOT_BYTES
    offset_map = OffsetMap(memory)
    started, cpu = time.perf_counter(), time.process_time()
    for first in range(0, n, BATCH):
        batch = keys[first : first + BATCH]
        if offset_map.put_batch(batch, range(first, first + len(batch))) != len(batch):
            raise AssertionError(f"the map filled at {first}")
    size = offset_map.size  # merges the last stage
    build_wall, build_cpu = time.perf_counter() - started, time.process_time() - cpu
    if size != n:
        raise AssertionError(f"{size} keys mapped, {n} put")
    looked = min(n, LOOKUPS)
    started = time.perf_counter()
    for first in range(0, looked, BATCH):
        offset_map.get_batch(keys[first : first + BATCH])
    lookup_wall = time.perf_counter() - started
    return {
        "n": n,
        "memory_bytes": memory,
        "slots": offset_map.slots,
        "capacity": offset_map.capacity,
        "stage_records": offset_map.stage_records,
        "build_wall_s": build_wall,
        "build_cpu_s": build_cpu,
        "lookups": looked,
        "lookup_wall_s": lookup_wall,
        "load": os.getloadavg()[0],
    }


def child_peak(memory: int) -> dict[str, Any]:
    """Fill a map of ``memory`` bytes to capacity under tracemalloc (runs in a child)."""
    import random  # noqa: PLC0415
    import tracemalloc  # noqa: PLC0415

    from changelog.cleaner.offset_map import OffsetMap, key_hashes  # noqa: PLC0415

    rng = random.Random(3)
    tracemalloc.start()  # first the batch alone: its keys, offsets and hashes
    keys = [b"user:%012d" % rng.randrange(10**12) for _ in range(BATCH)]
    hashes = key_hashes(keys)
    batch_peak = tracemalloc.get_traced_memory()[1]
    del keys, hashes
    tracemalloc.stop()
    tracemalloc.start()
    offset_map = OffsetMap(memory)
    offset = 10**9
    while True:
        keys = [b"user:%012d" % rng.randrange(10**12) for _ in range(BATCH)]
        got = offset_map.put_batch(keys, range(offset, offset + BATCH))
        offset += BATCH
        del keys
        if got < BATCH:
            break
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rows_bytes = 16 * offset_map.capacity
    return {
        "memory_bytes": memory,
        "capacity": offset_map.capacity,
        "size": offset_map.size,
        "stage_records": offset_map.stage_records,
        "traced_peak": peak,
        "batch_peak": batch_peak,
        "peak_over_rows": peak - rows_bytes,
    }


def _child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.offset_map_bench", "--child", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100k and 500k keys")
    parser.add_argument("--tiny", action="store_true", help="smoke sizes (seconds)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, value = args.child
        fn = child_build if kind == "build" else child_peak
        print(json.dumps(fn(int(value))))
        return 0

    from changelog.cleaner.offset_map import SLOT_BYTES, WORK_BYTES_PER_STAGED  # noqa: PLC0415

    if args.tiny:
        sizes, reps = [20_000, 60_000], 1
    elif args.quick:
        sizes, reps = [100_000, 500_000], args.reps
    else:
        sizes, reps = [1_000_000, 5_000_000, 10_000_000], args.reps
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    for rep in range(reps):
        for n in sizes if rep % 2 == 0 else sizes[::-1]:
            runs[n].append(_child("build", str(n)))
            print(f"  rep {rep}: {runs[n][-1]}", file=sys.stderr, flush=True)
    peak = _child("peak", str(4 * 1024 * 1024))

    def rate(n: int, field: str) -> float:
        return median([n / run[field] for run in runs[n]])

    def loads(n: int) -> str:
        return ", ".join(f"{run['load']:.1f}" for run in runs[n])

    results: list[Result] = []
    smallest, largest = sizes[0], sizes[-1]
    for n in sizes:
        first = runs[n][0]
        results.append(
            Result(
                name=f"offset map build, {n:,} keys (CPU)",
                value=rate(n, "build_cpu_s"),
                unit="keys/s",
                samples=[n / run["build_cpu_s"] for run in runs[n]],
                note=(
                    f"wall {rate(n, 'build_wall_s'):,.0f} keys/s; lookups "
                    f"{median([run['lookups'] / run['lookup_wall_s'] for run in runs[n]]):,.0f}/s; "
                    f"{first['memory_bytes'] / n:.2f} B/key budgeted ({SLOT_BYTES} B/slot); "
                    f"load {loads(n)}"
                ),
                group="offset map",
            )
        )
    results.append(
        Result(
            name=f"growth: build rate at {largest:,} / at {smallest:,} keys (CPU)",
            value=rate(largest, "build_cpu_s"),
            unit="keys/s",
            baseline_name=f"{smallest:,} keys",
            baseline_value=rate(smallest, "build_cpu_s"),
            target=Target("ratio>=", 0.8),
            note=(
                f"wall ratio {rate(largest, 'build_wall_s') / rate(smallest, 'build_wall_s'):.2f}"
            ),
            group="offset map",
        )
    )
    results.append(
        Result(
            name="keys mapped per 4 MiB (16 B/slot, load factor 0.9)",
            value=peak["capacity"],
            unit="keys",
            target=Target("value>=", 235_000),
            note=f"Kafka's 24-byte slots: {int(4 * 1024 * 1024 // 24 * 0.9):,}",
            group="offset map",
        )
    )
    results.append(
        Result(
            name="merge temporaries per staged record (traced, 4 MiB map filled)",
            value=(peak["peak_over_rows"] - peak["batch_peak"]) / peak["stage_records"],
            unit="B",
            target=Target("value<=", WORK_BYTES_PER_STAGED),
            note=(
                f"the batch's own {peak['batch_peak']:,} B left out; "
                f"stage {peak['stage_records']:,} records; "
                f"traced peak {peak['traced_peak']:,} B of {peak['memory_bytes']:,} B budgeted"
            ),
            group="offset map",
        )
    )
    print_table(results, title="offset map")
    emit_json(
        "offset_map",
        results,
        extra={"machine": machine_info(), "runs": runs, "peak": peak},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
