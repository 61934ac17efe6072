"""What the broker benchmarks that run each case in a process of its own share.

The driver side (:mod:`benchmarks.stream_bench`, :mod:`benchmarks.window_quix_bench`):
the load line, the input topic's records, one case run in a fresh interpreter, the
Quix virtualenv's interpreter and the ``--json`` file.  The runner side
(:mod:`benchmarks.stream_runners`, :mod:`benchmarks.window_quix_runners`): the clock
from the first record processed to the last commit, statestore's ``ProcessorConfig``
for a cadence and its timed poll loop, Quix's ``Application`` with statestore's client
settings, and the runner's command line.

Only the standard library is imported at the top: the runners' ``quix`` case imports
this module in a virtualenv of its own (Quix Streams pins an older confluent-kafka).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchmarks._harness import Result, emit_json, machine_info, print_table, scratch_dir

ROOT = Path(__file__).resolve().parent.parent


# -- driver side ---------------------------------------------------------------------------


def uptime() -> str:
    """``uptime``'s line: the machine's load, printed beside every number."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def produce_retrying(producer: Any, *args: Any, **kwargs: Any) -> None:
    """``producer.produce(...)``, polling while its local queue is full."""
    while True:
        try:
            producer.produce(*args, **kwargs)
            break
        except BufferError:
            producer.poll(0.05)


def produce_input(
    bootstrap: str,
    topic: str,
    output: str,
    *,
    partitions: int,
    events: int,
    keys: int,
    key_prefix: str,
    timestamps: bool = False,
) -> None:
    """Create the input and output topics and fill the input with ``events`` records.

    Each a JSON ``{"amount": n}`` keyed by one of ``keys`` keys (``<key_prefix>:%08d``,
    random, uniform; seed 42); with ``timestamps``, their record times 1 ms apart from now.
    """
    from confluent_kafka import Producer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, partitions, 1) for t in (topic, output)]
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
    names = [f"{key_prefix}:{i:08d}".encode() for i in range(keys)]
    base_ms = int(time.time() * 1000)
    for i in range(events):
        value = json.dumps({"amount": rng.randint(1, 100)}).encode()
        key = names[rng.randrange(keys)]
        if timestamps:
            produce_retrying(producer, topic, value, key, timestamp=base_ms + i)
        else:
            produce_retrying(producer, topic, value, key)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("input records not acknowledged")


