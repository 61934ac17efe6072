"""Kafka's own log cleaner as an anchor: one input log, cleaned by a real broker and by ours.

Usage::

    python -m benchmarks.kafka_cleaner_bench [--quick | --tiny] [--reps N]
    python -m benchmarks.kafka_cleaner_bench --kafka-buffer-bytes 8388608   # Kafka in one pass too

The input is the benchmark log of issue 18: a store changelog of 1M writes over 200k
keys in random order (16-byte keys, ~110-byte msgpack values, batches of 1,000, three
64 MiB segments and an empty active one; ``--quick``: 100k over 20k), built once by
``benchmarks.store_bench._build_dirty_log``.  Both sides clean a fresh copy of exactly
those segment files until the log is fully clean (the cleaner checkpoint reaches the
active segment's base offset), with the same dedupe buffer (4 MiB; quick and tiny: 2 MiB, Kafka refuses less than 1 MiB per thread), one
cleaner thread, 512 KiB I/O buffers (both defaults) and no I/O throttle (both
defaults), repetitions interleaved.

* **Ours** runs in a child process: ``Log.open``, then ``clean_log(force=True)`` passes
  until the end offset reaches the first uncleanable offset.  Timed from the first pass's
  start to the last pass's end (the log is already open; Python and numpy imported).
  Each pass fsyncs its cleaned segments before the swap (as always).
* **Kafka** (``KAFKA_VERSION`` from ``kafka_harness``, a one-node KRaft broker run by
  :mod:`kafka_harness.broker`, Kafka's own start-script JVM options: 1 GiB heap, G1, C2
  on) is given the files the way ``tests/kafka/test_kafka_reads_ours.py`` gives them:
  topics created, broker stopped, their segment files replaced by ours, its
  clean-shutdown marker removed (so its loader re-validates every batch), broker started
  with ``log.cleaner.threads=1`` and ``log.cleaner.dedupe.buffer.size`` = the same
  buffer.  JVM warm-up: a smaller copy of the same kind of log (``warmup``, a tenth of the
  size) is cleaned first; the measured topic is created with ``cleanup.policy=delete`` and
  switched to ``compact`` (``kafka-configs --alter``) only after the warm-up topic is
  clean, so Kafka's cleaner runs JIT-compiled code.  Kafka's time to a fully clean log is
  read from its own log lines: from ``Beginning cleaning of log bench-0`` to the stats
  record of the pass whose dirty section ends at the active segment (``Log cleaner
  thread 0 cleaned log bench-0 (dirty section = [a, b])``, whose timestamp is taken
  after its swap).  Kafka's cleaner also flushes (fsyncs) each cleaned segment before
  the swap; the broker's own flush settings are defaults (no fsync per append, which
  the cleaner does not use).
* What neither side counts: opening or loading the log, the JVM's or Python's start.

Target (issue 18): our time <= 2x Kafka's with the same buffer.  ``--kafka-buffer-bytes``
gives Kafka another buffer (8 MiB holds the 200k keys in one pass, as our 4 MiB does),
to compare equal pass counts; that row has no target.  Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from benchmarks._harness import (
    Result,
    Target,
    emit_json,
    machine_info,
    median,
    print_table,
    scratch_dir,
)

KAFKA_JVM_OPTS: Final = (
    "-Xms1g",
    "-Xmx1g",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
)
"""``kafka-server-start.sh``'s heap and ``kafka-run-class.sh``'s performance options."""

TOPIC: Final = "bench"
WARMUP: Final = "warmup"
_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", re.MULTILINE)
_STATS = re.compile(
    r"cleaned log (?P<log>\S+) \(dirty section = \[(?P<a>\d+), (?P<b>\d+)\]\)\s*\n"
    r"\s*(?P<mb>[\d,.]+) MB of log processed in (?P<s>[\d,.]+) seconds"
)
_END_SIZE = re.compile(r"End size: [\d,.]+ MB \((?P<n>[\d,]+) messages\)")


def _segment_config() -> Any:
    from changelog.config import LogConfig  # noqa: PLC0415

    return LogConfig(file_delete_delay_ms=0)


def build(root: Path, records: int, keys: int) -> Path:
    """The benchmark log: a store changelog of ``records`` writes over ``keys`` keys, each
    round of ``keys`` writes a fresh shuffle of all of them (the recipe of store_bench's
    compaction case), rolled; returns its partition directory."""
    import random  # noqa: PLC0415

    from benchmarks._harness import make_keys, make_values  # noqa: PLC0415
    from benchmarks.store_bench import changelog_of, open_manager, open_store, write_store  # noqa: PLC0415

    key_list = make_keys(keys)
    values = make_values(keys)
    rng = random.Random(17)
    with open_manager(root) as manager:
        store = open_store(manager)
        written = 0
        while written < records:
            order = key_list[:]
            rng.shuffle(order)
            take = min(keys, records - written)
            write_store(store, order[:take], values[:take], commit_every=1000)
            written += take
        log = changelog_of(store)
        log.roll()
        return Path(log.dir)


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(directory.glob("*.log")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------- ours (child process)


def child_ours(directory: Path, buffer_bytes: int) -> dict[str, Any]:
    """Clean ``directory`` to the end; time the passes (runs in a child process)."""
    from changelog.cleaner.clean import clean_log  # noqa: PLC0415
    from changelog.config import CleanerConfig  # noqa: PLC0415
    from changelog.log.log import Log  # noqa: PLC0415

    config = CleanerConfig(dedupe_buffer_size_bytes=buffer_bytes, threads=1)
    log = Log.open(directory, _segment_config())
    passes: list[dict[str, Any]] = []
    started, cpu = time.perf_counter(), time.process_time()
    while True:
        stats = clean_log(log, force=True, config=config)
        if stats is None:
            break
        passes.append(
            {
                "dirty": [stats.first_dirty_offset, stats.end_offset],
                "seconds": stats.duration_s,
                "mb_read": (stats.bytes_read + stats.map_bytes_read) / 1e6,
            }
        )
        if stats.end_offset >= stats.first_uncleanable_offset:
            break
    wall, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    live = sum(1 for _ in log.read())
    log.close()
    return {
        "seconds": wall,
        "cpu_s": cpu_s,
        "passes": passes,
        "records_after": live,
        "digest": _digest(directory),
        "load": os.getloadavg()[0],
    }


def run_ours(template: Path, work: Path, buffer_bytes: int) -> dict[str, Any]:
    copy = work / template.name
    shutil.copytree(template, copy)
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.kafka_cleaner_bench",
                "--child",
                str(copy),
                str(buffer_bytes),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        shutil.rmtree(work)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


# ----------------------------------------------------------------- Kafka's cleaner


def _read_checkpoint(path: Path) -> dict[str, int]:
    """Kafka's ``cleaner-offset-checkpoint`` (version 0, count, ``topic partition offset``)."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    if len(lines) < 2 or lines[0] != "0" or len(lines) - 2 != int(lines[1]):
        return {}
    return {f"{t}-{p}": int(o) for t, p, o in (line.split() for line in lines[2:])}


