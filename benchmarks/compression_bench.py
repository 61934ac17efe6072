"""Compression: append, read, restore and compaction throughput per codec, and size on disk.

Usage::

    python -m benchmarks.compression_bench [--quick | --tiny] [--reps N]

Workload: ``--records`` records (default 200,000) in batches of 1,000, keys
``user:<7 digits>`` over a quarter as many distinct keys in random order,
values msgpack-encoded dicts of ~90 bytes (field names repeat, numbers vary:
the shape of a store's values, compressible about 2-4x).  Per codec
(``compression_type`` none, gzip, snappy, lz4, zstd at Kafka's default
levels), each repetition builds a fresh log and measures:

* ``append``: ``Log.append`` of every batch, ``flush_messages`` at 1,000 (one
  fsync per batch, what a store's commit costs), in records/s;
* ``read``: ``Log.read()`` of every record (``Record`` objects), records/s;
* ``restore``: the restore path's decode, ``Log.read_batches`` plus
  ``decode_key_values`` per batch (what ``statestore`` replays into RocksDB,
  without RocksDB), records/s;
* ``compaction``: one forced ``clean_log`` pass (3 of 4 records are
  overwritten), records read per second;
* ``size``: bytes of the ``.log`` files after appending.

The baseline of every line is the ``none`` codec measured in the same run, so
the ratio is what the codec costs (or saves, for size).  Nothing here is a
target: the table is for choosing ``compression_type`` (see
``docs/performance.md``, "Compression").  A second table measures the
compression bindings themselves on one batch's records section (87 KB): the
ones we use and, when installed, the alternatives (``cramjam`` lz4 blocks,
``python-snappy``, ``zstandard``, ``pyzstd``), compress and decompress MB/s,
best of five.

Prints the tables and ends with one JSON line (see :mod:`benchmarks._harness`).
"""

from __future__ import annotations

import argparse
import importlib
import random
import shutil
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from benchmarks._harness import Result, emit_json, machine_info, median, print_table
from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from changelog.log.log import Log
from changelog.record.batch import decode_key_values
from changelog.record.compression import Compression, compress, decompress

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BATCH = 1000


