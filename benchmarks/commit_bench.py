"""A web-style write: one put, one commit.  Against sqlite3 (WAL, ``synchronous=FULL``) and the floor.

Cases (``--only NAME``, repeatable; default: all):

==========  ==============================================================================
case        what is measured
==========  ==============================================================================
one_put     one thread: ``store.put(key, value)`` + ``store.commit()``, ``commits`` times
            (default fsync policy: every commit fsynced).  Baselines, interleaved
            repetition by repetition: sqlite3 in WAL mode with ``synchronous=FULL`` (one
            ``INSERT OR REPLACE`` + ``COMMIT``: what a Python developer would pick), and the
            durable floor (rocksdict ``WriteBatch`` with statestore's options, WAL off, plus
            an ``os.pwrite`` of the record into a preallocated, zero-filled file and an
            ``os.fdatasync``: the same write our preallocated segment does), raw rocksdict
            with statestore's options and its own WAL, ``put`` with ``sync=True``, and lmdb
            (``sync=True``, one write transaction a put) when the ``lmdb`` package is
            installed.  Reported: commits/s, CPU per commit (process time), p50/p99
            latency.
threads     4 and 16 threads, each committing one put at a time into ONE store (the
            store's writer is whichever thread commits; ``commit()`` covers every write
            buffered when it takes the partition's lock), and the same threads on sqlite3
            (a connection each).  Reported: commits/s and changelog fsyncs per commit,
            counted at the one call site that fsyncs a segment (``segment.flush``), on
            this disk and on a slow one (every fsync delayed by ``--slow-fsync-ms``).
aio         16 asyncio tasks, each awaiting ``store.put(...)`` (``statestore.aio``):
            commits/s and fsyncs per commit.
python      the commit path's own CPU: ``one_put``'s statestore and floor loops with
            ``os.fsync`` and ``os.fdatasync`` replaced by no-ops for the case (the
            ``write`` still happens), best of the repetitions: what a commit costs
            besides the fsync's kernel work,
            measured without the thread sleeping in every fsync (which, on a busy
            machine, leaves the caches to other processes and inflates that CPU 2-4x).
==========  ==============================================================================

Method: real files and fsyncs under ``STATESTORE_BENCH_DIR`` (default /tmp); the GC on;
medians of interleaved repetitions; the 1-minute load average printed beside every case (on
this shared 2-core machine a number taken at load > 2 is a hint, not a verdict).  sqlite3
uses one table ``kv(key TEXT PRIMARY KEY, value BLOB) WITHOUT ROWID`` and the same value
bytes (msgpack of the same dict).  What the baselines do not do: sqlite3 has no changelog
and no restore; the floor has no serialization, no buffer, no batch encoding.

``python -m benchmarks.commit_bench --size quick`` (alone on the machine: other work moves
every number).  Prints a table, then one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack

from benchmarks._harness import Result, emit_json, machine_info, print_table, scratch_dir
from benchmarks.baselines import engine_options, raw_open
from changelog.fs import files
from statestore import StateManager, StateManagerConfig

__all__ = ["main"]

SIZES = {"tiny": (200, 1), "quick": (2000, 3), "full": (10000, 5)}
"""``--size`` -> (commits per repetition, repetitions)."""


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def _value(i: int) -> dict[str, Any]:
    return {"name": f"user {i}", "email": f"u{i}@example.com", "visits": i, "tags": ["a", "b"]}


def _summary(latencies: list[float], cpu_s: float, wall_s: float) -> dict[str, float]:
    ordered = sorted(latencies)
    n = len(ordered)
    return {
        "commits_per_s": n / wall_s,
        "cpu_us": cpu_s / n * 1e6,
        "p50_ms": ordered[n // 2] * 1e3,
        "p99_ms": ordered[min(n - 1, int(n * 0.99))] * 1e3,
    }


# ---------------------------------------------------------------------------- one thread


def _ours(path: Path, commits: int) -> dict[str, float]:
    with StateManager(path, config=StateManagerConfig(run_cleaner=False)) as manager:
        store = manager.store("users")
        latencies: list[float] = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(commits):
            start = time.perf_counter()
            store.put(f"user:{i % 1000:04d}", _value(i))
            store.commit()
            latencies.append(time.perf_counter() - start)
        return _summary(latencies, time.process_time() - cpu0, time.perf_counter() - wall0)


def _sqlite_open(path: Path) -> sqlite3.Connection:
    path.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path / "kv.sqlite", isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB) WITHOUT ROWID")
    return db


def _sqlite(path: Path, commits: int) -> dict[str, float]:
    db = _sqlite_open(path)
    pack = msgpack.Packer(autoreset=True, use_bin_type=True).pack
    latencies: list[float] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(commits):
        start = time.perf_counter()
        db.execute("BEGIN")
        db.execute(
            "INSERT OR REPLACE INTO kv VALUES (?, ?)", (f"user:{i % 1000:04d}", pack(_value(i)))
        )
        db.execute("COMMIT")
        latencies.append(time.perf_counter() - start)
    result = _summary(latencies, time.process_time() - cpu0, time.perf_counter() - wall0)
    db.close()
    return result


def _floor(path: Path, commits: int) -> dict[str, float]:
    import rocksdict  # noqa: PLC0415

    db = raw_open(path / "rocksdb", engine_options())
    options = rocksdict.WriteOptions()
    options.disable_wal = True  # type: ignore[method-assign,assignment]
    pack = msgpack.Packer(autoreset=True, use_bin_type=True).pack
    fd = os.open(path / "append.log", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, bytes(commits * 256))  # preallocated, zero-filled, as our active segment
    os.fsync(fd)
    position = 0
    datasync = getattr(os, "fdatasync", os.fsync)  # as changelog.fs.files.fdatasync_fd
    latencies: list[float] = []
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(commits):
            start = time.perf_counter()
            key, value = f"user:{i % 1000:04d}".encode(), pack(_value(i))
            position += os.pwrite(fd, key + value, position)
            datasync(fd)
            batch = rocksdict.WriteBatch(raw_mode=True)
            batch.put(key, value)
            db.write(batch, options)
            latencies.append(time.perf_counter() - start)
        return _summary(latencies, time.process_time() - cpu0, time.perf_counter() - wall0)
    finally:
        os.close(fd)
        db.close()


def _rocksdict_sync(path: Path, commits: int) -> dict[str, float]:
    """Raw rocksdict with statestore's options, its own WAL on, ``sync=True``: one put a commit."""
    import rocksdict  # noqa: PLC0415

    db = raw_open(path / "rocksdb", engine_options())
    options = rocksdict.WriteOptions()
    options.sync = True  # type: ignore[method-assign,assignment]
    pack = msgpack.Packer(autoreset=True, use_bin_type=True).pack
    latencies: list[float] = []
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(commits):
            start = time.perf_counter()
            db.put(f"user:{i % 1000:04d}".encode(), pack(_value(i)), options)
            latencies.append(time.perf_counter() - start)
        return _summary(latencies, time.process_time() - cpu0, time.perf_counter() - wall0)
    finally:
        db.close()


