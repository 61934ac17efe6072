"""Processing throughput on a real Kafka 4.4 broker: statestore against the client's floor and Quix.

    python -m benchmarks.stream_bench [--size tiny|quick|full] [--reps N] [--json PATH]

One broker on this machine, one input topic of ``P`` = 6 partitions holding
``events`` JSON records over ``keys`` keys (random, uniform), one output topic of
6 partitions.  Every run is a fresh process and a fresh consumer group that reads
the whole input (:mod:`benchmarks.stream_runners` says what each does):

* **statestore** - the :class:`~statestore.kafka.Processor` runtime with one store
  of running sums (``BytesSerde`` keys, ``IntSerde`` values), one output per input;
* **raw** (the floor) - a confluent-kafka consume-produce loop, the same client
  settings, state in a dict, the same changelog traffic (one record per key changed
  in a transaction, to partition ``p`` of a compacted topic) and the same outputs;
  no store, no restore, no rebalance or error handling;
* **quix** - Quix Streams 3's ``Application`` with a stateful ``apply`` and
  ``to_topic`` (its own changelog topic and state serialization; run with the
  interpreter given by ``--quix-python``, a virtualenv of its own because it pins
  an older confluent-kafka).

Each at ``100`` and ``1000`` records per transaction and with time-based commits
(every ``1000`` ms), exactly-once, and at-least-once for statestore and the raw
loop; repetitions interleave every case.  Reported: records/s (wall, from the first
record processed to the last commit) and client CPU per record (the process's CPU
time, librdkafka's threads included; the broker's CPU is not counted).  Targets:
statestore >= 0.8x the floor's records/s, <= 1.3x its CPU per record.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import (
    Result,
    Target,
    median,
)
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

SIZES = {
    "tiny": {"events": 5_000, "keys": 500, "reps": 1},
    "quick": {"events": 100_000, "keys": 10_000, "reps": 1},
    "full": {"events": 500_000, "keys": 50_000, "reps": 3},
}
CADENCES: dict[str, tuple[int, int]] = {
    "100/txn": (100, 0),
    "1000/txn": (1000, 0),
    "1 s commits": (0, 1000),
}
"""label -> (records per transaction, 0: time-based; commit interval in ms)."""
CASES = [
    ("statestore", "exactly_once_v2"),
    ("raw", "exactly_once_v2"),
    ("quix", "exactly_once_v2"),
    ("statestore", "at_least_once"),
    ("raw", "at_least_once"),
]


def bench(
    bootstrap: str,
    *,
    events: int,
    keys: int,
    reps: int,
    cadences: list[str],
    cases: list[tuple[str, str]],
    quix_python: str | None,
    work: Path,
) -> tuple[list[Result], list[dict[str, Any]]]:
    """Run every case ``reps`` times, interleaved; the table rows and every run's report."""
    tag = time.monotonic_ns()
    topic, output = f"events-{tag}", f"totals-{tag}"
    produce_input(
        bootstrap,
        topic,
        output,
        partitions=PARTITIONS,
        events=events,
        keys=keys,
        key_prefix="acct",
    )
    runs: list[dict[str, Any]] = []
    for rep in range(reps):
        for label in cadences:
            every, interval_ms = CADENCES[label]
            for case, guarantee in cases:
                if case == "quix" and quix_python is None:
                    continue
                app = f"{case}-{guarantee[:3]}-{every or 't'}-{rep}-{time.monotonic_ns()}"
                args = case_args(
                    bootstrap,
                    topic,
                    output,
                    app=app,
                    events=events,
                    cadence=(every, interval_ms),
                    work=work,
                    partitions=PARTITIONS,
                    guarantee=guarantee,
                )
                report = run_and_print(
                    quix_python,
                    "benchmarks.stream_runners",
                    case,
                    args,
                    columns=f"{label:12} {case:10} {guarantee:16}",
                    cpu_width=6,
                    guarantee=guarantee,
                    cadence=label,
                    rep=rep,
                )
                runs.append(report)
    return _results(runs, cadences), runs


