"""Log cleaner: compaction throughput, memory vs the dedupe buffer, and writer stalls.

Usage::

    python -m benchmarks.cleaner_bench [--quick]

Cases (each cleaning run happens in a fresh child process, so that its peak RSS is
the cleaner's and not the log builder's):

- ``compaction``: a log of ``records`` records over ``keys`` distinct 16-byte keys in
  random order with ~100-byte values, in batches of 1,000, cleaned with
  ``clean_log(log, force=True)`` until nothing is due, with a dedupe buffer several times
  smaller than the log (so the map fills and several passes run).  Reports records/s
  (records read by the recopy phase per second of cleaning), MB/s read (both phases),
  and the peak RSS growth of the cleaning process next to the configured buffer.
- ``writer``: appends of 100-record batches to one log, measured alone (baseline) and
  while a cleaning pass runs over another log (a) in a thread of the same process
  (``clean_log``) and (b) with its CPU work in a worker process (``clean_in_process``,
  what ``CleanerService`` uses by default).  The ratio is what the GIL costs writers; it decides
  between a cleaner thread and a cleaner process (docs/operations.md).  Appends are
  measured without fsync (the worst case for CPU contention) and with fsync per append.

Prints a table and ends with one JSON line (see :mod:`benchmarks._harness`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import (
    PeakRss,
    Result,
    Target,
    emit_json,
    machine_info,
    median,
    print_table,
    rss_bytes,
    scratch_dir,
)
from changelog.cleaner.clean import clean_log
from changelog.cleaner.manager import log_to_clean
from changelog.cleaner.offset_map import OffsetMap
from changelog.cleaner.service import clean_in_process
from changelog.config import CleanerConfig, LogConfig
from changelog.log.log import Log

KEY_BYTES = 16
VALUE_BYTES = 100
BATCH = 1000
MB = 1e6


def _config(segment_bytes: int) -> LogConfig:
    return LogConfig(segment_bytes=segment_bytes, flush_messages=10**9, file_delete_delay_ms=0)


def build_log(
    directory: Path, records: int, keys: int, segment_bytes: int, seed: int = 1
) -> tuple[int, int]:
    """Write ``records`` updates over ``keys`` random keys; returns (log bytes, distinct keys)."""
    import random  # noqa: PLC0415 - only the builder needs it

    rng = random.Random(seed)
    key_list = [b"user:%011d" % i for i in range(keys)]
    value = bytes(rng.randrange(256) for _ in range(VALUE_BYTES))
    seen: set[int] = set()
    with Log.open(directory, _config(segment_bytes)) as log:
        written = 0
        while written < records:
            n = min(BATCH, records - written)
            picks = [rng.randrange(keys) for _ in range(n)]
            seen.update(picks)
            log.append([(key_list[i], value) for i in picks])
            written += n
        log.roll()
        log.flush()
        return sum(segment.size_bytes for segment in log.segments), len(seen)


# ----------------------------------------------------------------- child: clean and measure


def child_clean(directory: Path, buffer_bytes: int, segment_bytes: int) -> dict[str, Any]:
    """Clean until nothing is due; report totals and peak RSS growth (runs in a child)."""
    config = CleanerConfig(dedupe_buffer_size_bytes=buffer_bytes)
    log = Log.open(directory, _config(segment_bytes))
    baseline = rss_bytes()
    passes = 0
    records = 0
    bytes_read = 0
    started = time.perf_counter()
    with PeakRss() as peak:
        offset_map = OffsetMap(buffer_bytes, load_factor=config.dedupe_buffer_load_factor)
        while True:
            stats = clean_log(log, force=True, config=config, offset_map=offset_map)
            if stats is None:
                break
            passes += 1
            records += stats.records_read
            bytes_read += stats.bytes_read + stats.map_bytes_read
    elapsed = time.perf_counter() - started
    size_after = sum(segment.size_bytes for segment in log.segments)
    live = len({r.key for r in log.read()})
    log.close()
    return {
        "passes": passes,
        "records_read": records,
        "bytes_read": bytes_read,
        "seconds": elapsed,
        "rss_growth": peak.peak - baseline,
        "size_after": size_after,
        "live_keys": live,
    }


def _run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.cleaner_bench", "--child", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


# ----------------------------------------------------------------- writer stalls


class _Writer:
    """Appends 100-record batches to ``log`` until stopped; counts records."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.count = 0
        self.stop = threading.Event()
        self.pairs = [(b"w:%011d" % i, b"x" * VALUE_BYTES) for i in range(100)]

    def run(self) -> None:
        while not self.stop.is_set():
            self.log.append(self.pairs)
            self.count += len(self.pairs)


def _writer_rate(log: Log, during: Any) -> tuple[float, float]:
    """Writer records/s while ``during()`` runs; returns (rate, seconds)."""
    writer = _Writer(log)
    thread = threading.Thread(target=writer.run)
    thread.start()
    time.sleep(0.2)  # warm up
    start_count, started = writer.count, time.perf_counter()
    during()
    elapsed = time.perf_counter() - started
    done = writer.count - start_count
    writer.stop.set()
    thread.join()
    return done / elapsed, elapsed


