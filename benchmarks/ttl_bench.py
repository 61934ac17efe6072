"""What expiry costs: a TTL store's sweep and cleaner pass against RocksDB per-key deletes and ``delete_range``.

Data (the same on every side): ``--keys`` random keys (``user:...``), 100-byte
values, each stamped with a time that grows with the write order, written in
commits of 1,000; then the clock moves so that the first half of the writes
has expired.  Each case starts from a freshly built store and times only the
expiry work:

* ``sweep``: :meth:`TtlKeyValueStore.expire` (walks the store, buffers a
  tombstone per expired key, at most a quarter of ``max_message_bytes`` of
  them per commit) and ``manager.commit()`` until every expired key is swept
  (each commit one changelog append, fsynced, and one RocksDB ``WriteBatch``,
  WAL off; each walks the store from its start again);
* ``cleaner``: without a sweep, a roll and one forced cleaning pass
  (``clean_log``) that removes the expired records from the changelog (the
  whole log is read and rewritten; RocksDB is not touched: reads skip the
  values until a sweep or a restore removes them);
* ``raw per-key deletes``: raw rocksdict with statestore's RocksDB options
  holding ``key -> timestamp | value``; a full scan that decodes each
  timestamp, one ``WriteBatch`` of deletes (WAL off), and an ``os.write`` +
  ``os.fsync`` of the deleted keys to an append-only file (the durable floor
  of the sweep: no framing, no CRC, no Kafka batch, no read-your-writes);
* ``raw delete_range``: raw rocksdict holding ``timestamp | key -> value``
  (time-ordered keys, as a window store's segments are) and one
  ``delete_range`` up to the cutoff plus the same fsynced append of one
  record.  It is the cheapest expiry RocksDB has, but that layout cannot
  serve a get by key without a second index, so it is not a key-value
  store's layout; it is the lower bound.

Run: ``python -m benchmarks.ttl_bench [--keys N] [--reps N] [--json PATH]``
(under ``flock`` of the bench lock on a shared machine).  Prints a table; with
``--json`` also writes the numbers, the load average before and after, and
the arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rocksdict

from benchmarks._harness import Stopwatch, Timing, make_keys, median
from benchmarks.baselines import engine_options, raw_open
from changelog.cleaner.clean import clean_log
from statestore import BytesSerde, StateManager, StateManagerConfig, TtlSettings

_TS = struct.Struct(">q")
VALUE = bytes(range(100))
COMMIT = 1000
START_MS = 1_000_000_000


def _stamps(n: int) -> list[int]:
    return [START_MS + i for i in range(n)]


def _cutoff(n: int) -> int:
    return START_MS + n // 2 - 1  # the first half (stamps <= cutoff) has expired


def _build_ours(path: Path, keys: list[bytes], clock: list[int]) -> tuple[StateManager, Any]:
    manager = StateManager(path, lambda: clock[0], config=StateManagerConfig(run_cleaner=False))
    store = manager.ttl_store(
        "t",
        ttl=TtlSettings(ttl_ms=len(keys), timestamp="record", sweep_interval_ms=2**62),
        key_serde=BytesSerde(),
        value_serde=BytesSerde(),
    )
    for i, (key, stamp) in enumerate(zip(keys, _stamps(len(keys)), strict=True)):
        store.put(key, VALUE, timestamp_ms=stamp)
        if (i + 1) % COMMIT == 0:
            manager.commit()
    manager.commit()
    clock[0] = _cutoff(len(keys)) + len(keys)  # now - ttl == cutoff
    return manager, store


def ours_sweep(path: Path, keys: list[bytes]) -> tuple[Timing, int]:
    clock = [START_MS]
    manager, store = _build_ours(path, keys, clock)
    try:
        sw = Stopwatch().start()
        store.expire()
        manager.commit()  # each commit sweeps the next part while the sweep stays due
        while store.sweep_due():
            manager.commit()
        return sw.stop(), store.counts.expired_swept
    finally:
        manager.close()


def ours_cleaner(path: Path, keys: list[bytes]) -> tuple[Timing, int]:
    clock = [START_MS]
    manager, store = _build_ours(path, keys, clock)
    try:
        (log,) = store.changelogs
        sw = Stopwatch().start()
        log.roll()
        stats = clean_log(log, force=True, now_ms=clock[0])
        timing = sw.stop()
        assert stats is not None
        return timing, stats.expired_records_removed
    finally:
        manager.close()


def _durable_append(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _raw_fill(db: rocksdict.Rdict, pairs: list[tuple[bytes, bytes]]) -> None:
    for start in range(0, len(pairs), COMMIT):
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in pairs[start : start + COMMIT]:
            batch.put(key, value)
        db.write(batch, _no_wal())


def _no_wal() -> rocksdict.WriteOptions:
    options = rocksdict.WriteOptions()
    options.disable_wal = True
    return options


def raw_per_key(path: Path, keys: list[bytes]) -> tuple[Timing, int]:
    db = raw_open(path / "db", engine_options())
    try:
        stamps = _stamps(len(keys))
        _raw_fill(db, [(k, _TS.pack(t) + VALUE) for k, t in zip(keys, stamps, strict=True)])
        cutoff = _cutoff(len(keys))
        sw = Stopwatch().start()
        unpack = _TS.unpack_from
        expired = [key for key, value in db.items() if unpack(value)[0] <= cutoff]
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key in expired:
            batch.delete(key)
        db.write(batch, _no_wal())
        _durable_append(path / "deletes", b"".join(expired))
        return sw.stop(), len(expired)
    finally:
        db.close()


def raw_delete_range(path: Path, keys: list[bytes]) -> tuple[Timing, int]:
    db = raw_open(path / "db", engine_options())
    try:
        stamps = _stamps(len(keys))
        pairs = sorted((_TS.pack(t) + k, VALUE) for k, t in zip(keys, stamps, strict=True))
        _raw_fill(db, pairs)
        cutoff = _cutoff(len(keys))
        sw = Stopwatch().start()
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete_range(b"", _TS.pack(cutoff + 1))
        db.write(batch, _no_wal())
        _durable_append(path / "deletes", _TS.pack(cutoff))
        return sw.stop(), len(keys) // 2
    finally:
        db.close()


CASES: dict[str, Callable[[Path, list[bytes]], tuple[Timing, int]]] = {
    "sweep (tombstones + commit)": ours_sweep,
    "cleaner pass (expired records removed)": ours_cleaner,
    "raw per-key deletes": raw_per_key,
    "raw delete_range (time-ordered keys)": raw_delete_range,
}


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    """Run every case ``--reps`` times, interleaved, and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    keys = make_keys(args.keys)
    load_before = _loadavg()
    walls: dict[str, list[float]] = {name: [] for name in CASES}
    cpus: dict[str, list[float]] = {name: [] for name in CASES}
    removed: dict[str, int] = {}
    for _rep in range(args.reps):
        for name, case in CASES.items():
            root = Path(tempfile.mkdtemp(prefix="ttl-bench-"))
            try:
                timing, count = case(root, keys)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            walls[name].append(timing.wall)
            cpus[name].append(timing.cpu)
            removed[name] = count
    load_after = _loadavg()
    floor = median(walls["raw per-key deletes"])
    rows = []
    print(
        f"{args.keys:,} keys, half expired; median of {args.reps}; load {load_before} -> {load_after}"
    )
    print(
        "| case | expired removed | wall ms | CPU ms | us per expired key | wall vs raw per-key |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in CASES:
        wall, cpu = median(walls[name]), median(cpus[name])
        per_key = wall / max(removed[name], 1) * 1e6
        rows.append(
            {
                "case": name,
                "expired_removed": removed[name],
                "wall_s": walls[name],
                "cpu_s": cpus[name],
                "median_wall_s": wall,
                "median_cpu_s": cpu,
                "us_per_expired_key": per_key,
                "vs_raw_per_key": wall / floor,
            }
        )
        print(
            f"| {name} | {removed[name]:,} | {wall * 1e3:,.1f} | {cpu * 1e3:,.1f} | "
            f"{per_key:.2f} | {wall / floor:.2f}x |"
        )
    if args.json is not None:
        doc = {
            "benchmark": "ttl_bench",
            "keys": args.keys,
            "reps": args.reps,
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