def _results(runs: list[dict[str, Any]], cadences: list[str]) -> list[Result]:
    def pick(case: str, guarantee: str, label: str) -> tuple[list[float], list[float]]:
        chosen = [
            r
            for r in runs
            if r["case"] == case and r["guarantee"] == guarantee and r["cadence"] == label
        ]
        rates = [rate(r) for r in chosen]
        cpu = [cpu_us(r) for r in chosen]
        return rates, cpu

    results = []
    for label in cadences:
        for guarantee, short in (("exactly_once_v2", "EOS"), ("at_least_once", "ALO")):
            ours, ours_cpu = pick("statestore", guarantee, label)
            floor, floor_cpu = pick("raw", guarantee, label)
            if not ours or not floor:
                continue
            results += [
                Result(
                    name=f"{short} statestore, {label}",
                    value=median(ours),
                    unit="rec/s",
                    baseline_name=f"raw confluent-kafka {short} loop (floor)",
                    baseline_value=median(floor),
                    target=Target("ratio>=", 0.8),
                    samples=ours,
                    baseline_samples=floor,
                    group="cluster",
                    cpu_ratio=median(floor_cpu) / median(ours_cpu),
                ),
                Result(
                    name=f"{short} statestore CPU/record, {label}",
                    value=median(ours_cpu),
                    unit="us/rec",
                    baseline_name=f"raw confluent-kafka {short} loop (floor)",
                    baseline_value=median(floor_cpu),
                    target=Target("ratio<=", 1.3),
                    samples=ours_cpu,
                    baseline_samples=floor_cpu,
                    group="cluster",
                ),
            ]
            quix, quix_cpu = pick("quix", guarantee, label)
            if quix:
                results.append(
                    Result(
                        name=f"{short} statestore vs Quix Streams, {label}",
                        value=median(ours),
                        unit="rec/s",
                        baseline_name=f"Quix Streams {short}",
                        baseline_value=median(quix),
                        samples=ours,
                        baseline_samples=quix,
                        group="cluster",
                        cpu_ratio=median(quix_cpu) / median(ours_cpu),
                        note=f"Quix {median(quix_cpu):.1f} us/rec CPU",
                    )
                )
    return results


TABLE_BEGIN = "<!-- stream_bench: table (python -m benchmarks.stream_bench --table JSON) -->"
TABLE_END = "<!-- stream_bench: end table -->"


def markdown_table(payload: dict[str, Any]) -> str:
    """The docs table of one run's JSON: medians per cadence and guarantee, from its ``runs``."""

    def med(case: str, guarantee: str, label: str, what: str) -> float | None:
        chosen = [
            r
            for r in payload["runs"]
            if r["case"] == case and r["guarantee"] == guarantee and r["cadence"] == label
        ]
        if not chosen:
            return None
        if what == "rate":
            return median([rate(r) for r in chosen])
        return median([cpu_us(r) for r in chosen])

    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    def ratio(a: float | None, b: float | None, target: str = "") -> str:
        if a is None or b is None:
            return "-"
        value = a / b
        if not target:
            return f"{value:.2f}x"
        passed = value >= float(target[2:]) if target[:2] == ">=" else value <= float(target[2:])
        return f"{value:.2f}x {'PASS' if passed else 'FAIL'}"

    lines = [
        "| commits | guarantee | statestore rec/s | floor rec/s | ratio (>= 0.8) "
        "| statestore CPU us/rec | floor CPU us/rec | ratio (<= 1.3) "
        "| Quix rec/s | Quix CPU us/rec | statestore / Quix rec/s |",
        "|---|---|---:|---:|---|---:|---:|---|---:|---:|---:|",
    ]
    labels = list(dict.fromkeys(r["cadence"] for r in payload["runs"]))
    for label in labels:
        for guarantee, short in (
            ("exactly_once_v2", "exactly-once"),
            ("at_least_once", "at-least-once"),
        ):
            ours, floor = (
                med("statestore", guarantee, label, "rate"),
                med("raw", guarantee, label, "rate"),
            )
            if ours is None and floor is None:
                continue
            ours_cpu = med("statestore", guarantee, label, "cpu")
            floor_cpu = med("raw", guarantee, label, "cpu")
            quix, quix_cpu = (
                med("quix", guarantee, label, "rate"),
                med("quix", guarantee, label, "cpu"),
            )
            lines.append(
                f"| {label} | {short} | {num(ours, ',.0f')} | {num(floor, ',.0f')} "
                f"| {ratio(ours, floor, '>=0.8')} | {num(ours_cpu, '.2f')} | {num(floor_cpu, '.2f')} "
                f"| {ratio(ours_cpu, floor_cpu, '<=1.3')} | {num(quix, ',.0f')} | {num(quix_cpu, '.2f')} "
                f"| {ratio(ours, quix)} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Start a broker, run the cases, print the table and the JSON line (and ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream_bench")
    add_arguments(parser, SIZES, CADENCES)
    parser.add_argument(
        "--case",
        action="append",
        choices=[f"{c}:{g}" for c, g in CASES],
        help="only these cases (case:guarantee)",
    )
    parser.add_argument(
        "--table", type=Path, help="print the docs table of this JSON report and stop"
    )
    args = parser.parse_args(argv)
    if args.table is not None:
        print(markdown_table(json.loads(args.table.read_text())))
        return 0
    sizes = SIZES[args.size]
    reps = args.reps or sizes["reps"]
    cadences = args.cadence or list(CADENCES)
    cases = [tuple(c.split(":")) for c in args.case] if args.case else CASES
    results, runs, uptimes = run_on_broker(
        "stream-bench",
        lambda bootstrap, work: bench(
            bootstrap,
            events=sizes["events"],
            keys=sizes["keys"],
            reps=reps,
            cadences=cadences,
            cases=cases,  # type: ignore[arg-type]
            quix_python=args.quix_python,
            work=work,
        ),
    )
    publish(
        "stream",
        f"stream_bench ({args.size}, reps={reps}, medians)",
        results,
        runs,
        uptimes,
        {
            "size": args.size,
            "events": sizes["events"],
            "keys": sizes["keys"],
            "partitions": PARTITIONS,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
