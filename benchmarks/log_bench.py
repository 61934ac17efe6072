"""Log append and read throughput, each against the bare file work it is built on.

Usage::

    python -m benchmarks.log_bench [--quick] [--batches N] [--reps N]

Workload: batches of 1,000 records with 16-byte random keys and ~100-byte random
values, into a fresh partition directory with 64 MiB segments (so a run rolls a
few times).  Baselines are measured in the same run, interleaved repetition by
repetition, and every line is a median:

* ``append (no fsync)`` vs ``encode+write``: ``encode_batch`` plus one
  ``os.write`` per batch to a plain file; the ratio is what ``Log.append``
  costs on top (offset assignment, roll checks, index entries, the lock).
* ``append (fsync each)``: the default flush policy (``flush_messages=1``),
  one fsync per 1,000-record append; baseline ``encode+write+fsync``.
* ``append 1-record (fsync each)``: appends/s when every record is its own
  commit: the fsync-bound worst case.
* ``read_batches`` vs ``pread+iter_batches``: bulk read of the whole log
  (framing + CRC-32C of every batch) against reading the ``.log`` files and
  running the codec's ``iter_batches`` over them.
* ``read`` vs ``decode_records``: records/s decoded through ``Log.read``
  against decoding the same batches already in memory.

Prints a table and ends with one JSON line (see :mod:`benchmarks._harness`).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks._harness import (
    Result,
    Target,
    emit_json,
    machine_info,
    median,
    print_table,
    scratch_dir,
)
from changelog.config import LogConfig
from changelog.log.log import Log
from changelog.record.batch import decode_records, encode_batch, iter_batches

RECORDS_PER_BATCH = 1000
KEY_BYTES = 16
VALUE_BYTES = 100
SEGMENT_BYTES = 64 * 1024 * 1024
SINGLE_APPENDS = 300

Pairs = list[tuple[bytes | None, bytes | None]]


def make_pairs(batches: int, *, seed: int = 42) -> list[Pairs]:
    """``batches`` lists of 1,000 random ``(key, value)`` pairs."""
    rng = random.Random(seed)
    return [
        [
            (rng.randbytes(KEY_BYTES), rng.randbytes(VALUE_BYTES + rng.randint(-10, 10)))
            for _ in range(RECORDS_PER_BATCH)
        ]
        for _ in range(batches)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the log benchmark and print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes")
    parser.add_argument("--batches", type=int, default=None, help="batches per repetition")
    parser.add_argument("--reps", type=int, default=None, help="interleaved repetitions")
    args = parser.parse_args(argv)
    batches = args.batches or (20 if args.quick else 200)
    reps = args.reps or (3 if args.quick else 5)
    singles = SINGLE_APPENDS // (5 if args.quick else 1)
    pairs = make_pairs(batches)
    records = batches * RECORDS_PER_BATCH
    samples: dict[str, list[float]] = {}
    log_bytes = 0

    def sample(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    with scratch_dir("log") as scratch:
        for rep in range(reps):
            root = scratch / f"rep{rep}"
            root.mkdir()

            # --- baselines: encode + write (+ fsync) to a plain file
            for name, sync in (("encode+write", False), ("encode+write+fsync", True)):
                path = root / f"{name}.bin"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                start = time.perf_counter()
                offset = 0
                for batch in pairs:
                    os.write(fd, encode_batch(offset, batch, timestamp_ms=1_700_000_000_000))
                    if sync:
                        os.fsync(fd)
                    offset += len(batch)
                sample(name, records / (time.perf_counter() - start))
                os.close(fd)
                path.unlink()

            # --- Log.append, without and with the default per-append fsync
            for name, config in (
                ("append (no fsync)", LogConfig(segment_bytes=SEGMENT_BYTES, flush_messages=2**62)),
                ("append (fsync each)", LogConfig(segment_bytes=SEGMENT_BYTES)),
            ):
                directory = root / ("bench-0" if "no" in name else "benchsync-0")
                with Log.open(directory, config) as log:
                    start = time.perf_counter()
                    for batch in pairs:
                        log.append(batch)
                    sample(name, records / (time.perf_counter() - start))

            # --- one-record appends with fsync: the commit-per-record worst case
            with Log.open(root / "single-0", LogConfig(segment_bytes=SEGMENT_BYTES)) as log:
                one = pairs[0]
                start = time.perf_counter()
                for n in range(singles):
                    log.append(one[n % len(one) : n % len(one) + 1])
                sample("append 1-record (fsync each)", singles / (time.perf_counter() - start))

            # --- reads of the log written above
            directory = root / "bench-0"
            files = sorted(directory.glob("*.log"))
            log_bytes = sum(f.stat().st_size for f in files)
            start = time.perf_counter()
            for f in files:
                data = f.read_bytes()
                for _ in iter_batches(data, path=f, validate=True):
                    pass
            sample("pread+iter_batches", log_bytes / (time.perf_counter() - start) / 1e6)
            with Log.open(directory, LogConfig(segment_bytes=SEGMENT_BYTES)) as log:
                start = time.perf_counter()
                for _ in log.read_batches():
                    pass
                sample("read_batches", log_bytes / (time.perf_counter() - start) / 1e6)
                in_memory = [data for _, data in log.read_batches()]
                start = time.perf_counter()
                count = sum(1 for _ in log.read())
                sample("read", count / (time.perf_counter() - start))
            start = time.perf_counter()
            count = 0
            for data in in_memory:
                count += len(decode_records(data, path="bench", position=0))
            sample("decode_records", count / (time.perf_counter() - start))
            _remove_tree(root)

    med = {name: median(values) for name, values in samples.items()}

    def result(
        name: str,
        baseline: str | None,
        unit: str,
        target: Target | None = None,
        note: str = "",
    ) -> Result:
        return Result(
            name=name,
            value=med[name],
            unit=unit,
            baseline_name=baseline,
            baseline_value=med[baseline] if baseline else None,
            target=target,
            samples=samples[name],
            baseline_samples=samples[baseline] if baseline else [],
            note=note,
            group="log",
        )

    results = [
        result("append (no fsync)", "encode+write", "records/s", Target("ratio>=", 0.7)),
        result(
            "append (fsync each)",
            "encode+write+fsync",
            "records/s",
            Target("ratio>=", 0.7),
            note="the default flush policy: every 1,000-record append is fsynced",
        ),
        result(
            "append 1-record (fsync each)",
            None,
            "appends/s",
            note="one fsync per record: bounded by the disk, not by Python",
        ),
        result("read_batches", "pread+iter_batches", "MB/s", Target("ratio>=", 0.5)),
        result("read", "decode_records", "records/s", Target("ratio>=", 0.7)),
    ]
    print_table(
        results,
        title=(
            f"log: {batches} batches x {RECORDS_PER_BATCH} records, ~{VALUE_BYTES}-byte values, "
            f"{log_bytes / 1e6:.1f} MB, median of {reps}"
        ),
    )
    emit_json(
        "log",
        results,
        extra={
            "records_per_batch": RECORDS_PER_BATCH,
            "batches": batches,
            "reps": reps,
            "log_bytes": log_bytes,
            "machine": machine_info(),
        },
    )
    return 0


def _remove_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink()
    root.rmdir()


if __name__ == "__main__":
    raise SystemExit(main())
