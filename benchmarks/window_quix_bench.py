"""Windowed aggregation on a real Kafka 4.4 broker: statestore's window store against Quix Streams.

    python -m benchmarks.window_quix_bench [--size tiny|quick|full] [--reps N] [--json PATH]

One broker on this machine, one input topic of ``P`` = 6 partitions holding
``events`` JSON records over ``keys`` keys (random, uniform), their event times
1 ms apart from now on (the record timestamps), one output topic.  Every run is
a fresh process and a fresh consumer group that reads the whole input, exactly
once; both sides count records per key in tumbling 10 s windows and output the
window's count for every input (:mod:`benchmarks.window_quix_runners` says what each
does and does not do: both write a changelog topic in the transaction, neither
fsyncs).  Cadences: 1,000 records per transaction and 1 s commits; repetitions
interleave the two sides.  Reported: records/s (wall, first record processed to
the last commit) and client CPU per record (the process's, librdkafka's threads
included; the broker's CPU is not counted).  No target: the row says how the two
compare on this machine, under the load printed beside it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import Result, median
from benchmarks._stream_common import (
    add_arguments,
    case_args,
    cpu_us,
    produce_input,
    publish,
    rate,
    run_and_print,
    run_on_broker,
)

PARTITIONS = 6
WINDOW_MS = 10_000

SIZES = {
    "tiny": {"events": 5_000, "keys": 500, "reps": 1},
    "quick": {"events": 50_000, "keys": 5_000, "reps": 2},
    "full": {"events": 200_000, "keys": 20_000, "reps": 3},
}
CADENCES: dict[str, tuple[int, int]] = {"1000/txn": (1000, 0), "1 s commits": (0, 1000)}
"""label -> (records per transaction, 0: time-based; commit interval in ms)."""
CASES = ("statestore", "quix")


def bench(
    bootstrap: str,
    *,
    events: int,
    keys: int,
    reps: int,
    cadences: list[str],
    quix_python: str | None,
    work: Path,
    cases: tuple[str, ...] = CASES,
) -> tuple[list[Result], list[dict[str, Any]]]:
    """Run the ``cases`` ``reps`` times per cadence, interleaved; the table rows (when both
    sides ran) and every report."""
    tag = time.monotonic_ns()
    topic, output = f"clicks-{tag}", f"windows-{tag}"
    produce_input(
        bootstrap,
        topic,
        output,
        partitions=PARTITIONS,
        events=events,
        keys=keys,
        key_prefix="user",
        timestamps=True,
    )
    runs: list[dict[str, Any]] = []
    for rep in range(reps):
        for label in cadences:
            every, interval_ms = CADENCES[label]
            for case in cases:
                app = f"win-{case}-{every or 't'}-{rep}-{time.monotonic_ns()}"
                args = case_args(
                    bootstrap,
                    topic,
                    output,
                    app=app,
                    events=events,
                    cadence=(every, interval_ms),
                    work=work,
                    partitions=PARTITIONS,
                    window_ms=WINDOW_MS,
                )
                report = run_and_print(
                    quix_python,
                    "benchmarks.window_quix_runners",
                    case,
                    args,
                    columns=f"{label:12} {case:10}",
                    cpu_width=7,
                    cadence=label,
                    rep=rep,
                )
                runs.append(report)
    results: list[Result] = []
    if set(cases) != set(CASES):
        return results, runs
    for label in cadences:
        chosen = {
            case: [r for r in runs if r["case"] == case and r["cadence"] == label] for case in CASES
        }
        rates = {case: [rate(r) for r in rs] for case, rs in chosen.items()}
        cpu = {case: [cpu_us(r) for r in rs] for case, rs in chosen.items()}
        results.append(
            Result(
                name=f"EOS tumbling-window count, {label}",
                value=median(rates["statestore"]),
                unit="rec/s",
                baseline_name="Quix Streams EOS tumbling_window().count().current()",
                baseline_value=median(rates["quix"]),
                samples=rates["statestore"],
                baseline_samples=rates["quix"],
                group="cluster",
                cpu_ratio=median(cpu["quix"]) / median(cpu["statestore"]),
                note=(
                    f"CPU/record: statestore {median(cpu['statestore']):.1f} us,"
                    f" Quix {median(cpu['quix']):.1f} us"
                ),
            )
        )
    return results, runs


def main(argv: list[str] | None = None) -> int:
    """Start a broker, run both sides, print the table and the JSON line (and ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.window_quix_bench")
    add_arguments(parser, SIZES, CADENCES)
    args = parser.parse_args(argv)
    if args.quix_python is None:
        parser.error("no interpreter with quixstreams: make .cache/quix-venv or pass --quix-python")
    sizes = SIZES[args.size]
    reps = args.reps or sizes["reps"]
    results, runs, uptimes = run_on_broker(
        "window-bench",
        lambda bootstrap, work: bench(
            bootstrap,
            events=sizes["events"],
            keys=sizes["keys"],
            reps=reps,
            cadences=args.cadence or list(CADENCES),
            quix_python=args.quix_python,
            work=work,
        ),
    )
    publish(
        "window_quix",
        f"window_quix_bench ({args.size}, reps={reps}, medians)",
        results,
        runs,
        uptimes,
        {
            "size": args.size,
            "events": sizes["events"],
            "keys": sizes["keys"],
            "partitions": PARTITIONS,
            "window_ms": WINDOW_MS,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