def _lmdb(path: Path, commits: int) -> dict[str, float]:
    """lmdb with ``sync=True`` (its default): one write transaction a commit."""
    import lmdb  # type: ignore[import-not-found]  # noqa: PLC0415 - optional baseline

    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path / "lmdb"), map_size=1 << 30, sync=True)
    pack = msgpack.Packer(autoreset=True, use_bin_type=True).pack
    latencies: list[float] = []
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(commits):
            start = time.perf_counter()
            with env.begin(write=True) as txn:
                txn.put(f"user:{i % 1000:04d}".encode(), pack(_value(i)))
            latencies.append(time.perf_counter() - start)
        return _summary(latencies, time.process_time() - cpu0, time.perf_counter() - wall0)
    finally:
        env.close()


def _have_lmdb() -> bool:
    try:
        import lmdb  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def case_one_put(commits: int, reps: int) -> list[Result]:
    makers: dict[str, Callable[[Path, int], dict[str, float]]] = {
        "statestore": _ours,
        "sqlite": _sqlite,
        "floor": _floor,
        "rocksdict sync": _rocksdict_sync,
    }
    if _have_lmdb():
        makers["lmdb"] = _lmdb
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in makers}
    for rep in range(reps):
        order = list(makers)[rep % len(makers) :] + list(makers)[: rep % len(makers)]
        for name in order:
            with scratch_dir(f"commit-{name}") as path:
                runs[name].append(makers[name](path / "d", commits))
    med = {name: _median_dicts(rows) for name, rows in runs.items()}
    results = []
    for metric, unit, higher in (
        ("commits_per_s", "commits/s", True),
        ("cpu_us", "us CPU/commit", False),
        ("p50_ms", "ms p50", False),
        ("p99_ms", "ms p99", False),
    ):
        for base in [name for name in makers if name != "statestore"]:
            results.append(
                Result(
                    f"one put + commit: {metric} vs {base}",
                    med["statestore"][metric],
                    unit,
                    base,
                    med[base][metric],
                    group="commit",
                    note=f"load {_load()}; {'higher' if higher else 'lower'} is better",
                )
            )
    return results


