"""What the metrics cost: put+commit and get throughput with metrics on against off.

Cases (each against a same-run baseline with ``metrics_recording_level="OFF"``,
where the builder leaves the metered layer out entirely):

=============  ==========================================================================
row            what is measured
=============  ==========================================================================
put INFO       logged put of ~100-byte msgpack values, commit every 1,000, default fsync
               policy, metrics at the default ``INFO`` level (target >= 0.97x of OFF)
put DEBUG      the same at ``DEBUG`` (a Python call and a counter per put; info only)
get INFO       point get of a random key, value unpacked, at ``INFO`` (nothing per get)
get DEBUG      the same at ``DEBUG`` (a counter, two clock reads, a histogram observation)
=============  ==========================================================================

Method: real RocksDB, real files, real fsync, the GC on, keys in random order
(the store benchmark's keys and values).  The levels run interleaved within
each repetition and their order rotates from one repetition to the next, so
a change in the machine's load hits every level alike; medians are reported
with the CPU-time ratio beside the wall ratio (see docs/performance.md).

``python -m benchmarks.metrics_bench`` (full: 200,000 records, 9 repetitions,
~2 minutes) or ``--quick`` (seconds); the last line is the JSON result.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._harness import (
    Result,
    Target,
    Timing,
    emit_json,
    machine_info,
    make_keys,
    make_values,
    median,
    print_table,
    timed_both,
)

LEVELS = ("OFF", "INFO", "DEBUG")
COMMIT_EVERY = 1000


def _manager(state_dir: Path, level: str) -> Any:
    from statestore import StateManager, StateManagerConfig  # noqa: PLC0415 - after argv parsing

    config = StateManagerConfig(run_cleaner=False, metrics_recording_level=level)
    return StateManager(state_dir, config=config)


def put_run(root: Path, level: str, keys: Sequence[bytes], values: Sequence[Any]) -> Timing:
    """Put every key (commit every 1,000) into a fresh store; the timing of the writes."""
    out: list[Timing] = []
    with _manager(root / f"put-{level}", level) as manager:
        store = manager.store("bench", key_type=bytes)
        put = store.put
        commit = store.commit
        with timed_both(out):
            for start in range(0, len(keys), COMMIT_EVERY):
                for i in range(start, min(start + COMMIT_EVERY, len(keys))):
                    put(keys[i], values[i])
                commit()
        if level != "OFF":
            counted = manager.metrics()["stores"]["bench"][0]["records-committed-total"]
            assert counted == len(keys), (counted, len(keys))
        if level == "DEBUG":
            assert manager.metrics()["stores"]["bench"][0]["put-total"] == len(keys)
    return out[0]


def get_run(store: Any, lookups: Sequence[bytes]) -> Timing:
    """``store.get`` of every key in ``lookups``."""
    out: list[Timing] = []
    get = store.get
    with timed_both(out):
        for key in lookups:
            get(key)
    return out[0]


def _ratio_rows(
    name: str,
    unit: str,
    count: int,
    timings: dict[str, list[Timing]],
    *,
    target_level: str | None,
) -> list[Result]:
    rows = []
    base = timings["OFF"]
    for level in ("INFO", "DEBUG"):
        ours = timings[level]
        cpu = median([count / t.cpu for t in ours]) / median([count / t.cpu for t in base])
        rows.append(
            Result(
                name=f"{name}, metrics {level}",
                value=median([count / t.wall for t in ours]),
                unit=unit,
                baseline_name="metrics OFF",
                baseline_value=median([count / t.wall for t in base]),
                target=Target("ratio>=", 0.97) if level == target_level else None,
                samples=[count / t.wall for t in ours],
                baseline_samples=[count / t.wall for t in base],
                group="metrics",
                cpu_ratio=cpu,
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the metrics benchmark; print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes")
    parser.add_argument("--records", type=int, default=None, help="records per repetition")
    parser.add_argument("--reps", type=int, default=None, help="interleaved repetitions")
    args = parser.parse_args(argv)
    records = args.records or (20_000 if args.quick else 200_000)
    reps = args.reps or (3 if args.quick else 9)
    keys = make_keys(records)
    values = make_values(records)
    lookups = list(keys)
    random.Random(3).shuffle(lookups)

    puts: dict[str, list[Timing]] = {level: [] for level in LEVELS}
    gets: dict[str, list[Timing]] = {level: [] for level in LEVELS}
    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as tmp:
        root = Path(tmp)
        for rep in range(reps):
            order = LEVELS[rep % 3 :] + LEVELS[: rep % 3]
            for level in order:
                puts[level].append(put_run(root / str(rep), level, keys, values))
        # One store per level, loaded once; the gets interleave over the three.
        managers = {level: _manager(root / f"get-{level}", level) for level in LEVELS}
        try:
            stores = {}
            for level, manager in managers.items():
                store = manager.store("bench", key_type=bytes)
                for start in range(0, records, COMMIT_EVERY):
                    store.put_all(
                        list(
                            zip(
                                keys[start : start + COMMIT_EVERY],
                                values[start : start + COMMIT_EVERY],
                                strict=True,
                            )
                        )
                    )
                    store.commit()
                stores[level] = store
            for rep in range(reps):
                order = LEVELS[rep % 3 :] + LEVELS[: rep % 3]
                for level in order:
                    gets[level].append(get_run(stores[level], lookups))
        finally:
            for manager in managers.values():
                manager.close()

    rows = _ratio_rows("put, commit/1,000, fsync", "rec/s", records, puts, target_level="INFO")
    rows += _ratio_rows("get, random key", "get/s", records, gets, target_level=None)
    print_table(rows, title=f"=== metrics overhead ({records:,} records, {reps} reps)")
    emit_json(
        "metrics_bench",
        rows,
        extra={"records": records, "reps": reps, "machine": machine_info()},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
