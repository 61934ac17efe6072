"""How compact a long-running store's changelog stays with the default settings.

Usage::

    python -m benchmarks.compactness_bench [--quick]

The question (issue 13): does a long-running store with few live keys restore
about its live data?  Workload: ``keys`` live keys, each updated ``updates``
times, in commits of 10 records (one batch each, as a store commits), spread
evenly over a simulated run of ``hours``; every simulated minute the cleaner's
own due logic runs (``clean_log`` without ``force``: dirty ratio, compaction
lags, as the background cleaner would decide).  The clock is injected, so a
day runs in seconds.  At the end we count what a full restore replays: every
record from the log start offset.  The figure is ``replayed records / live
keys`` (1.0 is a perfectly compacted log).

Two settings are compared, each on the same workload:

* ``store defaults``: :data:`statestore.config.STORE_LOG_CONFIG` (what a store
  gets when it passes no ``log_config``): 64 MiB segments, ``max_compaction_lag_ms``
  one hour, so the active segment rolls once its first record is an hour old.
* ``Kafka defaults``: ``LogConfig()`` (1 GiB segments, 7-day roll, no compaction
  lag): the active segment holds everything and nothing is ever cleaned.

What it does not do: it does not run the background service's threads or worker
processes (the passes run inline), and it uses tiny values (~40 bytes), so the
64 MiB size roll never fires; a busy store rolls by size long before an hour.

Prints a table and ends with one JSON line (see :mod:`benchmarks._harness`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks._harness import Result, Target, emit_json, print_table, scratch_dir
from changelog import Log, LogConfig, clean_log
from statestore.config import STORE_LOG_CONFIG

MINUTE_MS = 60_000
COMMIT_RECORDS = 10


def run(
    directory: Path, config: LogConfig, *, keys: int, updates: int, hours: float
) -> dict[str, float]:
    """Write the workload into a fresh log under ``config``; return what a restore replays."""
    total = keys * updates
    commits = total // COMMIT_RECORDS
    span_ms = int(hours * 3600 * 1000)
    step_ms = max(1, span_ms // commits)
    now = [1_700_000_000_000]
    passes = 0
    with Log.open(directory, config, clock=lambda: now[0]) as log:
        next_clean = now[0] + MINUTE_MS
        n = 0
        for _ in range(commits):
            batch = []
            for _ in range(COMMIT_RECORDS):
                key = f"user:{n % keys:05d}".encode()
                batch.append((key, f"value-{n}".encode()))
                n += 1
            log.append(batch)
            now[0] += step_ms
            if now[0] >= next_clean:
                if clean_log(log, now_ms=now[0]) is not None:
                    passes += 1
                next_clean = now[0] + MINUTE_MS
        replayed = sum(1 for _ in log.read(log.log_start_offset))
        segments = len(log.segments)
    return {"replayed": replayed, "passes": passes, "segments": segments, "written": total}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller run (smoke test)")
    args = parser.parse_args(argv)
    keys, updates = (20, 50) if args.quick else (50, 100)
    runs = (
        [(24.0, "1 day")] if args.quick else [(6.0, "6 hours"), (24.0, "1 day"), (168.0, "7 days")]
    )
    results: list[Result] = []
    extra: dict[str, object] = {"keys": keys, "updates_per_key": updates}
    with scratch_dir("compactness") as root:
        for hours, label in runs:
            ours = run(
                root / f"ours-{hours}" / "store-0",
                STORE_LOG_CONFIG,
                keys=keys,
                updates=updates,
                hours=hours,
            )
            kafka = run(
                root / f"kafka-{hours}" / "store-0",
                LogConfig(),
                keys=keys,
                updates=updates,
                hours=hours,
            )
            extra[label] = {"store_defaults": ours, "kafka_defaults": kafka}
            results.append(
                Result(
                    name=f"restore records / live keys, {label}",
                    value=ours["replayed"] / keys,
                    unit="x live",
                    baseline_name="Kafka's LogConfig() defaults",
                    baseline_value=kafka["replayed"] / keys,
                    target=Target("value<=", 5.0) if hours >= 24 else None,
                    note=(
                        f"{keys} keys x {updates} updates over {label}; store defaults: "
                        f"{ours['passes']:.0f} passes, {ours['segments']:.0f} segments; "
                        f"Kafka defaults: {kafka['passes']:.0f} passes"
                    ),
                    group="compactness",
                )
            )
    print_table(results, title="Changelog compactness of a long-running store (simulated clock)")
    emit_json("compactness_bench", results, extra=extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
