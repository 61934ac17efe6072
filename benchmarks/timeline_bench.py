"""Series for the performance page's pictures: log size over time with compaction, and restore
time against updates per key.

Usage::

    python -m benchmarks.timeline_bench [--quick] [--out PATH]

Two measurements, both on real files through a real :class:`~statestore.StateManager`:

* **size over time**: ``keys`` live keys updated in random order, commits of
  1,000 records into a changelog with 1 MiB segments; after every commit the
  cleaner's own due logic decides whether to clean (``clean_log`` without
  ``force``, as the background cleaner would, inline so the series is
  deterministic).  After every commit the partition's metrics are sampled from
  ``manager.metrics()`` (``Size``, ``NumLogSegments``, ``dirty-ratio``,
  ``LogEndOffset``), so the pictures show what a dashboard would.  The same
  workload runs once more with the cleaner off, for comparison.
* **restore time against updates per key**: for each count of updates per
  key, write ``restore_keys`` keys that many times, compact fully (roll, then
  clean until nothing is due), close, and time a full restore (open +
  ``manager.store``), median of 3.  Without compaction the replay would grow
  with the updates; with it, it should stay near the one-update time.

Prints a table and ends with one JSON line (``series`` holds the points);
``--out`` also writes that JSON to a file (``python -m benchmarks.plots`` reads it).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._harness import Result, emit_json, machine_info, print_table, scratch_dir

SEGMENT_BYTES = 1024 * 1024
COMMIT_RECORDS = 1000


def _log_config() -> Any:
    from changelog import LogConfig  # noqa: PLC0415

    return LogConfig(segment_bytes=SEGMENT_BYTES, delete_retention_ms=0)


def _manager(state_dir: Path) -> Any:
    from statestore import StateManager, StateManagerConfig  # noqa: PLC0415

    return StateManager(
        state_dir, config=StateManagerConfig(run_cleaner=False), log_config=_log_config()
    )


def size_over_time(
    root: Path, keys: int, updates: int, *, clean: bool
) -> tuple[list[dict[str, Any]], int]:
    """One point per commit (updates written so far, the partition's metrics), and the size
    of the log once rolled and fully compacted at the end (the floor any cleaner can reach)."""
    from changelog.cleaner.clean import clean_log  # noqa: PLC0415

    rng = random.Random(11)
    order = [i % keys for i in range(keys * updates)]
    rng.shuffle(order)
    value = b"v" * 100
    points: list[dict[str, Any]] = []
    with _manager(root / ("clean" if clean else "raw")) as manager:
        store = manager.store("timeline", key_type=bytes, value_type=bytes)
        log = store.changelog
        for start in range(0, len(order), COMMIT_RECORDS):
            for i in order[start : start + COMMIT_RECORDS]:
                store.put(b"key-%08d" % i, value)
            store.commit()
            passes = 0
            while clean and clean_log(log) is not None:
                passes += 1
            m = manager.metrics()["stores"]["timeline"][0]
            points.append(
                {
                    "records_written": start + COMMIT_RECORDS,
                    "size_bytes": m["Size"],
                    "segments": m["NumLogSegments"],
                    "dirty_ratio": m["dirty-ratio"],
                    "log_end_offset": m["LogEndOffset"],
                    "passes": passes,
                }
            )
        log.roll()
        while clean_log(log, force=True) is not None:
            pass
        compacted = log.size_bytes
    return points, compacted


def restore_time(root: Path, keys: int, updates_per_key: int, reps: int) -> dict[str, Any]:
    """Median seconds of a full restore of ``keys`` keys written ``updates_per_key`` times, compacted."""
    from changelog.cleaner.clean import clean_log  # noqa: PLC0415

    state = root / f"restore-{updates_per_key}"
    rng = random.Random(5)
    value = b"v" * 100
    with _manager(state) as manager:
        store = manager.store("restore", key_type=bytes, value_type=bytes)
        for _round in range(updates_per_key):
            order = list(range(keys))
            rng.shuffle(order)
            for start in range(0, keys, COMMIT_RECORDS):
                for i in order[start : start + COMMIT_RECORDS]:
                    store.put(b"key-%08d" % i, value)
                store.commit()
        written = store.changelog.log_end_offset
        store.changelog.roll()
        while clean_log(store.changelog, force=True) is not None:
            pass
        size = store.changelog.size_bytes
    seconds = []
    replayed = 0
    for _ in range(reps):
        started = time.perf_counter()
        with _manager(state) as manager:
            manager.store("restore", key_type=bytes, value_type=bytes)
            seconds.append(time.perf_counter() - started)
            replayed = manager.restore_results("restore")[0].records_restored
    return {
        "updates_per_key": updates_per_key,
        "records_written": written,
        "records_replayed": replayed,
        "log_bytes": size,
        "seconds": statistics.median(seconds),
        "samples": seconds,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run both series; print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes")
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    args = parser.parse_args(argv)
    keys, updates = (2_000, 10) if args.quick else (20_000, 15)
    restore_keys = 2_000 if args.quick else 50_000
    counts = (1, 2, 5) if args.quick else (1, 2, 5, 10, 20)
    reps = 1 if args.quick else 3
    with scratch_dir("timeline") as root:
        cleaned, compacted = size_over_time(root, keys, updates, clean=True)
        uncleaned, _ = size_over_time(root, keys, updates, clean=False)
        restores = [restore_time(root, restore_keys, n, reps) for n in counts]
    results = [
        Result(
            name=f"log size after {keys * updates:,} updates of {keys:,} keys, cleaner on",
            value=cleaned[-1]["size_bytes"] / 2**20,
            unit="MiB",
            baseline_name="cleaner off",
            baseline_value=uncleaned[-1]["size_bytes"] / 2**20,
            group="timeline",
        )
    ]
    base = restores[0]["seconds"]
    results += [
        Result(
            name=f"full restore, {r['updates_per_key']} updates/key compacted ({restore_keys:,} keys)",
            value=r["seconds"],
            unit="s",
            baseline_name="1 update/key",
            baseline_value=base,
            samples=r["samples"],
            group="timeline",
        )
        for r in restores[1:]
    ]
    print_table(results, title="=== timeline series")
    series = {
        "size_over_time": {
            "keys": keys,
            "cleaned": cleaned,
            "uncleaned": uncleaned,
            "fully_compacted_bytes": compacted,
        },
        "restore_vs_updates": {"keys": restore_keys, "points": restores},
        "segment_bytes": SEGMENT_BYTES,
    }
    line = emit_json("timeline_bench", results, extra={"series": series, "machine": machine_info()})
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(json.loads(line), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
