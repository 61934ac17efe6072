"""Where a one-store put + commit spends its time, phase by phase, against the durable floor's phases.

Usage: PYTHONPATH=. python scripts/commit_phases.py [COMMITS]

statestore: ``COMMITS`` commits of 1,000 puts (the store benchmark's keys and values, bytes
keys, msgpack values) into one store; each commit is run by hand as ``store.commit()`` runs
it for one partition, its phases timed one after the other: the puts, the write buffer's
``take``, ``Log.append`` (encode and write; the encode is also timed alone, not counted in
the total), ``Log.sync_to`` (the fsync), ``RocksDBEngine.write`` and the buffer's ``forget``.
The durable floor (``benchmarks.baselines.raw_put_durable``'s loop, same RocksDB options):
``pack`` + ``WriteBatch.put`` + list appends, ``db.write``, ``b"".join`` + ``os.write``,
``os.fsync``.  Prints medians in ns a record and the 1-minute load average.
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import rocksdict

from benchmarks import baselines
from benchmarks._harness import make_keys, make_values
from benchmarks.txn_bench import _manager, _store
from changelog.record.batch import encode_batch

N = 1000


def _ours(
    root: Path, keys: list[bytes], values: list[object], commits: int
) -> dict[str, list[float]]:
    phases: dict[str, list[float]] = {}
    with _manager(root / "ss") as manager:
        store = _store(manager, "s")
        put = store.put
        buffer = store._inner
        while not hasattr(buffer, "take"):
            buffer = buffer.inner
        part = buffer.inner
        log, engine = part.changelog, part.engine
        for r in range(commits):
            t0 = time.perf_counter()
            for i in range(r * N, (r + 1) * N):
                put(keys[i], values[i])
            t1 = time.perf_counter()
            records = buffer.take()
            t2 = time.perf_counter()
            encode_batch(0, records, timestamp_ms=1)
            t3 = time.perf_counter()
            info = log.append(records, defer_flush=True)
            t4 = time.perf_counter()
            log.sync_to(info.last_offset + 1)
            t5 = time.perf_counter()
            engine.write(records, info.last_offset + 1)
            t6 = time.perf_counter()
            buffer.forget(records)
            t7 = time.perf_counter()
            for name, a, b in (
                ("put", t0, t1),
                ("take", t1, t2),
                ("encode (inside append)", t2, t3),
                ("append", t3, t4),
                ("fsync", t4, t5),
                ("RocksDB write", t5, t6),
                ("forget", t6, t7),
            ):
                phases.setdefault(name, []).append(b - a)
    return phases


def _floor(
    root: Path, keys: list[bytes], values: list[object], commits: int
) -> dict[str, list[float]]:
    phases: dict[str, list[float]] = {}
    db = baselines.raw_open(root / "floor", baselines.engine_options())
    write_options = baselines._no_wal()
    pack = msgpack.Packer().pack
    fd = os.open(root / "floor.append", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for r in range(commits):
            t0 = time.perf_counter()
            batch = rocksdict.WriteBatch(raw_mode=True)
            parts = []
            for i in range(r * N, (r + 1) * N):
                key = keys[i]
                value = pack(values[i])
                batch.put(key, value)
                parts.append(key)
                parts.append(value)
            t1 = time.perf_counter()
            db.write(batch, write_options)
            t2 = time.perf_counter()
            os.write(fd, b"".join(parts))
            t3 = time.perf_counter()
            os.fsync(fd)
            t4 = time.perf_counter()
            for name, a, b in (
                ("pack + WriteBatch.put", t0, t1),
                ("db.write", t1, t2),
                ("write", t2, t3),
                ("fsync", t3, t4),
            ):
                phases.setdefault(name, []).append(b - a)
    finally:
        os.close(fd)
        db.close()
    return phases


def _print(title: str, phases: dict[str, list[float]]) -> float:
    total = 0.0
    print(title)
    for name, samples in phases.items():
        ns = statistics.median(samples) / N * 1e9
        if not name.startswith("encode"):
            total += ns
        print(f"  {name:24} {ns:7.0f} ns a record")
    print(f"  {'total':24} {total:7.0f}")
    return total


def main() -> None:
    commits = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    keys, values = make_keys(N * commits), make_values(N * commits)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        ours = _print("statestore, one store", _ours(root, keys, values, commits))
        floor = _print("durable floor", _floor(root, keys, values, commits))
    print(f"floor / statestore: {floor / ours:.2f}x; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