def _wait_clean(broker: Any, log_name: str, offset: int, timeout_s: float) -> None:
    path = broker.log_dir / "cleaner-offset-checkpoint"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _read_checkpoint(path).get(log_name) == offset:
            return
        if not broker.running:
            raise RuntimeError("the broker died:\n" + broker.console_tail())
        time.sleep(0.2)
    raise RuntimeError(
        f"Kafka did not clean {log_name} to {offset} in {timeout_s}s:\n" + broker.console_tail()
    )


def _timestamp_before(text: str, position: int) -> datetime:
    stamps = list(_TS.finditer(text, 0, position))
    return datetime.strptime(stamps[-1].group(1), "%Y-%m-%d %H:%M:%S,%f")


def kafka_times(console: str, log_name: str, end: int) -> dict[str, Any]:
    """Kafka's passes over ``log_name`` from its console log, up to the one ending at ``end``."""
    begin = console.find(f"Beginning cleaning of log {log_name}")
    if begin < 0:
        raise RuntimeError(f"no 'Beginning cleaning of log {log_name}' line")
    passes: list[dict[str, Any]] = []
    finished = None
    for match in _STATS.finditer(console):
        if match["log"] != log_name:
            continue
        size = _END_SIZE.search(console, match.end())
        passes.append(
            {
                "dirty": [int(match["a"]), int(match["b"])],
                "seconds": float(match["s"].replace(",", "")),
                "mb_read": float(match["mb"].replace(",", "")),
                "messages_after": int(size["n"].replace(",", "")) if size else None,
            }
        )
        if int(match["b"]) == end:
            finished = _timestamp_before(console, match.start())
            break
    if finished is None:
        raise RuntimeError(f"no stats line of a pass over {log_name} ending at {end}")
    started = _timestamp_before(console, begin + 1)
    return {
        "seconds": (finished - started).total_seconds(),
        "seconds_in_passes": sum(p["seconds"] for p in passes),
        "passes": passes,
        "records_after": passes[-1]["messages_after"],
    }


