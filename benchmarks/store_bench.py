"""The statestore side of the benchmark suite, each case against a same-run baseline.

Cases (``--only NAME``, repeatable; default: all):

=============  ===========================================================================
case           what is measured (baseline)
=============  ===========================================================================
put            logged put, ~100-byte msgpack values, commit every 1,000, default fsync
               policy (raw rocksdict WriteBatch of 1,000, WAL off; quixstreams' put)
get            point get of a random key, value unpacked (raw ``get`` + ``unpackb``;
               quixstreams' ``tx.get``), in a settled store and in a live one: a store
               with every default setting, read right after it was written, against raw
               rocksdict with *its* defaults written the same way (and with the store's
               options), the reads interleaved in chunks
range          ``store.range(lo, hi)`` over ``range_span`` keys (raw seek + iterate)
restore        full restore of a changelog of ``restore_keys`` live keys written in random
               key order (raw WriteBatch load of the same pairs; quixstreams' recovery)
incremental    reopen after ``kill -9`` with ``restore_mode="incremental"``: replays the
               unflushed tail only (raw WriteBatch load of the tail)
updates        full restore with ``updates_per_key`` updates per key, rolled and compacted,
               against the same keys written once; and the changelog's disk size after
               compaction against the live key+value bytes
compaction     cleaning a log several times larger than the dedupe buffer, in a child
               process: records/s and MB/s read, peak RSS against buffer + 100 MB
concurrent     writer throughput while a compaction runs in a background thread of the same
               process (as the manager's cleaner runs), against the writer alone
=============  ===========================================================================

Every timed section runs with the garbage collector on, on real files with real fsync.
Repetitions are interleaved (statestore, raw, quix, statestore, ...) and medians reported.
Run it through the runner (``python -m benchmarks.run``) or alone:
``python -m benchmarks.store_bench --size quick --only put``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack

from benchmarks import baselines
from benchmarks._harness import (
    BenchSizes,
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
    time_result,
    timed_both,
)

__all__ = ["CASES", "main"]

ROOT = Path(__file__).resolve().parent.parent
MB = 1024 * 1024

# ------------------------------------------------------------------ the statestore API, in one place
# Everything the suite knows about statestore's API is in these few functions.


def _imports() -> dict[str, Any]:
    from changelog.config import CleanerConfig, LogConfig  # noqa: PLC0415
    from statestore.config import RocksDBConfig, StateManagerConfig, StoreConfig  # noqa: PLC0415
    from statestore.manager import StateManager  # noqa: PLC0415
    from statestore.serdes import BytesSerde, MsgpackSerde  # noqa: PLC0415

    return {
        "CleanerConfig": CleanerConfig,
        "LogConfig": LogConfig,
        "RocksDBConfig": RocksDBConfig,
        "StateManagerConfig": StateManagerConfig,
        "StoreConfig": StoreConfig,
        "StateManager": StateManager,
        "BytesSerde": BytesSerde,
        "MsgpackSerde": MsgpackSerde,
    }


@contextmanager
def open_manager(state_dir: Path, *, cleaner_buffer_bytes: int | None = None) -> Iterator[Any]:
    """A StateManager with the background cleaner off (cases run the cleaner explicitly)."""
    api = _imports()
    cleaner = api["CleanerConfig"](
        **(
            {}
            if cleaner_buffer_bytes is None
            else {"dedupe_buffer_size_bytes": cleaner_buffer_bytes}
        )
    )
    config = api["StateManagerConfig"](run_cleaner=False, cleaner=cleaner)
    with api["StateManager"](state_dir, config=config) as mgr:
        yield mgr


def open_store(
    mgr: Any,
    name: str = "bench",
    *,
    restore_mode: str = "full",
    flush_interval_records: int | None = None,
    write_buffer_size_bytes: int | None = None,
) -> Any:
    """``mgr.store(name)`` with bytes keys and msgpack values; opening restores."""
    api = _imports()
    store_kw: dict[str, Any] = {"restore_mode": restore_mode}
    if flush_interval_records is not None:
        store_kw["flush_interval_records"] = flush_interval_records
    rocks_kw: dict[str, Any] = {}
    if write_buffer_size_bytes is not None:
        rocks_kw["write_buffer_size_bytes"] = write_buffer_size_bytes
    return mgr.store(
        name,
        key_serde=api["BytesSerde"](),
        value_serde=api["MsgpackSerde"](),
        config=api["StoreConfig"](**store_kw),
        rocksdb=api["RocksDBConfig"](**rocks_kw),
    )


def changelog_of(store: Any) -> Any:
    return store.changelog


def clean_fully(log: Any, *, buffer_bytes: int | None = None) -> list[Any]:
    """Run cleaning passes until the log has nothing left to clean; return each pass's stats."""
    from changelog.cleaner.clean import clean_log  # noqa: PLC0415
    from changelog.config import CleanerConfig  # noqa: PLC0415

    config = CleanerConfig(
        **({} if buffer_bytes is None else {"dedupe_buffer_size_bytes": buffer_bytes})
    )
    passes: list[Any] = []
    while True:
        stats = clean_log(log, force=True, config=config)
        if stats is None or (passes and stats.records_read == 0 and stats.map_records_read == 0):
            break
        passes.append(stats)
        if stats.end_offset >= stats.first_uncleanable_offset:
            break
        if len(passes) > 1000:
            raise RuntimeError("cleaner does not converge")
    return passes


