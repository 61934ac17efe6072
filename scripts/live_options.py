"""A RocksDB option of the store measured on put, live get, restore and RSS (with and without it).

Usage: PYTHONPATH=. python scripts/live_options.py KEYS REPS SETTING=VALUE [SETTING=VALUE ...] [--json OUT]

Each ``SETTING=VALUE`` is a :class:`statestore.config.RocksDBConfig` field (e.g.
``memtable_bloom_size_ratio=0``); the variants are the store's defaults and the defaults with
each setting changed.  Per repetition, in one process: every variant writes a store of KEYS
keys in commits of 1,000 (every other setting default, the background cleaner included), raw
rocksdict with its own defaults is written the same way (WriteBatch of 1,000, WAL off), then
every key is read once in random order, in 20 chunks interleaved across all sides (the side
that goes first rotates).  Then, per variant and repetition, two fresh processes: one writes
and reads the store (peak RSS, ``VmHWM``, over the whole process), one restores it (manager
open + ``manager.store``: wall and CPU seconds, ``VmHWM`` growth over the process before the
open).  Prints medians: get ratio against raw (wall and CPU, per chunk), put CPU seconds,
restore seconds, RSS.
"""

import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import baselines, store_bench
from benchmarks._harness import make_keys, make_values, scratch_dir

CHUNKS = 20


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _config(setting: str | None) -> Any:
    from statestore.config import RocksDBConfig  # noqa: PLC0415

    if setting is None:
        return RocksDBConfig()
    name, _, value = setting.partition("=")
    return RocksDBConfig(**{name: json.loads(value)})


def _open(mgr: Any, setting: str | None) -> Any:
    from statestore.config import StoreConfig  # noqa: PLC0415
    from statestore.serdes import BytesSerde, MsgpackSerde  # noqa: PLC0415

    return mgr.store(
        "bench",
        key_serde=BytesSerde(),
        value_serde=MsgpackSerde(),
        config=StoreConfig(),
        rocksdb=_config(setting),
    )


def ratios(n: int, reps: int, variants: list[str | None]) -> dict[str, Any]:
    from statestore.manager import StateManager  # noqa: PLC0415

    keys, values, lookups = make_keys(n), make_values(n), make_keys(n, seed=99)
    size = -(-n // CHUNKS)
    chunks = [lookups[i : i + size] for i in range(0, n, size)]
    names = [v or "defaults" for v in variants]
    out: dict[str, Any] = {name: {"get_wall": [], "get_cpu": [], "put_cpu": []} for name in names}
    out["raw"] = {"put_cpu": []}
    loads = []
    for rep in range(reps):
        with scratch_dir("live-options") as d, contextlib.ExitStack() as stack:
            readers = {}
            for name, setting in zip(names, variants, strict=True):
                mgr = stack.enter_context(StateManager(d / f"ss{len(readers)}"))
                store = _open(mgr, setting)
                c = time.process_time()
                store_bench.write_store(store, keys, values, commit_every=1000)
                out[name]["put_cpu"].append(time.process_time() - c)
                readers[name] = store.get
            db = baselines.raw_open(d / "raw")
            stack.callback(db.close)
            out["raw"]["put_cpu"].append(baselines.raw_write(db, keys, values).cpu)
            loads.append(os.getloadavg()[0])
            sides = ["raw", *names]
            for i, chunk in enumerate(chunks):
                times = {}
                for side in sides[i % len(sides) :] + sides[: i % len(sides)]:
                    if side == "raw":
                        t = baselines.raw_get(db, chunk)
                        times[side] = (t.wall, t.cpu)
                        continue
                    get = readers[side]
                    gc.collect()
                    w, c = time.perf_counter(), time.process_time()
                    for k in chunk:
                        if get(k) is None:
                            raise KeyError(k)
                    times[side] = (time.perf_counter() - w, time.process_time() - c)
                for name in names:
                    out[name]["get_wall"].append(times["raw"][0] / times[name][0])
                    out[name]["get_cpu"].append(times["raw"][1] / times[name][1])
            print(f"rep {rep}: load {loads[-1]:.2f}", flush=True)
    out["loads"] = loads
    return out


def child(mode: str, directory: str, n: int, setting: str | None) -> None:
    from statestore.manager import StateManager  # noqa: PLC0415

    if mode == "write":
        keys, values, lookups = make_keys(n), make_values(n), make_keys(n, seed=99)
        with StateManager(Path(directory)) as mgr:
            store = _open(mgr, setting)
            store_bench.write_store(store, keys, values, commit_every=1000)
            for k in lookups:
                store.get(k)
            print(json.dumps({"hwm_bytes": _status_bytes("VmHWM")}))
        return
    gc.collect()
    before = _status_bytes("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    w, c = time.perf_counter(), time.process_time()
    with StateManager(Path(directory)) as mgr:
        _open(mgr, setting)
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        peak = _status_bytes("VmHWM")
    print(json.dumps({"wall": wall, "cpu": cpu, "growth_bytes": peak - before}))


def processes(n: int, reps: int, variants: list[str | None]) -> dict[str, Any]:
    out: dict[str, Any] = {v or "defaults": {"write_hwm": [], "restore": []} for v in variants}
    env = dict(os.environ, PYTHONPATH=str(Path.cwd()))
    for _ in range(reps):
        for setting in variants:
            with scratch_dir("live-options-rss") as d:
                rows = []
                for mode in ("write", "restore"):
                    cmd = [sys.executable, __file__, "--child", mode, str(d / "ss"), str(n)]
                    cmd += [setting] if setting else []
                    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                    rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
                out[setting or "defaults"]["write_hwm"].append(rows[0]["hwm_bytes"])
                out[setting or "defaults"]["restore"].append(rows[1])
    return out


def main(argv: list[str]) -> None:
    if argv[0] == "--child":
        child(argv[1], argv[2], int(argv[3]), argv[4] if len(argv) > 4 else None)
        return
    json_out = None
    if "--json" in argv:
        i = argv.index("--json")
        json_out = argv[i + 1]
        argv = argv[:i] + argv[i + 2 :]
    n, reps = int(argv[0]), int(argv[1])
    variants: list[str | None] = [None, *argv[2:]]
    med = statistics.median
    r = ratios(n, reps, variants)
    p = processes(n, reps, variants)
    mib = 1024 * 1024
    for v in variants:
        name = v or "defaults"
        restores = p[name]["restore"]
        print(
            f"{name:32s} live get vs raw defaults: wall {med(r[name]['get_wall']):.2f}x "
            f"cpu {med(r[name]['get_cpu']):.2f}x | put cpu {med(r[name]['put_cpu']):.2f} s | "
            f"restore {med(x['wall'] for x in restores):.2f} s "
            f"(cpu {med(x['cpu'] for x in restores):.2f} s, "
            f"peak +{med(x['growth_bytes'] for x in restores) / mib:.0f} MiB) | "
            f"write+read peak RSS {med(p[name]['write_hwm']) / mib:.0f} MiB"
        )
    print(f"raw defaults put cpu {med(r['raw']['put_cpu']):.2f} s; load {r['loads']}")
    if json_out:
        Path(json_out).write_text(
            json.dumps({"keys": n, "reps": reps, "ratios": r, "processes": p})
        )


if __name__ == "__main__":
    main(sys.argv[1:])