def _cleaner_thread_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of the JVM's ``kafka-log-cleaner-thread-0`` (Linux
    ``/proc``; the kernel keeps 15 characters of a thread's name), or ``None``."""
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if not (task / "comm").read_text().startswith("kafka-log-clean"):
                continue
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return None


def _place(broker: Any, topic: str, source: Path) -> None:
    target = broker.log_dir / f"{topic}-0"
    for stale in target.iterdir():
        if stale.suffix in (".log", ".index", ".timeindex", ".snapshot", ".txnindex"):
            stale.unlink()
    for ours in source.iterdir():
        if ours.suffix in (".log", ".index", ".timeindex"):
            shutil.copy2(ours, target / ours.name)


def run_kafka(
    dist: Any, template: Path, warmup: Path, work: Path, buffer_bytes: int, timeout_s: float
) -> dict[str, Any]:
    from kafka_harness.broker import KafkaBroker  # noqa: PLC0415

    segment_bytes = str(_segment_config().segment_bytes)
    topic_configs = {
        "segment.bytes": segment_bytes,
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    }
    end = max(int(p.name[:20]) for p in template.glob("*.log"))
    warm_end = max(int(p.name[:20]) for p in warmup.glob("*.log"))
    broker = KafkaBroker(dist, work / "broker", jvm_opts=KAFKA_JVM_OPTS)
    try:
        broker.start({"log.cleaner.enable": "false"}, timeout_s=timeout_s)
        broker.create_topic(TOPIC, {**topic_configs, "cleanup.policy": "delete"})
        broker.create_topic(WARMUP, {**topic_configs, "cleanup.policy": "compact"})
        broker.stop()
        _place(broker, TOPIC, template)
        _place(broker, WARMUP, warmup)
        (broker.log_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)
        broker.start(
            {
                "log.cleaner.enable": "true",
                "log.cleaner.threads": "1",
                "log.cleaner.dedupe.buffer.size": str(buffer_bytes),
                "log.cleaner.io.buffer.size": str(512 * 1024),
                "log.cleaner.backoff.ms": "100",
            },
            timeout_s=timeout_s,
        )
        _wait_clean(broker, f"{WARMUP}-0", warm_end, timeout_s)
        pid = broker.pid  # the JVM: its cleaner thread's CPU time
        cpu_before = _cleaner_thread_cpu_s(pid)
        dist.run_tool(
            "kafka.admin.ConfigCommand",
            [
                "--bootstrap-server",
                broker.bootstrap_servers,
                "--alter",
                "--entity-type",
                "topics",
                "--entity-name",
                TOPIC,
                "--add-config",
                "cleanup.policy=compact",
            ],
            timeout_s=timeout_s,
        )
        _wait_clean(broker, f"{TOPIC}-0", end, timeout_s * 4)
        cpu_after = _cleaner_thread_cpu_s(pid)
        load = os.getloadavg()[0]
        broker.stop()
    finally:
        broker.kill()
    console = broker.console_log.read_text(errors="replace")
    result = kafka_times(console, f"{TOPIC}-0", end)
    result["warmup"] = kafka_times(console, f"{WARMUP}-0", warm_end)["seconds"]
    result["digest"] = _digest(broker.log_dir / f"{TOPIC}-0")
    result["load"] = load
    result["cpu_s"] = (
        cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
    )
    shutil.rmtree(work)
    return result