def _median_dicts(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {key: sorted(row[key] for row in rows)[len(rows) // 2] for key in rows[0]}


# ---------------------------------------------------------------------------- threads


class _FsyncCounter:
    """Fault hook: counts segment fsyncs (and delays each by ``delay_s``: a slow disk)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, step: str, path: Path) -> None:
        if step == "segment.flush":
            with self._lock:
                self.count += 1
            if self.delay_s:
                time.sleep(self.delay_s)


def _threads_ours(path: Path, threads: int, per_thread: int, delay_s: float) -> tuple[float, float]:
    counter = _FsyncCounter(delay_s)
    with StateManager(path, config=StateManagerConfig(run_cleaner=False)) as manager:
        store = manager.store("users")
        barrier = threading.Barrier(threads + 1)

        def work(t: int) -> None:
            barrier.wait()
            for i in range(per_thread):
                store.put(f"t{t}:{i % 100}", _value(i))
                store.commit()

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        with files.inject_faults(counter):
            barrier.wait()
            start = time.perf_counter()
            for worker in workers:
                worker.join()
            wall = time.perf_counter() - start
    commits = threads * per_thread
    return commits / wall, counter.count / commits


def _threads_sqlite(path: Path, threads: int, per_thread: int) -> float:
    _sqlite_open(path).close()
    barrier = threading.Barrier(threads + 1)

    def work(t: int) -> None:
        db = _sqlite_open(path)
        db.execute("PRAGMA busy_timeout=60000")
        pack = msgpack.Packer(autoreset=True, use_bin_type=True).pack
        barrier.wait()
        for i in range(per_thread):
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "INSERT OR REPLACE INTO kv VALUES (?, ?)", (f"t{t}:{i % 100}", pack(_value(i)))
            )
            db.execute("COMMIT")
        db.close()

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    return threads * per_thread / (time.perf_counter() - start)


def case_threads(commits: int, reps: int, slow_fsync_ms: float) -> list[Result]:
    results = []
    for delay_ms in (0.0, slow_fsync_ms):
        disk = "this disk" if not delay_ms else f"fsync +{delay_ms:g} ms"
        one: list[float] = []
        for threads in (1, 4, 16):
            per_thread = max(10, commits // threads // (10 if delay_ms else 1))
            rates, fsyncs, sq = [], [], []
            for _rep in range(reps):
                with scratch_dir("commit-threads") as path:
                    rate, per_commit = _threads_ours(
                        path / "d", threads, per_thread, delay_ms / 1e3
                    )
                rates.append(rate)
                fsyncs.append(per_commit)
                if not delay_ms:
                    with scratch_dir("commit-threads-sqlite") as path:
                        sq.append(_threads_sqlite(path / "d", threads, per_thread))
            rate = sorted(rates)[len(rates) // 2]
            if threads == 1:
                one.append(rate)
            results.append(
                Result(
                    f"{threads} threads, one store, {disk}: commits/s",
                    rate,
                    "commits/s",
                    "sqlite (a connection a thread)" if sq else "statestore, 1 thread",
                    sorted(sq)[len(sq) // 2] if sq else one[0],
                    group="commit",
                    note=f"load {_load()}",
                )
            )
            results.append(
                Result(
                    f"{threads} threads, one store, {disk}: fsyncs per commit",
                    sorted(fsyncs)[len(fsyncs) // 2],
                    "fsyncs/commit",
                    group="commit",
                    note=f"load {_load()}",
                )
            )
    return results


# ---------------------------------------------------------------------------- asyncio


def case_aio(commits: int, reps: int) -> list[Result]:
    from statestore.aio import AsyncStateManager  # noqa: PLC0415

    async def one(path: Path, tasks: int) -> tuple[float, float]:
        counter = _FsyncCounter(0.0)
        async with await AsyncStateManager.open(
            path, config=StateManagerConfig(run_cleaner=False)
        ) as manager:
            store = await manager.store("users")
            per_task = max(10, commits // tasks)

            async def work(t: int) -> None:
                for i in range(per_task):
                    await store.put(f"t{t}:{i % 100}", _value(i))

            with files.inject_faults(counter):
                start = time.perf_counter()
                await asyncio.gather(*(work(t) for t in range(tasks)))
                wall = time.perf_counter() - start
        total = tasks * per_task
        return total / wall, counter.count / total

    results = []
    for tasks in (1, 16):
        rates, fsyncs = [], []
        for _rep in range(reps):
            with scratch_dir("commit-aio") as path:
                rate, per_commit = asyncio.run(one(path / "d", tasks))
            rates.append(rate)
            fsyncs.append(per_commit)
        results.append(
            Result(
                f"aio, {tasks} tasks: commits/s",
                sorted(rates)[len(rates) // 2],
                "commits/s",
                group="commit",
                note=f"load {_load()}",
            )
        )
        results.append(
            Result(
                f"aio, {tasks} tasks: fsyncs per commit",
                sorted(fsyncs)[len(fsyncs) // 2],
                "fsyncs/commit",
                group="commit",
                note=f"load {_load()}",
            )
        )
    return results


# ---------------------------------------------------------------------------- python


def case_python(commits: int, reps: int) -> list[Result]:
    real_fsync, real_fdatasync = os.fsync, getattr(os, "fdatasync", None)
    best: dict[str, float] = {}
    os.fsync = lambda _fd: None  # the case's point: everything but the fsync syscall
    os.fdatasync = lambda _fd: None
    try:
        for rep in range(reps):
            order = [("statestore", _ours), ("floor", _floor)]
            for name, run in order if rep % 2 == 0 else order[::-1]:
                with scratch_dir(f"commit-python-{name}") as path:
                    cpu = run(path / "d", commits)["cpu_us"]
                best[name] = min(best.get(name, cpu), cpu)
    finally:
        os.fsync = real_fsync
        if real_fdatasync is None:
            del os.fdatasync
        else:
            os.fdatasync = real_fdatasync
    return [
        Result(
            "one put + commit without the fsync syscall: CPU",
            best["statestore"],
            "us CPU/commit",
            "floor",
            best["floor"],
            group="commit",
            note=f"load {_load()}; best of {reps}; lower is better",
        )
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases; print a table and one line of JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.commit_bench")
    parser.add_argument("--size", choices=sorted(SIZES), default="quick")
    parser.add_argument("--only", action="append", choices=["one_put", "threads", "aio", "python"])
    parser.add_argument("--slow-fsync-ms", type=float, default=2.0)
    args = parser.parse_args(argv)
    commits, reps = SIZES[args.size]
    cases = args.only or ["one_put", "threads", "aio", "python"]
    results: list[Result] = []
    print(f"load before: {_load()}", file=sys.stderr)
    if "one_put" in cases:
        results += case_one_put(commits, reps)
    if "threads" in cases:
        results += case_threads(commits, reps, args.slow_fsync_ms)
    if "aio" in cases:
        results += case_aio(commits, reps)
    if "python" in cases:
        results += case_python(commits, reps)
    print(f"load after: {_load()}", file=sys.stderr)
    print_table(results, title="one put + commit")
    emit_json("commit", results, extra={"machine": machine_info(), "size": args.size})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