def measure_writer(
    root: Path, template: Path, segment_bytes: int, *, fsync: bool
) -> dict[str, Any]:
    config = LogConfig(segment_bytes=64 * 1024 * 1024, flush_messages=1 if fsync else 10**9)
    log = Log.open(root / "writer-0", config)
    results: dict[str, Any] = {}
    copies = iter(range(100))

    def fresh() -> Path:
        target = root / f"victim-{next(copies)}" / template.name
        shutil.copytree(template, target)
        return target

    # (a) a pass in a thread of this process
    victim = fresh()
    victim_log = Log.open(victim, _config(segment_bytes))
    pass_seconds: list[float] = []

    def in_thread() -> None:
        started = time.perf_counter()
        clean_log(victim_log, force=True)
        pass_seconds.append(time.perf_counter() - started)

    thread_rate, window = _writer_rate(log, in_thread)
    victim_log.close()

    # baseline: the writer alone for the same window
    alone_rate, _ = _writer_rate(log, lambda: time.sleep(window))

    # (b) the same pass with its CPU work in a worker process (CleanerService's default)
    victim_log = Log.open(fresh(), _config(segment_bytes))

    def in_process() -> None:
        now = int(time.time() * 1000)
        to_clean = log_to_clean(victim_log, now_ms=now, force=True)
        clean_in_process(to_clean, config=CleanerConfig(), now_ms=now)

    process_rate, _ = _writer_rate(log, in_process)
    victim_log.close()
    log.close()
    results.update(
        alone=alone_rate,
        thread=thread_rate,
        process=process_rate,
        window_s=window,
        pass_s=pass_seconds[0],
    )
    return results


# ----------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _, directory, buffer_bytes, segment_bytes = args.child
        print(json.dumps(child_clean(Path(directory), int(buffer_bytes), int(segment_bytes))))
        return 0

    if args.quick:
        records, keys, buffer_bytes, segment_bytes = 100_000, 20_000, 128 * 1024, 2 * 1024 * 1024
        writer_records = 60_000
    else:
        records, keys, buffer_bytes, segment_bytes = (
            1_000_000,
            200_000,
            4 * 1024 * 1024,
            16 * 1024 * 1024,
        )
        writer_records = 300_000

    results: list[Result] = []
    extra: dict[str, Any] = {"machine": machine_info()}
    with scratch_dir("cleaner") as root:
        log_dir = root / "compaction-0"
        size, distinct = build_log(log_dir, records, keys, segment_bytes)
        measured = _run_child("clean", str(log_dir), str(buffer_bytes), str(segment_bytes))
        extra["compaction"] = {
            "records": records,
            "keys": keys,
            "log_bytes": size,
            "buffer_bytes": buffer_bytes,
            **measured,
        }
        assert measured["live_keys"] == distinct, measured
        seconds = measured["seconds"]
        results += [
            Result(
                name="compaction records/s",
                value=measured["records_read"] / seconds,
                unit="records/s",
                note=(
                    f"{records:,} records, {keys:,} keys, log {size / MB:.0f} MB, "
                    f"buffer {buffer_bytes / MB:.2f} MB, {measured['passes']} passes, "
                    f"{seconds:.1f} s"
                ),
                group="cleaner",
            ),
            Result(
                name="compaction MB/s read",
                value=measured["bytes_read"] / MB / seconds,
                unit="MB/s",
                group="cleaner",
            ),
            Result(
                name="cleaner peak RSS growth",
                value=measured["rss_growth"] / MB,
                unit="MB",
                baseline_name="dedupe buffer",
                baseline_value=buffer_bytes / MB,
                target=Target("value<=", (buffer_bytes + 48 * 1024 * 1024) / MB),
                note="target: buffer + 48 MB (interpreter, I/O buffers, one segment's batch)",
                group="cleaner",
            ),
        ]

        template = root / "template" / "victim-0"
        build_log(template, writer_records, writer_records // 5, segment_bytes)
        for fsync in (False, True):
            label = "fsync" if fsync else "no fsync"
            rates = measure_writer(root / f"w-{int(fsync)}", template, segment_bytes, fsync=fsync)
            extra[f"writer_{label.replace(' ', '_')}"] = rates
            for mode in ("thread", "process"):
                results.append(
                    Result(
                        name=f"writer during pass in {mode} ({label})",
                        value=rates[mode],
                        unit="records/s",
                        baseline_name="writer alone",
                        baseline_value=rates["alone"],
                        note=f"pass {rates['pass_s']:.1f} s",
                        group="cleaner",
                    )
                )
    extra["median_writer_thread_ratio"] = median(
        [r.ratio for r in results if r.ratio is not None and "thread" in r.name]
    )
    print_table(results, title="log cleaner")
    emit_json("cleaner", results, extra=extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