def make_batches(records: int, *, seed: int = 42) -> list[list[tuple[bytes, bytes]]]:
    rng = random.Random(seed)
    keys = max(records // 4, 1)
    out = []
    for start in range(0, records, BATCH):
        batch = []
        for _ in range(min(BATCH, records - start)):
            key = b"user:%07d" % rng.randrange(keys)
            value = msgpack.packb(
                {
                    "name": f"user-{rng.randrange(10**6):06d}",
                    "balance": rng.randrange(10**9),
                    "currency": "EUR",
                    "updated_ms": 1_700_000_000_000 + rng.randrange(10**8),
                    "tags": ["gold", "eu"][: rng.randrange(3)],
                }
            )
            batch.append((key, value))
        out.append(batch)
    return out


def one_run(codec: str, batches: list[list[tuple[bytes, bytes]]], root: Path) -> dict[str, float]:
    directory = root / f"{codec}-0"
    config = LogConfig(
        compression_type=codec,
        flush_messages=BATCH,
        segment_bytes=4 * 1024 * 1024,
        min_cleanable_dirty_ratio=0.01,
    )
    records = sum(len(b) for b in batches)
    out: dict[str, float] = {}
    with Log.open(directory, config, clock=lambda: 1_700_000_000_000) as log:
        start = time.perf_counter()
        for batch in batches:
            log.append(batch)
        out["append"] = records / (time.perf_counter() - start)
        log.roll()
        out["size"] = float(sum(p.stat().st_size for p in directory.glob("*.log")))
        start = time.perf_counter()
        count = sum(1 for _ in log.read())
        out["read"] = count / (time.perf_counter() - start)
        start = time.perf_counter()
        count = 0
        for _header, data in log.read_batches(0):
            count += len(decode_key_values(data, path=directory, position=-1, validate=False))
        out["restore"] = count / (time.perf_counter() - start)
        start = time.perf_counter()
        stats = clean_log(log, force=True, now_ms=1_700_000_000_000)
        assert stats is not None
        out["compaction"] = stats.records_read / (time.perf_counter() - start)
    shutil.rmtree(directory)
    return out


def _best(fn: Callable[[], object], reps: int = 5, inner: int = 20) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def binding_rows(data: bytes) -> list[Result]:
    """Compress/decompress MB/s of our bindings and of alternatives that happen to be installed."""
    rows: list[Result] = []

    def add(name: str, comp: Callable[[], bytes], decomp: Callable[[bytes], Any]) -> None:
        packed = comp()
        assert bytes(decomp(packed)) == data, name
        for what, seconds in (
            ("compress", _best(comp)),
            ("decompress", _best(lambda: decomp(packed))),
        ):
            rows.append(
                Result(
                    name=f"{name} {what}",
                    value=len(data) / seconds / 1e6,
                    unit="MB/s",
                    note=f"ratio {len(data) / len(packed):.2f}",
                    group="compression-bindings",
                )
            )

    for codec in ("gzip", "snappy", "lz4", "zstd"):
        c = Compression.of(codec)
        add(
            f"ours {codec}",
            lambda c=c: compress(data, c),  # type: ignore[misc]
            lambda p, c=c: decompress(c.codec, p, path="bench", position=0),  # type: ignore[misc]
        )
    add("zlib raw deflate l6", lambda: zlib.compress(data, 6), zlib.decompress)
    alternatives: list[
        tuple[str, str, Callable[[Any], tuple[Callable[[], bytes], Callable[[bytes], Any]]]]
    ] = [
        (
            "cramjam lz4 block",
            "cramjam",
            lambda m: (
                lambda: bytes(m.lz4.compress_block(data, store_size=False)),
                lambda p: m.lz4.decompress_block(p, output_len=len(data)),
            ),
        ),
        ("python-snappy", "snappy", lambda m: (lambda: m.compress(data), m.decompress)),
        (
            "zstandard l3",
            "zstandard",
            lambda m: (
                lambda: m.ZstdCompressor(level=3).compress(data),
                lambda p: m.ZstdDecompressor().decompress(p),
            ),
        ),
        ("pyzstd l3", "pyzstd", lambda m: (lambda: m.compress(data, 3), m.decompress)),
    ]
    for name, module, make in alternatives:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            rows.append(
                Result(
                    name=f"{name}",
                    value=0.0,
                    unit="MB/s",
                    note="not installed",
                    group="compression-bindings",
                )
            )
            continue
        comp, decomp = make(mod)
        add(name, comp, decomp)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 records, 1 rep")
    parser.add_argument("--tiny", action="store_true", help="2,000 records, 1 rep (smoke test)")
    args = parser.parse_args(argv)
    records, reps = args.records, args.reps
    if args.quick:
        records, reps = 20_000, 1
    if args.tiny:
        records, reps = 2_000, 1
    batches = make_batches(records)
    samples: dict[str, dict[str, list[float]]] = {c: {} for c in CODECS}
    with tempfile.TemporaryDirectory(prefix="compression-bench-") as tmp:
        for _ in range(reps):
            for codec in CODECS:  # interleaved, so load drifts hit every codec alike
                for metric, value in one_run(codec, batches, Path(tmp)).items():
                    samples[codec].setdefault(metric, []).append(value)
    results: list[Result] = []
    units = {
        "append": "records/s",
        "read": "records/s",
        "restore": "records/s",
        "compaction": "records/s",
        "size": "bytes",
    }
    for metric, unit in units.items():
        base = median(samples["none"][metric])
        for codec in CODECS:
            values = samples[codec][metric]
            results.append(
                Result(
                    name=f"{metric} {codec}",
                    value=median(values),
                    unit=unit,
                    baseline_name=None if codec == "none" else f"{metric} none",
                    baseline_value=None if codec == "none" else base,
                    samples=values,
                    group="compression",
                )
            )
    print_table(
        results,
        title=f"compression per codec: {records:,} records in batches of {BATCH}, ~90-byte msgpack values, median of {reps}",
    )
    section = make_batches(BATCH, seed=1)[0]
    from changelog.record.batch import encode_batch  # noqa: PLC0415

    data = encode_batch(0, section, timestamp_ms=1_700_000_000_000)[61:]
    bindings = binding_rows(bytes(data))
    print_table(
        bindings,
        title=f"compression bindings on one batch's records ({len(data):,} bytes), best of 5",
    )
    emit_json(
        "compression",
        results + bindings,
        extra={"records": records, "reps": reps, "machine": machine_info()},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