def run_case(python: str, module: str, case: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run ``python -m module case JSON`` in a fresh process; its JSON report with the load."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [python, "-m", module, case, json.dumps(args)],
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


def case_args(
    bootstrap: str,
    topic: str,
    output: str,
    *,
    app: str,
    events: int,
    cadence: tuple[int, int],
    work: Path,
    partitions: int,
    **extra: Any,
) -> dict[str, Any]:
    """A runner's JSON arguments: topics, group ``app`` (its state under ``work``), how many
    records, the cadence (records per transaction, 0: time-based; commit interval in ms)."""
    every, interval_ms = cadence
    return {
        "bootstrap": bootstrap,
        "input": topic,
        "output": output,
        "app": app,
        "events": events,
        "commit_every": every,
        "commit_interval_ms": interval_ms,
        "state_dir": str(work / app),
        "partitions": partitions,
        **extra,
    }


def run_and_print(
    quix_python: str | None,
    module: str,
    case: str,
    args: dict[str, Any],
    *,
    columns: str,
    cpu_width: int,
    **tags: Any,
) -> dict[str, Any]:
    """:func:`run_case` in this interpreter (``quix``: in ``quix_python``); the report tagged
    with ``case`` and ``tags``, its progress line printed after ``columns``."""
    python = quix_python if case == "quix" else sys.executable
    assert python is not None, "the quix case needs an interpreter with quixstreams"
    report = run_case(python, module, case, args)
    report.update(case=case, **tags)
    print(
        f"{columns} {rate(report):>10.0f} rec/s {cpu_us(report):{cpu_width}.2f} us/rec"
        f"  load {report['load_1m']:.1f}",
        flush=True,
    )
    return report


def rate(report: Mapping[str, Any]) -> float:
    """A run's records per second (wall)."""
    return float(report["records"] / report["wall_s"])


def cpu_us(report: Mapping[str, Any]) -> float:
    """A run's client CPU per record, in microseconds."""
    return float(report["cpu_s"] / report["records"] * 1e6)


def default_quix_python() -> str | None:
    """The interpreter of ``.cache/quix-venv``, if there."""
    candidate = ROOT / ".cache" / "quix-venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else None


def write_json(path: Path | None, line: str) -> None:
    """Write the JSON line ``emit_json`` printed to ``path`` (indented, keys sorted)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(json.loads(line), indent=1, sort_keys=True) + "\n")


def add_arguments(
    parser: argparse.ArgumentParser, sizes: Mapping[str, Any], cadences: Mapping[str, Any]
) -> None:
    """The options every such benchmark takes: size, repetitions, cadences, Quix, ``--json``."""
    parser.add_argument("--size", choices=sorted(sizes), default="quick")
    parser.add_argument("--reps", type=int)
    parser.add_argument("--cadence", action="append", choices=sorted(cadences))
    parser.add_argument(
        "--quix-python",
        default=default_quix_python(),
        help="interpreter with quixstreams installed (default: .cache/quix-venv, if there)",
    )
    parser.add_argument("--json", type=Path, help="also write the JSON report here")


def run_on_broker(
    label: str, bench: Callable[[str, Path], tuple[list[Result], list[dict[str, Any]]]]
) -> tuple[list[Result], list[dict[str, Any]], list[str]]:
    """``bench(bootstrap, work)`` against a fresh broker in a scratch directory.

    Its table rows and runs, and ``uptime`` before and after.
    """
    from benchmarks.cluster_bench import _broker  # noqa: PLC0415

    uptime_before = uptime()
    with scratch_dir(label) as work:
        broker = _broker(work / "broker")
        try:
            results, runs = bench(broker.bootstrap_servers, work)
        finally:
            broker.kill()
    return results, runs, [uptime_before, uptime()]


def publish(
    name: str,
    title: str,
    results: list[Result],
    runs: list[dict[str, Any]],
    uptimes: list[str],
    extra: dict[str, Any],
    json_path: Path | None,
) -> None:
    """Print the table, the load and the JSON line (``extra``, then ``runs``, ``uptime``,
    ``machine``); write the JSON to ``json_path`` too, if given."""
    print_table(results, title=title)
    print(f"uptime before: {uptimes[0]}\nuptime after:  {uptimes[1]}")
    line = emit_json(
        name,
        results,
        extra={**extra, "runs": runs, "uptime": uptimes, "machine": machine_info()},
    )
    write_json(json_path, line)


# -- runner side ---------------------------------------------------------------------------


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


_TASKS = Path("/proc/self/task")


def _thread_group(tid: str, name: str) -> str:
    """A thread's group in the CPU split: ``main`` (the interpreter's own thread), else its
    name without a trailing number (librdkafka's ``rdk:broker1`` -> ``rdk:broker``)."""
    if tid == str(os.getpid()):
        return "main"
    return name.rstrip("0123456789/-") or name


def _threads_cpu_s() -> dict[str, float]:
    """CPU seconds so far per thread (``tid/group``), from ``/proc/self/task``; empty where
    there is no ``/proc`` (the report then has no split)."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found: dict[str, float] = {}
    try:
        tasks = list(_TASKS.iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        # fields[11], fields[12]: utime, stime (the 14th and 15th of stat, counted from 1)
        found[f"{task.name}/{_thread_group(task.name, name)}"] = (
            int(fields[11]) + int(fields[12])
        ) / ticks
    return found


class Clock:
    """Wall and CPU time (the process's, every thread) from :meth:`start` to :meth:`stop`,
    and that CPU time split by thread group (the interpreter's ``main`` thread, librdkafka's
    ``rdk:*`` threads, RocksDB's ``rocksdb:*``; :func:`_thread_group`).  A thread that ended
    before :meth:`stop` is left out of the split, not of ``cpu_s``."""

    def __init__(self) -> None:
        self.started: tuple[float, float] | None = None
        self.stopped: tuple[float, float] | None = None
        self._threads_started: dict[str, float] = {}
        self._threads_stopped: dict[str, float] = {}

    def start(self) -> None:
        self._threads_started = _threads_cpu_s()
        self.started = (time.perf_counter(), _cpu_s())

    def stop(self) -> None:
        self.stopped = (time.perf_counter(), _cpu_s())
        self._threads_stopped = _threads_cpu_s()

    def report(self, records: int) -> dict[str, Any]:
        assert self.started is not None
        assert self.stopped is not None
        split: dict[str, float] = {}
        for key, cpu in self._threads_stopped.items():
            group = key.split("/", 1)[1]
            split[group] = split.get(group, 0.0) + cpu - self._threads_started.get(key, 0.0)
        return {
            "records": records,
            "wall_s": self.stopped[0] - self.started[0],
            "cpu_s": self.stopped[1] - self.started[1],
            "threads_cpu_s": {group: round(cpu, 3) for group, cpu in sorted(split.items())},
        }


def processor_config(args: Mapping[str, Any], **settings: Any) -> Any:
    """statestore's ``ProcessorConfig`` for a run's topics and cadence (and ``settings``).

    Count-based (``commit_every`` > 0): that many records per transaction and per poll,
    no time-based commit.  Time-based: ``commit_interval_ms``, 500 records a poll.
    """
    from statestore.kafka import ProcessorConfig  # noqa: PLC0415

    every = int(args["commit_every"])
    count_based = every > 0
    return ProcessorConfig(
        application_id=args["app"],
        bootstrap_servers=args["bootstrap"],
        input_topics=(args["input"],),
        output_topics=(args["output"],),
        instance_id="bench",
        commit_interval_ms=600_000 if count_based else int(args["commit_interval_ms"]),
        commit_every_records=every if count_based else 1 << 40,
        poll_records=every if count_based else 500,
        transaction_timeout_ms=900_000 if count_based else 60_000,
        **settings,
    )


def run_processor(
    processor: Any, args: Mapping[str, Any], *, retry_restore: bool = False
) -> dict[str, Any]:
    """Start ``processor``, poll until it processed ``events``, commit; the clock's report.

    Timed from the moment every one of the ``partitions`` tasks runs (their restore left
    out; the records processed before are not counted).  With ``retry_restore``, a
    ``KafkaClientError`` before that moment (a restore from a new changelog topic whose
    leader is not known yet) is printed and the task restored again.
    """
    from statestore.kafka import KafkaClientError  # noqa: PLC0415

    events = int(args["events"])
    partitions = int(args["partitions"])
    clock = Clock()
    processor.start()
    before = 0
    try:
        while processor.processed_records < events:
            try:
                processor.poll_once(0.1)
            except KafkaClientError as exc:
                if not retry_restore or clock.started is not None:
                    raise
                print(f"restore retried: {exc}", file=sys.stderr)
            if clock.started is None and len(processor.assignment) == partitions:
                clock.start()  # every task restored and running: the steady state
                before = processor.processed_records
        processor.commit()
        clock.stop()
    finally:
        processor.close()
    return clock.report(processor.processed_records - before)


def quix_application(args: Mapping[str, Any], processing_guarantee: str) -> Any:
    """Quix Streams' ``Application`` for a run, given statestore's tuned client settings.

    (``retry.backoff.ms``, ``linger.ms``, ``fetch.queue.backoff.ms``); the cadence as
    :func:`processor_config`'s.
    """
    from quixstreams import Application  # noqa: PLC0415

    every = int(args["commit_every"])
    return Application(
        broker_address=args["bootstrap"],
        consumer_group=args["app"],
        auto_offset_reset="earliest",
        processing_guarantee=processing_guarantee,
        commit_every=every,
        commit_interval=600.0 if every > 0 else int(args["commit_interval_ms"]) / 1000,
        state_dir=args["state_dir"],
        consumer_extra_config={"fetch.queue.backoff.ms": 10},
        producer_extra_config={"linger.ms": 5, "retry.backoff.ms": 10},
        loglevel="WARNING",
    )


def runner_main(
    runners: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]], argv: list[str]
) -> int:
    """Run the case ``argv[0]`` with the JSON arguments ``argv[1]``; print the JSON report."""
    case, args = argv[0], json.loads(argv[1])
    print(json.dumps(runners[case](args)), flush=True)
    return 0