# ------------------------------------------------------------------ workload helpers


def write_store(
    store: Any,
    keys: Sequence[bytes],
    values: Sequence[Any],
    *,
    commit_every: int,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Put ``keys[i] -> values[i]`` committing every ``commit_every``; return records written."""
    put = store.put
    commit = store.commit
    n = len(keys)
    done = 0
    for start in range(0, n, commit_every):
        end = min(start + commit_every, n)
        for i in range(start, end):
            put(keys[i], values[i])
        commit()
        done = end
        if stop is not None and stop():
            break
    return done


def packed_pairs(keys: Sequence[bytes], values: Sequence[Any]) -> list[tuple[bytes, bytes]]:
    pack = msgpack.Packer().pack
    return [(k, pack(v)) for k, v in zip(keys, values, strict=True)]


def _alloc_bytes(path: Path) -> int:
    """Bytes the file system allocated (preallocated sparse index files count as used blocks)."""
    return path.stat().st_blocks * 512


# ------------------------------------------------------------------ put, get, range


QUIX_NOTE = "quix: WAL on but never fsynced, no changelog (statestore fsyncs every commit)"


def case_put(sz: BenchSizes, reps: int) -> list[Result]:
    keys = make_keys(sz.put_records)
    values = make_values(sz.put_records)
    n = len(keys)
    ss: list[Timing] = []
    raw: list[Timing] = []
    raw_same: list[Timing] = []
    floor: list[Timing] = []
    quix: list[Timing] = []
    have_quix = baselines.quix_available()
    for _ in range(reps):
        with scratch_dir("put") as d:
            with open_manager(d / "ss") as mgr:
                store = open_store(mgr)
                with timed_both(ss):
                    write_store(store, keys, values, commit_every=sz.commit_every)
            raw.append(baselines.raw_put(d / "raw", keys, values, commit_every=sz.commit_every))
            raw_same.append(
                baselines.raw_put(
                    d / "raw-same",
                    keys,
                    values,
                    commit_every=sz.commit_every,
                    options=baselines.engine_options(),
                )
            )
            floor.append(
                baselines.raw_put_durable(
                    d / "raw-durable",
                    keys,
                    values,
                    commit_every=sz.commit_every,
                    options=baselines.engine_options(),
                )
            )
            if have_quix:
                quix.append(
                    baselines.quix_put(d / "quix", keys, values, commit_every=sz.commit_every)
                )
    name = "put (logged, commit/1,000, fsync)"
    out = [
        rate_result(
            name,
            n,
            "rec/s",
            ss,
            "durable floor: raw put + fsynced append, same options",
            floor,
            Target("ratio>=", 0.9),
            note="raw WriteBatch of 1,000 (WAL off) + os.write of the same bytes + os.fsync per commit",
        ),
        rate_result(
            name,
            n,
            "rec/s",
            ss,
            "raw put, statestore's RocksDB options (no fsync)",
            raw_same,
            note="never fsyncs: not durable",
        ),
        rate_result(
            name,
            n,
            "rec/s",
            ss,
            "raw rocksdict put, default options (no fsync)",
            raw,
            Target("ratio>=", 0.6),
            note="never fsyncs: not durable",
        ),
    ]
    if have_quix:
        out.append(
            rate_result(
                name,
                n,
                "rec/s",
                ss,
                "quixstreams put (no log, no fsync)",
                quix,
                Target("ratio>=", 1.5),
                note=QUIX_NOTE,
            )
        )
    return out


def case_get_range(sz: BenchSizes, reps: int, *, do_get: bool, do_range: bool) -> list[Result]:
    n = max(sz.get_records, sz.range_span * 2)
    keys = make_keys(n)
    values = make_values(n)
    lookups = make_keys(n, seed=99)  # the same key set, another random order
    sorted_keys = sorted(keys)
    rng = random.Random(5)
    span = sz.range_span
    bounds = []
    for _ in range(sz.range_scans):
        i = rng.randrange(n - span)
        bounds.append((sorted_keys[i], sorted_keys[i + span]))
    # prefix scans: b"user:" + 10 of the 12 digits, i.e. 100 keys each (the keys are dense)
    prefixes = [b"user:%010d" % rng.randrange(n // 100) for _ in range(sz.range_scans)]
    prefix_bounds = [(p, p[:-1] + bytes([p[-1] + 1])) for p in prefixes]
    have_quix = baselines.quix_available()
    g_ss: list[Timing] = []
    g_raw: list[Timing] = []
    g_quix: list[Timing] = []
    g_multi: list[Timing] = []
    g_many: list[Timing] = []
    r_ss: list[Timing] = []
    r_raw: list[Timing] = []
    p_ss: list[Timing] = []
    p_raw: list[Timing] = []
    with scratch_dir("get") as d:
        baselines.raw_put(
            d / "raw",
            keys,
            values,
            commit_every=sz.commit_every,
            options=baselines.engine_options(),
        )
        if have_quix:
            baselines.quix_put(d / "quix", keys, values, commit_every=sz.commit_every)
        with open_manager(d / "ss") as mgr:
            write_store(open_store(mgr), keys, values, commit_every=sz.commit_every)
        # Both sides read a database that was closed and reopened (data in SST files, not
        # in a warm memtable): statestore restores and flushes on open, raw was closed.
        # Raw is written and reopened with statestore's options and block cache size.
        with open_manager(d / "ss") as mgr:
            store = open_store(mgr)
            db = baselines.raw_open(d / "raw", baselines.engine_options())
            # Both settled first: statestore's full restore has RocksDB compact its level 0
            # in the background, and raw's reopen may compact too (see baselines.settle).
            baselines.settle(db, baselines.store_db(store))
            cache_mib = baselines.block_cache_bytes(db) / MB
            part = baselines.quix_open(d / "quix") if have_quix else None
            try:
                for _ in range(reps):
                    if do_get:
                        get = store.get
                        with timed_both(g_ss):
                            for k in lookups:
                                if get(k) is None:
                                    raise KeyError(k)
                        g_raw.append(baselines.raw_get(db, lookups))
                        g_multi.append(baselines.raw_multi_get(db, lookups))
                        get_many = store.get_many
                        with timed_both(g_many):
                            for start in range(0, n, 1000):
                                if None in get_many(lookups[start : start + 1000]):
                                    raise KeyError(start)
                        if part is not None:
                            g_quix.append(baselines.quix_get(part, lookups))
                    if do_range:
                        scan = store.range
                        with timed_both(r_ss):
                            for lo, hi in bounds:
                                got = 0
                                for _kv in scan(lo, hi):
                                    got += 1
                                if got != span:
                                    raise AssertionError(f"range returned {got}, expected {span}")
                        r_raw.append(baselines.raw_range(db, bounds))
                        prefix_scan = store.prefix_scan
                        with timed_both(p_ss):
                            for p in prefixes:
                                got = 0
                                for _kv in prefix_scan(p):
                                    got += 1
                                if got != 100:
                                    raise AssertionError(
                                        f"prefix scan returned {got}, expected 100"
                                    )
                        p_raw.append(baselines.raw_range(db, prefix_bounds))
            finally:
                db.close()
                if part is not None:
                    part.close()
    out: list[Result] = []
    if do_get:
        name = "get (random key, unpacked)"
        same = f"same options, raw block cache {cache_mib:g} MiB after reopen"
        out.append(
            rate_result(
                name,
                n,
                "get/s",
                g_ss,
                "raw get + unpackb",
                g_raw,
                Target("ratio>=", 0.9),
                note=same,
            )
        )
        out.append(
            rate_result(
                name,
                n,
                "get/s",
                g_ss,
                "raw multi-get (1,000 per call) + unpackb",
                g_multi,
                note=same,
            )
        )
        out.append(
            rate_result(
                "get_many (1,000 keys per call, unpacked)",
                n,
                "get/s",
                g_many,
                "raw multi-get (1,000 per call) + unpackb",
                g_multi,
                Target("ratio>=", 0.9),
                note=same,
            )
        )
        if have_quix:
            out.append(
                rate_result(name, n, "get/s", g_ss, "quixstreams tx.get", g_quix, note=QUIX_NOTE)
            )
    if do_range:
        items = len(bounds) * span
        out.append(
            rate_result(
                f"range scan ({span} keys each)",
                items,
                "items/s",
                r_ss,
                "raw iterate + unpackb",
                r_raw,
                Target("ratio>=", 0.8),
                note="same options and block cache",
            )
        )
        out.append(
            rate_result(
                "prefix scan (100 keys each)",
                len(prefixes) * 100,
                "items/s",
                p_ss,
                "raw iterate to the prefix's upper bound + unpackb",
                p_raw,
                Target("ratio>=", 0.8),
                note="same options and block cache",
            )
        )
    return out


LIVE_CHUNKS = 20
"""The live get case reads every key once, in this many chunks; each chunk runs on every side
back to back (the side that goes first rotating), so a change of the machine's load hits all
sides of a chunk alike."""


def case_get_live(sz: BenchSizes, reps: int) -> list[Result]:
    """``get`` in a store being written, as a service reads the store it writes.

    Per repetition, in fresh directories: a store opened with every default setting (the
    manager's background cleaner included) is written in commits of ``commit_every``; raw
    rocksdict is written the same way (WriteBatches of ``commit_every``, WAL off, nothing
    flushed) once with rocksdict's own defaults and once with the store's RocksDB options
    and block cache.  Nothing is closed, flushed or settled: each database holds its keys
    wherever its options left them (memtables, level-0 files).  Then every key is read once,
    in random order, in :data:`LIVE_CHUNKS` chunks interleaved across the three sides.
    """
    n = sz.get_records
    keys = make_keys(n)
    values = make_values(n)
    lookups = make_keys(n, seed=99)
    size = -(-n // LIVE_CHUNKS)
    chunks = [lookups[i : i + size] for i in range(0, n, size)]
    sides: dict[str, list[Timing]] = {"ss": [], "default": [], "same": []}
    api = _imports()
    for _ in range(reps):
        with scratch_dir("get-live") as d, contextlib.ExitStack() as stack:
            mgr = stack.enter_context(api["StateManager"](d / "ss"))
            store = open_store(mgr)
            write_store(store, keys, values, commit_every=sz.commit_every)
            dbs = {}
            for side, options in (("default", None), ("same", baselines.engine_options())):
                db = baselines.raw_open(d / side, options)
                stack.callback(db.close)
                baselines.raw_write(db, keys, values, commit_every=sz.commit_every)
                dbs[side] = db
            get = store.get

            def ss_get(chunk: list[bytes], get: Callable[[bytes], Any] = get) -> Timing:
                sw = Stopwatch().start()
                for k in chunk:
                    if get(k) is None:
                        raise KeyError(k)
                return sw.stop()

            readers: dict[str, Callable[[list[bytes]], Timing]] = {
                "ss": ss_get,
                "default": lambda chunk, db=dbs["default"]: baselines.raw_get(db, chunk),
                "same": lambda chunk, db=dbs["same"]: baselines.raw_get(db, chunk),
            }
            order = list(readers)
            for i, chunk in enumerate(chunks):
                for side in order[i % 3 :] + order[: i % 3]:
                    sides[side].append(readers[side](chunk))
    name = "get, live store (all defaults, random key, unpacked)"
    return [
        rate_result(
            name,
            size,
            "get/s",
            sides["ss"],
            "raw get + unpackb, rocksdict defaults, written the same way",
            sides["default"],
            Target("ratio>=", 0.9),
            note=f"{n:,} keys written in commits of {sz.commit_every:,}, each read once",
        ),
        rate_result(
            name,
            size,
            "get/s",
            sides["ss"],
            "raw get + unpackb, the store's options, written the same way",
            sides["same"],
            note="same options and block cache: the store's layers alone",
        ),
    ]


# ------------------------------------------------------------------ restore


def _timed_manager_open(state_dir: Path, **store_kw: Any) -> Timing:
    """Manager open + store open (log load, restore, RocksDB flush) until usable; close not timed."""
    out: list[Timing] = []
    with open_manager(state_dir) as mgr:
        with timed_both(out):
            store = open_store(mgr, **store_kw)
        if store.get(b"\xff-absent") is not None:
            raise AssertionError("unexpected key")
    return out[0]


def case_restore(sz: BenchSizes, reps: int) -> list[Result]:
    n = sz.restore_keys
    keys = make_keys(n)
    values = make_values(n)
    pairs = packed_pairs(keys, values)
    ss: list[Timing] = []
    raw: list[Timing] = []
    raw_flush: list[Timing] = []
    raw_same: list[Timing] = []
    quix: list[Timing] = []
    have_quix = baselines.quix_available()
    with scratch_dir("restore") as d:
        with open_manager(d / "ss") as mgr:
            store = open_store(mgr)
            write_store(store, keys, values, commit_every=sz.commit_every)
        qn = min(sz.quix_restore_keys, n)
        for _ in range(reps):
            ss.append(_timed_manager_open(d / "ss"))
            raw.append(baselines.raw_restore(d / "raw", pairs, batch_records=10_000))
            shutil.rmtree(d / "raw")
            raw_flush.append(
                baselines.raw_restore(d / "raw", pairs, batch_records=10_000, flush=True)
            )
            shutil.rmtree(d / "raw")
            raw_same.append(
                baselines.raw_restore(
                    d / "raw",
                    pairs,
                    batch_records=10_000,
                    flush=True,
                    options=baselines.engine_options(),
                )
            )
            shutil.rmtree(d / "raw")
            if have_quix:
                # quix applies one WriteBatch per record (~10 us each); the full sizes
                # replay all pairs (equal sizes), only --quick/--tiny may take a prefix.
                quix.append(baselines.quix_recovery(d / "quix", pairs[:qn]))
                shutil.rmtree(d / "quix")
    name = f"full restore ({n:,} keys, random order)"
    note = "manager open + store open: log load, replay, RocksDB flush"
    out = [
        rate_result(
            name,
            n,
            "rec/s",
            ss,
            "raw load + flush, statestore's RocksDB options",
            raw_same,
            Target("ratio>=", 0.85),
            note + "; raw: WriteBatch of 10,000 (WAL off) of the same pairs, then flush",
        ),
        rate_result(name, n, "rec/s", ss, "raw load + flush, default options", raw_flush),
        rate_result(
            name,
            n,
            "rec/s",
            ss,
            "raw load, default options, no flush",
            raw,
            Target("ratio>=", 0.6),
            "raw leaves its data in memtables (not yet restartable)",
        ),
    ]
    if have_quix:
        out.append(
            Result(
                name=name,
                value=n / median_of(ss),
                unit="rec/s",
                baseline_name="quixstreams recovery",
                baseline_value=qn / median_of(quix),
                target=Target("ratio>=", 3.0),
                samples=[n / t.wall for t in ss],
                baseline_samples=[qn / t.wall for t in quix],
                cpu_ratio=(n / median_of(ss, "cpu")) / (qn / median_of(quix, "cpu")),
                note=(
                    f"quix replayed {qn:,} of the same pairs"
                    + (" (all of them)" if qn == n else f" (a prefix of {n:,}: compared as rates)")
                    + "; consuming from Kafka left out, which flatters quix"
                ),
            )
        )
    return out


def _crash_writer(state_dir: Path, n: int, tail: int, commit_every: int) -> None:
    """Child: write ``n`` keys, flush RocksDB, write ``tail`` more, then die without closing."""
    keys = make_keys(n)
    values = make_values(n)
    mgr_cm = open_manager(state_dir)
    mgr = mgr_cm.__enter__()
    store = open_store(
        mgr, restore_mode="incremental", flush_interval_records=n, write_buffer_size_bytes=256 * MB
    )
    write_store(store, keys, values, commit_every=commit_every)
    # Wait for RocksDB's flush at n (and the applied offset it persists). Without it the
    # tail was written before the asynchronous flush finished, the persisted applied
    # offset stayed at 0 and the reopen replayed all n + tail records (correct, but not
    # the case measured: 11-19 s against 0.3 s in round 2's runs).
    store.flush()
    tail_keys = keys[:tail]
    tail_values = [dict(v, tier=9) for v in values[:tail]]
    write_store(store, tail_keys, tail_values, commit_every=commit_every)
    sys.stdout.flush()
    os._exit(0)  # kill -9 semantics: no close, no RocksDB flush, no clean-shutdown marker


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _child_cmd(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "benchmarks.store_bench", "--child", *args]


def _parse_child(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    return {}


def _run_child(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        _child_cmd(args), cwd=ROOT, env=_child_env(), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return _parse_child(proc.stdout)


def case_incremental(sz: BenchSizes, reps: int) -> list[Result]:
    n, tail = sz.incremental_keys, sz.incremental_tail
    keys = make_keys(n)
    values = make_values(n)
    tail_pairs = packed_pairs(keys[:tail], [dict(v, tier=9) for v in values[:tail]])
    inc: list[Timing] = []
    clean_inc: list[Timing] = []
    raw: list[Timing] = []
    big = 256 * MB
    with scratch_dir("incremental") as d:
        _run_child(["crash-writer", str(d / "crashed"), str(n), str(tail), str(sz.commit_every)])
        for _ in range(reps):
            shutil.copytree(d / "crashed", d / "run", symlinks=True)
            inc.append(
                _timed_manager_open(
                    d / "run", restore_mode="incremental", write_buffer_size_bytes=big
                )
            )
            # Caught up and cleanly closed now: the reopen replays nothing.
            clean_inc.append(
                _timed_manager_open(
                    d / "run", restore_mode="incremental", write_buffer_size_bytes=big
                )
            )
            shutil.rmtree(d / "run")
            raw.append(baselines.raw_restore(d / "raw", tail_pairs, batch_records=10_000))
            shutil.rmtree(d / "raw")
    return [
        time_result(
            f"incremental restore after kill -9 ({tail:,}-record tail of {n + tail:,})",
            inc,
            "raw WriteBatch load of the tail",
            raw,
            note="includes the loader's recovery of the unflushed log tail (unclean shutdown)",
        ),
        time_result(f"incremental reopen after clean close ({n:,} keys)", clean_inc),
    ]


def _segment_files(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.suffix in (".log", ".index", ".timeindex"))


def case_updates(sz: BenchSizes, reps: int) -> list[Result]:
    n, u = sz.updates_keys, sz.updates_per_key
    keys = make_keys(n)
    values = make_values(n * u, seed=11)
    rng = random.Random(3)
    live: dict[bytes, Any] = {}
    many: list[Timing] = []
    once: list[Timing] = []
    with scratch_dir("updates") as d:
        # A: u updates per key, each round in a new random order; then roll and compact.
        with open_manager(d / "many") as mgr:
            store = open_store(mgr)
            for r in range(u):
                order = keys[:]
                rng.shuffle(order)
                vals = values[r * n : (r + 1) * n]
                write_store(store, order, vals, commit_every=sz.commit_every)
                live.update(zip(order, vals, strict=True))
            log = changelog_of(store)
            log.roll()
            passes = clean_fully(log)
            log_dir = Path(log.dir)
            active_base = log.active_segment.base_offset
        # B: the same keys written once (nothing to compact), rolled and cleaned the same way.
        with open_manager(d / "once") as mgr:
            store = open_store(mgr)
            write_store(store, keys, values[:n], commit_every=sz.commit_every)
            log = changelog_of(store)
            log.roll()
            clean_fully(log)
        for _ in range(reps):
            many.append(_timed_manager_open(d / "many"))
            once.append(_timed_manager_open(d / "once"))
        pack = msgpack.Packer().pack
        live_bytes = sum(len(k) + len(pack(v)) for k, v in live.items())
        active_prefix = f"{active_base:020d}."
        files = _segment_files(log_dir)
        active = sum(_alloc_bytes(p) for p in files if p.name.startswith(active_prefix))
        total = sum(_alloc_bytes(p) for p in files)
        log_only = sum(p.stat().st_size for p in files if p.suffix == ".log")
    read = sum(p.records_read + p.map_records_read for p in passes)
    return [
        time_result(
            f"full restore, {u} updates/key compacted ({n:,} keys)",
            many,
            "1 update/key",
            once,
            Target("ratio<=", 1.3),
            note=f"{len(passes)} cleaning pass(es), {read:,} records read by the cleaner",
        ),
        Result(
            name="changelog size after compaction (minus active segment)",
            value=(total - active) / MB,
            unit="MiB",
            baseline_name="live key+value bytes",
            baseline_value=live_bytes / MB,
            target=Target("ratio<=", 1.3),
            note=(
                f"allocated bytes of .log/.index/.timeindex; active segment {active / MB:.1f} MiB; "
                f".log files alone {log_only / MB:.1f} MiB"
            ),
        ),
    ]


# ------------------------------------------------------------------ compaction


def _proc_status(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _child_compact(log_dir: Path, buffer_bytes: int) -> None:
    """Child: open the log, reset the RSS high-water mark, clean fully, report stats + VmHWM."""
    from changelog.config import LogConfig  # noqa: PLC0415
    from changelog.log.log import Log  # noqa: PLC0415

    log = Log.open(log_dir, LogConfig())
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    start_rss = _proc_status("VmRSS")
    # File-backed pages of mmapped segments are page cache, not the cleaner's heap: the
    # anonymous part is sampled separately.
    anon_peak = [_proc_status("RssAnon")]
    stop = threading.Event()

    def sample_anon() -> None:
        while not stop.is_set():
            anon_peak[0] = max(anon_peak[0], _proc_status("RssAnon"))
            stop.wait(0.002)

    sampler = threading.Thread(target=sample_anon, daemon=True)
    sampler.start()
    sw = Stopwatch().start()
    passes = clean_fully(log, buffer_bytes=buffer_bytes)
    timing = sw.stop()
    stop.set()
    sampler.join()
    log.close()
    print(
        json.dumps(
            {
                "elapsed_s": timing.wall,
                "cpu_s": timing.cpu,
                "passes": len(passes),
                "records_read": sum(p.records_read for p in passes),
                "map_records_read": sum(p.map_records_read for p in passes),
                "bytes_read": sum(p.bytes_read for p in passes),
                "map_bytes_read": sum(p.map_bytes_read for p in passes),
                "start_rss": start_rss,
                "vm_hwm": _proc_status("VmHWM"),
                "anon_peak": anon_peak[0],
            }
        ),
        flush=True,
    )


def _build_dirty_log(state_dir: Path, records: int, distinct: int, commit_every: int) -> Path:
    """A store changelog of ``records`` writes over ``distinct`` keys (random order), rolled."""
    keys = make_keys(distinct)
    values = make_values(distinct)
    rng = random.Random(17)
    with open_manager(state_dir) as mgr:
        store = open_store(mgr)
        written = 0
        while written < records:
            order = keys[:]
            rng.shuffle(order)
            take = min(distinct, records - written)
            write_store(store, order[:take], values[:take], commit_every=commit_every)
            written += take
        log = changelog_of(store)
        log.roll()
        return Path(log.dir)


def case_compaction(sz: BenchSizes, reps: int) -> list[Result]:
    buffer = sz.compaction_buffer_bytes
    distinct = sz.compaction_records // 5  # 1M records over 200k keys at full size
    with scratch_dir("compaction") as d:
        log_dir = _build_dirty_log(d / "ss", sz.compaction_records, distinct, sz.commit_every)
        log_bytes = sum(p.stat().st_size for p in log_dir.glob("*.log"))
        runs: list[dict[str, Any]] = []
        for _ in range(reps):
            copy = (
                d / "copy" / log_dir.name
            )  # a partition directory keeps its <topic>-<partition> name
            shutil.copytree(log_dir, copy)
            runs.append(_run_child(["compact", str(copy), str(buffer)]))
            shutil.rmtree(d / "copy")
    rec_rates = [(r["records_read"] + r["map_records_read"]) / r["elapsed_s"] for r in runs]
    log_rates = [sz.compaction_records / r["elapsed_s"] for r in runs]
    mb_rates = [(r["bytes_read"] + r["map_bytes_read"]) / 1e6 / r["elapsed_s"] for r in runs]
    cpu_share = median([r["cpu_s"] / r["elapsed_s"] for r in runs])
    peak = max(r["vm_hwm"] for r in runs)
    anon = max(r["anon_peak"] for r in runs)
    start = min(r["start_rss"] for r in runs)
    passes = runs[0]["passes"]
    limit = buffer + 100 * MB
    return [
        Result(
            name="compaction: records read/s (map + recopy)",
            value=median(rec_rates),
            unit="rec/s",
            # Not a target any more: it rewarded re-reading (45 passes read 30.7M records);
            # passes and time to a clean log are what a user waits for.
            samples=rec_rates,
            note=(
                f"log {log_bytes / MB:.0f} MiB = {log_bytes / buffer:.0f}x the {buffer / MB:g} MiB "
                f"buffer, {sz.compaction_records:,} records over {distinct:,} keys; "
                f"{passes} passes; process CPU {cpu_share:.0%} of wall"
            ),
        ),
        Result(
            name="compaction: log records/s (until fully clean)",
            value=median(log_rates),
            unit="rec/s",
            samples=log_rates,
            note=f"median {median([r['elapsed_s'] for r in runs]):.2f} s to a clean log",
        ),
        Result(
            name="compaction: passes until fully clean",
            value=passes,
            unit="passes",
            target=Target("value<=", 2),
            note="the offset map's keys per pass decide it (the dict-based map took 45)",
        ),
        Result(name="compaction: MB/s read", value=median(mb_rates), unit="MB/s", samples=mb_rates),
        Result(
            name="compaction: peak RSS of the cleaning process",
            value=peak / MB,
            unit="MiB",
            baseline_name="dedupe buffer + 100 MiB",
            baseline_value=limit / MB,
            target=Target("ratio<=", 1.0),
            note=f"RSS before cleaning {start / MB:.0f} MiB; peak anonymous RSS {anon / MB:.0f} MiB",
        ),
    ]


def _clean_until_done(log: Any, *, in_process: bool) -> None:
    """Cleaning passes over ``log`` until nothing is due, as one cleaner worker runs them.

    ``in_process=True`` is the manager's default worker mode: the pass's CPU work runs in a
    child process (``clean_in_process``) while this thread waits; otherwise the pass runs
    in this thread.
    """
    from changelog.cleaner.clean import clean_log  # noqa: PLC0415
    from changelog.cleaner.manager import log_to_clean  # noqa: PLC0415
    from changelog.cleaner.service import clean_in_process  # noqa: PLC0415
    from changelog.config import CleanerConfig  # noqa: PLC0415

    config = CleanerConfig()
    stats: Any
    for _ in range(100):
        now = int(time.time() * 1000)
        if in_process:
            to_clean = log_to_clean(log, now_ms=now, force=True)
            if to_clean.due_reason is None:
                return
            stats = clean_in_process(to_clean, config=config, now_ms=now)
        else:
            stats = clean_log(log, force=True, config=config, now_ms=now)
            if stats is None:
                return
        if stats.end_offset >= stats.first_uncleanable_offset:
            return


def case_concurrent(sz: BenchSizes, reps: int) -> list[Result]:
    from changelog.config import LogConfig  # noqa: PLC0415
    from changelog.log.log import Log  # noqa: PLC0415

    n = sz.concurrent_records
    keys = make_keys(n, seed=123, prefix=b"w:")
    values = make_values(n)
    idle: list[Timing] = []
    busy: dict[str, list[Timing]] = {"process": [], "thread": []}
    done: dict[str, list[int]] = {"process": [], "thread": []}

    def write_while(store: Any, finished: Callable[[], bool], out: list[Timing]) -> int:
        sw = Stopwatch().start()
        count = write_store(store, keys, values, commit_every=sz.commit_every, stop=finished)
        out.append(sw.stop())
        return count

    with scratch_dir("concurrent") as d:
        dirty_dir = _build_dirty_log(d / "dirty", n * 4, n, sz.commit_every)
        for _ in range(reps):
            with open_manager(d / "w") as mgr:
                write_while(open_store(mgr), lambda: False, idle)
            shutil.rmtree(d / "w")
            for mode in ("process", "thread"):
                copy = d / "copy" / dirty_dir.name  # keeps its <topic>-<partition> name
                shutil.copytree(dirty_dir, copy)
                log = Log.open(copy, LogConfig())
                finished = threading.Event()

                def cleaner(
                    log: Any = log, finished: threading.Event = finished, mode: str = mode
                ) -> None:
                    try:
                        _clean_until_done(log, in_process=mode == "process")
                    finally:
                        finished.set()

                with open_manager(d / "w") as mgr:
                    store = open_store(mgr)
                    th = threading.Thread(target=cleaner, name="bench-cleaner", daemon=True)
                    th.start()
                    done[mode].append(write_while(store, finished.is_set, busy[mode]))
                    th.join()
                log.close()
                shutil.rmtree(d / "copy")
                shutil.rmtree(d / "w")

    idle_rates = [n / t.wall for t in idle]
    out = []
    for mode, name, target in (
        ("process", "writer throughput while compacting (pass in child process)", True),
        ("thread", "writer throughput while compacting (pass in a thread)", False),
    ):
        rates = [k / t.wall for k, t in zip(done[mode], busy[mode], strict=True)]
        out.append(
            Result(
                name=name,
                value=median(rates),
                unit="rec/s",
                baseline_name="writer alone",
                baseline_value=median(idle_rates),
                target=Target("ratio>=", 0.7) if target else None,
                samples=rates,
                baseline_samples=idle_rates,
                note=(
                    ("the manager's default worker mode; " if target else "worker='thread'; ")
                    + f"the writer wrote {min(done[mode]):,}+ records while passes ran"
                ),
            )
        )
    return out


Case = Callable[[BenchSizes, int], list[Result]]

CASES: dict[str, tuple[Case, bool]] = {
    # name: (function, heavy?) -- heavy cases use BenchSizes.heavy_reps
    "put": (case_put, False),
    "get": (
        lambda sz, reps: (
            case_get_range(sz, reps, do_get=True, do_range=False) + case_get_live(sz, reps)
        ),
        False,
    ),
    "range": (lambda sz, reps: case_get_range(sz, reps, do_get=False, do_range=True), False),
    "restore": (case_restore, True),
    "incremental": (case_incremental, True),
    "updates": (case_updates, True),
    "disk": (case_updates, True),
    "compaction": (case_compaction, True),
    "concurrent": (case_concurrent, True),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.store_bench")
    parser.add_argument("--size", choices=("full", "quick", "tiny"), default="full")
    parser.add_argument("--quick", action="store_const", const="quick", dest="size")
    parser.add_argument("--only", action="append", default=[], choices=sorted(CASES))
    parser.add_argument("--reps", type=int, default=None, help="override every case's repetitions")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        kind, *rest = args.child
        if kind == "crash-writer":
            _crash_writer(Path(rest[0]), int(rest[1]), int(rest[2]), int(rest[3]))
        elif kind == "compact":
            _child_compact(Path(rest[0]), int(rest[1]))
        else:
            parser.error(f"unknown child {kind}")
        return 0

    sz = BenchSizes.named(args.size)
    names: list[str] = list(dict.fromkeys(args.only)) or [c for c in CASES if c != "disk"]
    cases: dict[str, tuple[Case, bool]] = dict(CASES)
    if "get" in names and "range" in names:  # one database build serves both
        names.remove("range")
        cases["get"] = (
            lambda s, r: case_get_range(s, r, do_get=True, do_range=True) + case_get_live(s, r),
            False,
        )
    if "disk" in names and "updates" in names:
        names.remove("disk")

    results: list[Result] = []
    timings: dict[str, float] = {}
    loads: dict[str, list[float]] = {}
    for name in names:
        fn, heavy = cases[name]
        reps = args.reps or (sz.heavy_reps if heavy else sz.reps)
        t0 = time.perf_counter()
        print(f"[store_bench] {name} ({args.size}, reps={reps}) ...", flush=True)
        case_results = fn(sz, reps)
        timings[name] = round(time.perf_counter() - t0, 2)
        loads[name] = [round(x, 2) for x in os.getloadavg()]
        print_table(case_results)
        print(f"  ({timings[name]}s; load average now {loads[name]})", flush=True)
        results.extend(case_results)
    print_table(
        results,
        title=f"store_bench ({args.size}, reps={sz.reps}/{sz.heavy_reps} light/heavy, medians)",
    )
    emit_json(
        "store",
        results,
        extra={
            "size": args.size,
            "reps": {"light": sz.reps, "heavy": sz.heavy_reps, "override": args.reps},
            "case_seconds": timings,
            "loadavg_after_case": loads,
            "machine": machine_info(),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
