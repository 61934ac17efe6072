"""Whether a full restore stays bounded by the live data while a store is written hard.

Usage::

    python -m benchmarks.restore_bound_bench [--quick] [--seconds S]

A store (:class:`statestore.StateManager` with its default settings: the background
cleaner in its worker processes) is written as fast as one thread can, in commits of
1,000 records of random keys (8-byte keys, 16-byte values), for ``S`` seconds, to two
key spaces: **few keys** (100) and **many keys** (50,000).  Every half second the
bench counts what a full restore would replay at that moment (the data records of
every batch from the log start: batch headers only, read beside the running store)
and the live records (distinct keys written so far).  The figures are the largest
``replayed / live`` over the run and the largest ``replayed - 2 x live`` (what a bound
of "2 x live plus a fixed allowance" needs as its allowance).

Two settings, each on the same workload in the same run:

* ``store defaults``: :data:`statestore.config.STORE_LOG_CONFIG` as it is now
  (``roll_dirty_ratio=0.25``: the active segment rolls once it passes a quarter of the
  rest, never below ``roll_dirty_min_bytes`` = 64 KiB; ``backpressure_dirty_ratio=1.0``:
  a commit waits while the dirty tail is larger than the cleaned part plus
  ``backpressure_min_bytes`` = 2 MiB and the cleaner can clean it);
* ``no backpressure``: the same with ``backpressure_dirty_ratio=0`` (the store defaults
  before backpressure): the writer never waits, and when it outruns the cleaner the
  dirty tail grows with the run.

Beside the bound it reports what backpressure costs the writer (records/s, commits that
waited and for how long) and what the cleaner did (passes, their median duration and the
records they read), from which the mechanism was chosen.

What it does not do: it does not restore (the count is what a full restore reads:
``read_committed`` data records from the log start; no transaction is open); one
writer thread; the machine is shared (record ``uptime`` beside the numbers).

Prints a table and ends with one JSON line (see :mod:`benchmarks._harness`).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path
from typing import Any

import attrs

from benchmarks._harness import Result, Target, emit_json, print_table, scratch_dir
from changelog import LogConfig
from changelog.log.log_dir import peek_batch_headers
from statestore import StateManager
from statestore.config import STORE_LOG_CONFIG

COMMIT_RECORDS = 1000
SAMPLE_S = 0.5
ALLOWANCE_RECORDS = 100_000
"""The fixed allowance the target grants (about 3 MiB of these records): the active segment,
rolled ones waiting for the cleaner, and what is written while a pass runs."""


def replayed_records(partition: Path) -> int:
    """Data records a full restore replays now (batch headers; control batches skipped)."""
    return sum(
        header.records_count
        for _path, _position, header in peek_batch_headers(partition)
        if not header.is_control
    )


def run(root: Path, config: LogConfig, *, keys: int, seconds: float, seed: int) -> dict[str, Any]:
    """Write for ``seconds``; sample replayed and live records; return the series and maxima."""
    rng = random.Random(seed)
    state = root / "state"
    key_space = [b"k%07d" % n for n in range(keys)]
    seen: set[bytes] = set()
    series: list[tuple[float, int, int]] = []
    written = 0
    waits, waited_s, durations, read = 0, 0.0, [], 0
    with StateManager(state, log_config=config) as manager:
        store = manager.store("s", key_type=bytes, value_type=bytes)
        partition = state / "s-changelog-0"
        started = time.monotonic()
        next_sample = started + SAMPLE_S
        while (now := time.monotonic()) - started < seconds:
            for key in rng.choices(key_space, k=COMMIT_RECORDS):
                store.put(key, os.urandom(16))
                seen.add(key)
            manager.commit()
            written += COMMIT_RECORDS
            if now >= next_sample:
                series.append((round(now - started, 2), replayed_records(partition), len(seen)))
                next_sample = now + SAMPLE_S
        series.append(
            (round(time.monotonic() - started, 2), replayed_records(partition), len(seen))
        )
        passes = len(manager.cleaner.history) if manager.cleaner is not None else 0
        if manager.cleaner is not None:
            waits, waited_s = manager.cleaner.pace_waits, manager.cleaner.pace_wait_s
            durations = sorted(stats.duration_s for stats in manager.cleaner.history)
            read = sum(stats.records_read for stats in manager.cleaner.history)
    worst_ratio = max(replayed / live for _t, replayed, live in series)
    worst_excess = max(replayed - 2 * live for _t, replayed, live in series)
    return {
        "written": written,
        "records_per_s": written / seconds,
        "cleaner_passes": passes,
        "pass_median_s": durations[len(durations) // 2] if durations else None,
        "pass_records_read": read,
        "commits": written // COMMIT_RECORDS,
        "commits_waited": waits,
        "seconds_waited": round(waited_s, 2),
        "max_replayed_over_live": worst_ratio,
        "max_replayed_minus_2x_live": worst_excess,
        "final": {"replayed": series[-1][1], "live": series[-1][2]},
        "series": series,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds of writes per case")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (3.0 if args.quick else 60.0)
    previous = attrs.evolve(STORE_LOG_CONFIG, backpressure_dirty_ratio=0.0)
    results: list[Result] = []
    extra: dict[str, Any] = {"seconds": seconds, "load_before": os.getloadavg()}
    for label, keys in (("few keys", 100), ("many keys", 50_000)):
        with scratch_dir("restore-bound") as root:
            ours = run(root / "ours", STORE_LOG_CONFIG, keys=keys, seconds=seconds, seed=keys)
        with scratch_dir("restore-bound") as root:
            old = run(root / "old", previous, keys=keys, seconds=seconds, seed=keys)
        extra[label] = {"store_defaults": ours, "no_backpressure": old}
        results.append(
            Result(
                name=f"max replayed / live, {label}",
                value=ours["max_replayed_over_live"],
                unit="x live",
                baseline_name="no backpressure",
                baseline_value=old["max_replayed_over_live"],
                note=(
                    f"{keys} keys, {seconds:.0f} s; {ours['cleaner_passes']} passes "
                    f"(no backpressure: {old['cleaner_passes']}); "
                    f"{ours['commits_waited']} of {ours['commits']} commits waited "
                    f"{ours['seconds_waited']:.1f} s in all"
                ),
                group="restore-bound",
            )
        )
        results.append(
            Result(
                name=f"max (replayed - 2 x live), {label}",
                value=float(ours["max_replayed_minus_2x_live"]),
                unit="records",
                baseline_name="no backpressure",
                baseline_value=float(old["max_replayed_minus_2x_live"]),
                target=Target("value<=", ALLOWANCE_RECORDS),
                group="restore-bound",
            )
        )
        results.append(
            Result(
                name=f"writer throughput, {label}",
                value=ours["records_per_s"],
                unit="records/s",
                baseline_name="no backpressure",
                baseline_value=old["records_per_s"],
                note="what backpressure costs the writer",
                group="restore-bound",
            )
        )
    extra["load_after"] = os.getloadavg()
    print_table(results, title="Restore bounded by live data (records a full restore replays)")
    emit_json("restore_bound_bench", results, extra=extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
