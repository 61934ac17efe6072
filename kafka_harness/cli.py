"""The command line behind ``kafka_harness/kafka``: fetch, smoke (timed), broker, dump."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from kafka_harness.broker import KafkaBroker, running_broker
from kafka_harness.kafka_runtime import fetch

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; return the exit status."""
    parser = argparse.ArgumentParser(prog="kafka_harness/kafka", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="resolve the pinned Kafka with Maven; print the classpath file")
    smoke = sub.add_parser("smoke", help="time fetch, format, start, produce, consume, stop, dump")
    smoke.add_argument("--keep", action="store_true", help="keep the temporary directory")
    broker_cmd = sub.add_parser("broker", help="run a broker in the foreground until Ctrl-C")
    broker_cmd.add_argument("work_dir", type=Path)
    broker_cmd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    dump = sub.add_parser("dump", help="DumpLogSegments --deep-iteration --print-data-log FILES")
    dump.add_argument("files", nargs="+", type=Path)
    dump.add_argument(
        "--verify-index-only", action="store_true", help="check .index/.timeindex files instead"
    )
    args = parser.parse_args(argv)

    if args.command == "fetch":
        dist = fetch()
        print(dist.home / "classpath.txt")
        return 0
    if args.command == "dump":
        dist = fetch()
        options = (
            ["--verify-index-only"]
            if args.verify_index_only
            else ["--deep-iteration", "--print-data-log"]
        )
        result = dist.dump_log_segments(args.files, *options)
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        return 0
    if args.command == "broker":
        dist = fetch()
        overrides = dict(item.split("=", 1) for item in args.set)
        with running_broker(dist, args.work_dir, overrides) as broker:
            print(
                f"broker up at {broker.bootstrap_servers}; log dir {broker.log_dir}; Ctrl-C stops"
            )
            with contextlib.suppress(KeyboardInterrupt):
                while broker.running:
                    time.sleep(0.5)
        return 0
    return _smoke(keep=args.keep)


def _smoke(*, keep: bool) -> int:
    """Time every step of one broker's life, as the report in docs/kafka-compatibility.md."""
    timings: list[tuple[str, float]] = []

    def lap(label: str, started: float) -> float:
        now = time.monotonic()
        timings.append((label, now - started))
        return now

    t = time.monotonic()
    dist = fetch()
    t = lap("fetch (Maven, or the cached classpath)", t)
    work = Path(tempfile.mkdtemp(prefix="kafka-smoke-"))
    broker = KafkaBroker(dist, work)
    try:
        broker.start({"log.cleaner.enable": "false"})
        t = lap("format storage + broker start", t)
        broker.create_topic("smoke", {"cleanup.policy": "compact", "segment.bytes": "1024"})
        t = lap("create topic", t)
        records: list[tuple[str, str | None]] = [
            (f"k{i % 7}", None if i % 5 == 4 else f"v{i}") for i in range(60)
        ]
        broker.produce("smoke", records)
        t = lap("produce 60 records", t)
        consumed = broker.consume("smoke", len(records))
        t = lap("consume 60 records", t)
        broker.stop()
        t = lap("broker stop", t)
        logs = sorted((broker.log_dir / "smoke-0").glob("*.log"))
        result = dist.dump_log_segments(logs, "--deep-iteration", "--print-data-log")
        t = lap(f"DumpLogSegments ({len(logs)} segments)", t)
        assert len(consumed) == len(records)
        assert result.stdout.count("| offset:") == len(records)
    finally:
        broker.kill()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    for label, seconds in timings:
        print(f"{seconds:7.2f}s  {label}")
    print(f"{sum(s for _, s in timings):7.2f}s  total" + (f" (kept {work})" if keep else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
