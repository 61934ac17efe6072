"""What a commit costs (issue 14, part 7): single-store, multi-store, and committing threads.

Cases (``--only NAME``, repeatable; default: all):

==========  ==============================================================================
case        what is measured (baseline)
==========  ==============================================================================
single      put x ``commit_every`` + ``store.commit()`` into one store, default fsync
            policy (the durable floor: raw rocksdict WriteBatch of the same records with
            statestore's RocksDB options and block cache, WAL off, plus an ``os.write`` of
            the same key and value bytes to a file and an ``os.fsync`` per commit:
            :func:`benchmarks.baselines.raw_put_durable`).  Target: >= 0.9x.
multi       the same records per commit spread over ``stores`` stores, committed by
            ``manager.commit()`` (against the single-store commit of the same records, and
            against one fsync's latency: how many sequential fsync rounds a commit costs)
threads     1, 4 and 16 threads each committing small commits (``small_records`` records),
            with group commit and without it (``GroupCommit.sharing = False``: every
            commit pays its own fsync, as before group commit): (a) every thread appends
            to ONE changelog partition (``Log.append``, the primitive); (b) every thread
            commits its OWN store (``store.commit()``); (c) every thread runs transactions
            over two stores of its own, scoped (``manager.transaction(d, p)``: threads'
            transactions run concurrently) and (d) unscoped (``manager.transaction()``:
            every block's end commits every store, so they merge and take turns)
==========  ==============================================================================

Method: every timed section runs with the garbage collector on, on real files with real
fsync (``STATESTORE_BENCH_DIR`` or /tmp).  Repetitions are interleaved and their order
rotates each repetition; medians are reported with the CPU-time ratio beside the wall-clock
one, and the 1-minute load average is printed before and after every case (on this shared
2-core machine a ratio taken at load > 2 is a hint, not a verdict).  ``multi`` says in its
name whether ``manager.commit()`` is the per-store loop (atomic per partition only) or the
transaction coordinator's atomic commit, whichever the installed statestore does.

Run it through the runner (``python -m benchmarks.run --only txn``) or alone:
``python -m benchmarks.txn_bench --size quick``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import baselines
from benchmarks._harness import (
    Result,
    Stopwatch,
    Target,
    Timing,
    emit_json,
    machine_info,
    make_keys,
    make_values,
    median,
    median_of,
    print_table,
    rate_result,
    scratch_dir,
)
from benchmarks.store_bench import write_store

__all__ = ["CASES", "TxnSizes", "main"]


@dataclass(frozen=True)
class TxnSizes:
    """Workload sizes of this script."""

    single_records: int
    commit_every: int
    reps: int
    stores: int
    multi_commits: int
    thread_counts: tuple[int, ...]
    thread_commits: int
    """Commits per thread in the ``threads`` case."""
    small_records: int
    """Records per commit in the ``threads`` case."""
    fsync_probes: int

    @classmethod
    def named(cls, name: str) -> TxnSizes:
        if name == "full":
            return cls(200_000, 1000, 7, 4, 300, (1, 4, 16), 150, 10, 300)
        if name == "quick":
            return cls(20_000, 1000, 2, 4, 60, (1, 4, 16), 30, 10, 100)
        return cls(2_000, 500, 1, 3, 8, (1, 4), 5, 5, 20)


# ------------------------------------------------------------------ the statestore API, in one place


@contextmanager
def _manager(state_dir: Path) -> Iterator[Any]:
    from statestore.config import StateManagerConfig  # noqa: PLC0415
    from statestore.manager import StateManager  # noqa: PLC0415

    with StateManager(state_dir, config=StateManagerConfig(run_cleaner=False)) as manager:
        yield manager


def _store(manager: Any, name: str) -> Any:
    from statestore.serdes import BytesSerde, MsgpackSerde  # noqa: PLC0415

    return manager.store(name, key_serde=BytesSerde(), value_serde=MsgpackSerde())


@contextmanager
def _manager_probe() -> Iterator[bool]:
    """Whether the installed manager has ``transaction()`` (the coordinator of issue 14)."""
    from statestore.manager import StateManager  # noqa: PLC0415

    yield hasattr(StateManager, "transaction")


def _commit_mode(manager: Any) -> str:
    """Which multi-store commit the installed statestore does."""
    return "transaction" if hasattr(manager, "transaction") else "per-store loop"


def _changelogs(manager: Any) -> list[Any]:
    """Every changelog of the open stores, and the coordinator's log if there is one."""
    logs = [log for store in manager.stores.values() for log in store.changelogs]
    coordinator = getattr(manager, "coordinator", None)
    if coordinator is not None:
        logs.append(coordinator.log)
    return logs