# ----------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="100k records over 20k keys")
    size.add_argument("--tiny", action="store_true", help="20k records over 4k keys (tests)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per broker step")
    parser.add_argument(
        "--kafka-buffer-bytes",
        type=int,
        default=None,
        help="Kafka's dedupe buffer instead of ours (e.g. one large enough for one pass)",
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child_ours(Path(args.child[0]), int(args.child[1]))))
        return 0

    from kafka_harness.kafka_runtime import (  # noqa: PLC0415
        KAFKA_VERSION,
        fetch,
        missing_prerequisites,
    )

    missing = missing_prerequisites()
    if missing is not None:
        print(missing)
        emit_json("kafka_cleaner", [], extra={"not_run": missing})
        return 0
    if args.tiny:
        records, keys, buffer_bytes, reps = 20_000, 4_000, 2 << 20, 1
    elif args.quick:
        records, keys, buffer_bytes, reps = 100_000, 20_000, 2 << 20, args.reps
    else:
        records, keys, buffer_bytes, reps = 1_000_000, 200_000, 4 << 20, args.reps
    dist = fetch()
    kafka_buffer = args.kafka_buffer_bytes or buffer_bytes
    ours: list[dict[str, Any]] = []
    kafka: list[dict[str, Any]] = []
    with scratch_dir("kafka-cleaner") as root:
        template = build(root / "log", records, keys)
        warmup = build(root / "warm", max(records // 10, 1000), max(keys // 10, 100))
        log_bytes = sum(p.stat().st_size for p in template.glob("*.log"))
        for rep in range(reps):
            order = ("ours", "kafka") if rep % 2 == 0 else ("kafka", "ours")
            for side in order:
                work = root / f"{side}-{rep}"
                if side == "ours":
                    ours.append(run_ours(template, work, buffer_bytes))
                else:
                    kafka.append(
                        run_kafka(dist, template, warmup, work, kafka_buffer, args.timeout)
                    )
                print(
                    f"  rep {rep} {side}: {(ours if side == 'ours' else kafka)[-1]}",
                    file=sys.stderr,
                    flush=True,
                )
    ours_s = median([r["seconds"] for r in ours])
    kafka_s = median([r["seconds"] for r in kafka])
    loads = ", ".join(f"{r['load']:.1f}" for r in ours + kafka)
    results = [
        Result(
            name="cleaner: time to a fully clean log, ours vs Kafka's",
            value=ours_s,
            unit="s",
            baseline_name=f"Kafka {KAFKA_VERSION} broker",
            baseline_value=kafka_s,
            target=Target("ratio<=", 2.0) if args.kafka_buffer_bytes is None else None,
            cpu_ratio=(
                median([r["cpu_s"] for r in ours]) / median([r["cpu_s"] for r in kafka])
                if all(r["cpu_s"] for r in kafka)
                else None
            ),
            samples=[r["seconds"] for r in ours],
            baseline_samples=[r["seconds"] for r in kafka],
            note=(
                f"{records:,} records, {keys:,} keys, {log_bytes / 1e6:.0f} MB, buffer "
                f"{buffer_bytes / 2**20:g} MiB (Kafka's "
                f"{(args.kafka_buffer_bytes or buffer_bytes) / 2**20:g} MiB), one thread; passes: ours "
                f"{len(ours[0]['passes'])}, Kafka {len(kafka[0]['passes'])}; CPU s ours "
                + ", ".join(f"{r['cpu_s']:.2f}" for r in ours)
                + ", Kafka's cleaner thread "
                + ", ".join(f"{r['cpu_s']:.2f}" if r["cpu_s"] else "?" for r in kafka)
                + f"; load {loads}"
            ),
            group="cleaner",
        ),
        Result(
            name="cleaner: log MB per second until fully clean, ours vs Kafka's",
            value=log_bytes / 1e6 / ours_s,
            unit="MB/s",
            baseline_name=f"Kafka {KAFKA_VERSION} broker",
            baseline_value=log_bytes / 1e6 / kafka_s,
            note=(
                "Kafka's passes (its own stats, 0.1 s resolution): "
                + "; ".join(
                    " + ".join(f"{p['seconds']:.1f}" for p in r["passes"]) + " s" for r in kafka
                )
            ),
            group="cleaner",
        ),
        Result(
            name="cleaner: records left, ours vs Kafka's",
            value=ours[0]["records_after"],
            unit="records",
            baseline_name=f"Kafka {KAFKA_VERSION} broker",
            baseline_value=kafka[0]["records_after"] or 0,
            note=(
                f"distinct keys written: {keys:,}; Kafka's count from its last pass's End size; "
                "final .log bytes "
                + ("identical" if ours[0]["digest"] == kafka[0]["digest"] else "DIFFERENT")
                + f" ({ours[0]['digest']} / {kafka[0]['digest']})"
            ),
            group="cleaner",
        ),
    ]
    print_table(results, title="cleaner against Kafka's")
    emit_json(
        "kafka_cleaner",
        results,
        extra={
            "machine": machine_info(),
            "records": records,
            "keys": keys,
            "log_bytes": log_bytes,
            "buffer_bytes": buffer_bytes,
            "kafka_buffer_bytes": args.kafka_buffer_bytes or buffer_bytes,
            "ours": ours,
            "kafka": kafka,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
