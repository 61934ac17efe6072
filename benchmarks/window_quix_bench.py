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
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import Result, emit_json, machine_info, median, print_table, scratch_dir

ROOT = Path(__file__).resolve().parent.parent
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


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def produce_input(bootstrap: str, topic: str, output: str, events: int, keys: int) -> None:
    """Create the topics and fill the input: ``events`` records, event times 1 ms apart."""
    from confluent_kafka import Producer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, PARTITIONS, 1) for t in (topic, output)]
    ).values():
        future.result()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": "true",
            "linger.ms": "20",
            "partitioner": "murmur2_random",
        }
    )
    rng = random.Random(42)
    names = [f"user:{i:08d}".encode() for i in range(keys)]
    base_ms = int(time.time() * 1000)
    for i in range(events):
        value = json.dumps({"amount": rng.randint(1, 100)}).encode()
        key = names[rng.randrange(keys)]
        while True:
            try:
                producer.produce(topic, value, key, timestamp=base_ms + i)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("input records not acknowledged")


def run_case(python: str, case: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one case in a fresh process; its JSON report with the load beside it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [python, "-m", "benchmarks.window_quix_runners", case, json.dumps(args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{case} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["load_1m"] = os.getloadavg()[0]
    return report


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
    produce_input(bootstrap, topic, output, events, keys)
    runs: list[dict[str, Any]] = []
    for rep in range(reps):
        for label in cadences:
            every, interval_ms = CADENCES[label]
            for case in cases:
                app = f"win-{case}-{every or 't'}-{rep}-{time.monotonic_ns()}"
                args = {
                    "bootstrap": bootstrap,
                    "input": topic,
                    "output": output,
                    "app": app,
                    "events": events,
                    "commit_every": every,
                    "commit_interval_ms": interval_ms,
                    "window_ms": WINDOW_MS,
                    "state_dir": str(work / app),
                    "partitions": PARTITIONS,
                }
                python = quix_python if case == "quix" else sys.executable
                assert python is not None, "the quix case needs an interpreter with quixstreams"
                report = run_case(python, case, args)
                report.update(case=case, cadence=label, rep=rep)
                runs.append(report)
                print(
                    f"{label:12} {case:10} {report['records'] / report['wall_s']:>10.0f} rec/s"
                    f" {report['cpu_s'] / report['records'] * 1e6:7.2f} us/rec"
                    f"  load {report['load_1m']:.1f}",
                    flush=True,
                )
    results: list[Result] = []
    if set(cases) != set(CASES):
        return results, runs
    for label in cadences:
        chosen = {
            case: [r for r in runs if r["case"] == case and r["cadence"] == label] for case in CASES
        }
        rates = {case: [r["records"] / r["wall_s"] for r in rs] for case, rs in chosen.items()}
        cpu = {case: [r["cpu_s"] / r["records"] * 1e6 for r in rs] for case, rs in chosen.items()}
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


def _default_quix_python() -> str | None:
    candidate = ROOT / ".cache" / "quix-venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else None


def main(argv: list[str] | None = None) -> int:
    """Start a broker, run both sides, print the table and the JSON line (and ``--json``)."""
    from examples.balances.cluster_demo import FAST_GROUP_BROKER_SETTINGS  # noqa: PLC0415
    from kafka_harness.broker import KafkaBroker  # noqa: PLC0415
    from kafka_harness.kafka_runtime import CLUSTER_KAFKA_VERSION, fetch  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m benchmarks.window_quix_bench")
    parser.add_argument("--size", choices=sorted(SIZES), default="quick")
    parser.add_argument("--reps", type=int)
    parser.add_argument("--cadence", action="append", choices=sorted(CADENCES))
    parser.add_argument(
        "--quix-python",
        default=_default_quix_python(),
        help="interpreter with quixstreams installed (default: .cache/quix-venv, if there)",
    )
    parser.add_argument("--json", type=Path, help="also write the JSON report here")
    args = parser.parse_args(argv)
    if args.quix_python is None:
        parser.error("no interpreter with quixstreams: make .cache/quix-venv or pass --quix-python")
    sizes = SIZES[args.size]
    reps = args.reps or sizes["reps"]
    cadences = args.cadence or list(CADENCES)
    uptime_before = _uptime()
    with scratch_dir("window-bench") as work:
        broker = KafkaBroker(fetch(version=CLUSTER_KAFKA_VERSION), work / "broker")
        try:
            broker.start(FAST_GROUP_BROKER_SETTINGS)
            results, runs = bench(
                broker.bootstrap_servers,
                events=sizes["events"],
                keys=sizes["keys"],
                reps=reps,
                cadences=cadences,
                quix_python=args.quix_python,
                work=work,
            )
        finally:
            broker.kill()
    uptime_after = _uptime()
    print_table(results, title=f"window_quix_bench ({args.size}, reps={reps}, medians)")
    print(f"uptime before: {uptime_before}\nuptime after:  {uptime_after}")
    line = emit_json(
        "window_quix",
        results,
        extra={
            "size": args.size,
            "events": sizes["events"],
            "keys": sizes["keys"],
            "partitions": PARTITIONS,
            "window_ms": WINDOW_MS,
            "runs": runs,
            "uptime": [uptime_before, uptime_after],
            "machine": machine_info(),
        },
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(json.loads(line), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