def _fsyncs(logs: Sequence[Any]) -> int:
    return sum(log.group_commit.flushes for log in logs)


# ------------------------------------------------------------------ helpers


def _load() -> float:
    return round(os.getloadavg()[0], 2)


_med = median_of
_rate = functools.partial(rate_result, group="txn")


def _rotated(fns: Sequence[Callable[[], None]], rep: int) -> list[Callable[[], None]]:
    k = rep % len(fns)
    return [*fns[k:], *fns[:k]]


def fsync_latency_s(directory: Path, probes: int) -> float:
    """Median seconds of ``os.write`` of 100 bytes + ``os.fsync`` on this disk, now."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    samples: list[float] = []
    try:
        for _ in range(probes):
            t0 = time.perf_counter()
            os.write(fd, b"x" * 100)
            os.fsync(fd)
            samples.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(samples)


# ------------------------------------------------------------------ single


def case_single(sz: TxnSizes, log: list[str]) -> list[Result]:
    n = sz.single_records
    keys = make_keys(n)
    values = make_values(n)
    ours: list[Timing] = []
    floor: list[Timing] = []
    loads: list[float] = []
    for rep in range(sz.reps):
        with scratch_dir("txn-single") as d:

            def run_ours(d: Path = d) -> None:
                with _manager(d / "ss") as manager:
                    store = _store(manager, "s")
                    sw = Stopwatch().start()
                    write_store(store, keys, values, commit_every=sz.commit_every)
                    ours.append(sw.stop())

            def run_floor(d: Path = d) -> None:
                floor.append(
                    baselines.raw_put_durable(
                        d / "floor",
                        keys,
                        values,
                        commit_every=sz.commit_every,
                        options=baselines.engine_options(),
                    )
                )

            for fn in _rotated([run_ours, run_floor], rep):
                fn()
        loads.append(_load())
    ratios = [f.wall / o.wall for o, f in zip(ours, floor, strict=True)]
    log.append(
        f"single: per-rep ratios {[round(r, 3) for r in ratios]}, load after each rep {loads}"
    )
    return [
        _rate(
            f"put + commit/{sz.commit_every:,}, one store",
            n,
            "rec/s",
            ours,
            "durable floor: raw WriteBatch + fsynced append of the same bytes",
            floor,
            Target("ratio>=", 0.9),
            note=f"same RocksDB options and cache; {sz.reps} interleaved reps; load {min(loads)}-{max(loads)}",
        )
    ]


# ------------------------------------------------------------------ multi


def case_multi(sz: TxnSizes, log: list[str]) -> list[Result]:
    per_store = max(1, sz.commit_every // sz.stores)
    total_per_commit = per_store * sz.stores
    commits = sz.multi_commits
    n = commits * total_per_commit
    keys = make_keys(n)
    values = make_values(n)
    multi: list[Timing] = []
    single: list[Timing] = []
    fsyncs_per_commit: list[float] = []
    fsync_s: list[float] = []
    mode = "?"
    for rep in range(sz.reps):
        with scratch_dir("txn-multi") as d:

            def run_multi(d: Path = d) -> None:
                nonlocal mode
                with _manager(d / "multi") as manager:
                    mode = _commit_mode(manager)
                    stores = [_store(manager, f"m{s}") for s in range(sz.stores)]
                    before = _fsyncs(_changelogs(manager))
                    i = 0
                    sw = Stopwatch().start()
                    for _ in range(commits):
                        for store in stores:
                            put = store.put
                            for _ in range(per_store):
                                put(keys[i], values[i])
                                i += 1
                        manager.commit()
                    multi.append(sw.stop())
                    fsyncs_per_commit.append((_fsyncs(_changelogs(manager)) - before) / commits)

            def run_single(d: Path = d) -> None:
                with _manager(d / "single") as manager:
                    store = _store(manager, "s")
                    sw = Stopwatch().start()
                    write_store(store, keys, values, commit_every=total_per_commit)
                    single.append(sw.stop())

            def probe(d: Path = d) -> None:
                fsync_s.append(fsync_latency_s(d, sz.fsync_probes))

            for fn in _rotated([run_multi, run_single, probe], rep):
                fn()
    commit_s = _med(multi) / commits
    rounds = commit_s / median(fsync_s)
    log.append(
        f"multi ({mode}): {commit_s * 1e3:.2f} ms per commit of {sz.stores} stores, "
        f"one fsync {median(fsync_s) * 1e6:.0f} us -> {rounds:.1f} fsync-times per commit; "
        f"changelog fsyncs per commit {median(fsyncs_per_commit):.1f}"
    )
    return [
        _rate(
            f"commit of {sz.stores} stores x {per_store} records ({mode})",
            n,
            "rec/s",
            multi,
            f"one store, {total_per_commit} records per commit",
            single,
            note=(
                f"{commit_s * 1e3:.2f} ms/commit = {rounds:.1f}x one fsync "
                f"({median(fsync_s) * 1e6:.0f} us); changelog fsyncs/commit "
                f"{median(fsyncs_per_commit):.1f}"
            ),
        )
    ]


# ------------------------------------------------------------------ threads


def _threads(count: int, work: Callable[[int], None]) -> Timing:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count + 1)

    def run(t: int) -> None:
        barrier.wait()
        try:
            work(t)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(count)]
    for thread in threads:
        thread.start()
    sw = Stopwatch().start()
    barrier.wait()
    for thread in threads:
        thread.join()
    timing = sw.stop()
    if errors:
        raise errors[0]
    return timing


def _log_threads(d: Path, count: int, sz: TxnSizes, *, sharing: bool) -> tuple[Timing, int]:
    from changelog.log.log import Log  # noqa: PLC0415

    pairs = [(b"t%02d-k%06d" % (0, i), b"v" * 100) for i in range(sz.small_records)]
    with Log.open(d / f"threads-{count}-{int(sharing)}-0") as log:
        log.group_commit.sharing = sharing

        def work(_t: int) -> None:
            append = log.append
            for _ in range(sz.thread_commits):
                append(pairs)

        timing = _threads(count, work)
        return timing, log.group_commit.flushes


def _store_threads(d: Path, count: int, sz: TxnSizes, *, sharing: bool) -> tuple[Timing, int]:
    with _manager(d / f"stores-{count}-{int(sharing)}") as manager:
        stores = [_store(manager, f"t{t:02d}") for t in range(count)]
        logs = _changelogs(manager)
        for log in logs:
            log.group_commit.sharing = sharing
        before = _fsyncs(logs)
        value = {"v": "x" * 80}

        def work(t: int) -> None:
            store = stores[t]
            put = store.put
            i = 0
            for _ in range(sz.thread_commits):
                for _ in range(sz.small_records):
                    put(b"k%08d" % i, value)
                    i += 1
                store.commit()

        timing = _threads(count, work)
        return timing, _fsyncs(logs) - before


def _compare_threads(
    runner: Callable[..., tuple[Timing, int]], count: int, sz: TxnSizes
) -> tuple[list[Timing], list[Timing], list[int], list[int]]:
    """``runner`` with group commit on and off, interleaved: timings and fsync counts."""
    with_gc: list[Timing] = []
    without: list[Timing] = []
    flushes_with: list[int] = []
    flushes_without: list[int] = []
    for rep in range(sz.reps):
        with scratch_dir("txn-threads") as d:

            def on(d: Path = d) -> None:
                timing, flushes = runner(d, count, sz, sharing=True)
                with_gc.append(timing)
                flushes_with.append(flushes)

            def off(d: Path = d) -> None:
                timing, flushes = runner(d, count, sz, sharing=False)
                without.append(timing)
                flushes_without.append(flushes)

            for fn in _rotated([on, off], rep):
                fn()
    return with_gc, without, flushes_with, flushes_without


def _txn_threads(
    d: Path, count: int, sz: TxnSizes, *, sharing: bool, scoped: bool = True
) -> tuple[Timing, int]:
    """Each thread: transactions over two stores of its own (data + position).

    ``scoped``: ``manager.transaction(data, position)`` (the block covers its two stores, so
    threads' transactions run concurrently); else ``manager.transaction()`` (each block's end
    commits every store: the threads' transactions merge and take turns).
    """
    with _manager(d / f"txn-{count}-{int(sharing)}-{int(scoped)}") as manager:
        pairs = [(_store(manager, f"d{t:02d}"), _store(manager, f"p{t:02d}")) for t in range(count)]
        logs = _changelogs(manager)
        for log in logs:
            log.group_commit.sharing = sharing
        before = _fsyncs(logs)
        value = {"v": "x" * 80}
        scoped = scoped and _has_scoped_blocks(manager)

        def work(t: int) -> None:
            data, position = pairs[t]
            put = data.put
            stores = (data, position) if scoped else ()
            i = 0
            for n in range(sz.thread_commits):
                with manager.transaction(*stores):
                    for _ in range(sz.small_records - 1):
                        put(b"k%08d" % i, value)
                        i += 1
                    position.put(b"position", n)

        timing = _threads(count, work)
        return timing, _fsyncs(logs) - before


def _txn_threads_unscoped(
    d: Path, count: int, sz: TxnSizes, *, sharing: bool
) -> tuple[Timing, int]:
    return _txn_threads(d, count, sz, sharing=sharing, scoped=False)


def _has_scoped_blocks(manager: Any) -> bool:
    """Whether the installed manager's ``transaction()`` takes the stores it covers."""
    import inspect  # noqa: PLC0415

    return any(
        p.kind is inspect.Parameter.VAR_POSITIONAL
        for p in inspect.signature(manager.transaction).parameters.values()
    )


def case_threads(sz: TxnSizes, log: list[str]) -> list[Result]:
    out: list[Result] = []
    runners: list[tuple[str, Callable[..., tuple[Timing, int]]]] = [
        ("one log, Log.append", _log_threads),
        ("own store", _store_threads),
    ]
    with _manager_probe() as has_transactions:
        if has_transactions:
            runners.append(("transaction(d, p) over 2 own stores", _txn_threads))
            runners.append(("transaction() unscoped, 2 own stores", _txn_threads_unscoped))
    for level, runner in runners:
        for count in sz.thread_counts:
            with_gc, without, flushes_with, flushes_without = _compare_threads(runner, count, sz)
            commits = count * sz.thread_commits
            per_with = median(flushes_with) / commits
            per_without = median(flushes_without) / commits
            cpu_us = _med(with_gc, "cpu") / commits * 1e6
            log.append(
                f"threads ({level}) x{count}: fsyncs per commit with group commit "
                f"{per_with:.2f}, without {per_without:.2f}; process CPU per commit "
                f"{cpu_us:.0f} us (with the GIL, about one core's worth is the ceiling)"
            )
            out.append(
                _rate(
                    f"{count} thread(s) committing {sz.small_records} records ({level})",
                    commits,
                    "commit/s",
                    with_gc,
                    "same, group commit off (one fsync per commit)",
                    without,
                    note=(
                        f"fsyncs/commit {per_with:.2f} vs {per_without:.2f}"
                        + ("; separate logs: nothing to share" if level == "own store" else "")
                    ),
                )
            )
    return out


CASES: dict[str, Callable[[TxnSizes, list[str]], list[Result]]] = {
    "single": case_single,
    "multi": case_multi,
    "threads": case_threads,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.txn_bench")
    parser.add_argument("--size", choices=("full", "quick", "tiny"), default="full")
    parser.add_argument("--quick", action="store_const", const="quick", dest="size")
    parser.add_argument("--tiny", action="store_const", const="tiny", dest="size")
    parser.add_argument("--only", action="append", default=[], choices=sorted(CASES))
    parser.add_argument("--reps", type=int, default=None, help="override the repetitions")
    args = parser.parse_args(argv)
    sz = TxnSizes.named(args.size)
    if args.reps is not None:
        sz = TxnSizes(**{**sz.__dict__, "reps": args.reps})
    names = list(dict.fromkeys(args.only)) or list(CASES)
    results: list[Result] = []
    notes: list[str] = []
    loads: dict[str, list[float]] = {}
    for name in names:
        before = _load()
        print(f"[txn_bench] {name} ({args.size}, reps={sz.reps}, load {before}) ...", flush=True)
        case_results = CASES[name](sz, notes)
        loads[name] = [before, _load()]
        print_table(case_results)
        print(f"  (load average before/after: {loads[name]})", flush=True)
        results.extend(case_results)
    print_table(results, title=f"txn_bench ({args.size}, reps={sz.reps}, medians)")
    for line in notes:
        print(f"  {line}")
    emit_json(
        "txn",
        results,
        extra={
            "size": args.size,
            "reps": sz.reps,
            "notes": notes,
            "loadavg_before_after_case": loads,
            "machine": machine_info(),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
