"""Live reads of raw rocksdict under RocksDB option variants, against rocksdict's defaults.

Usage: PYTHONPATH=. python scripts/live_raw_options.py KEYS REPS VARIANT[,VARIANT...]

A variant is ``default`` (rocksdict's own options) or ``store`` (the store's options,
:func:`statestore.stores.engine.rocksdb_options` of ``RocksDBConfig()`` with a 64 MiB block
cache) followed by ``+`` modifiers: ``wbN`` (N MiB write buffer), ``mtbloomR`` (memtable
bloom filter with whole-key filtering, size ratio R, e.g. ``mtbloom0.02``; ``mtbloom0``
turns it off), ``hash`` (data block hash index, ratio 0.75).  Per repetition every variant
gets a fresh database written the same way (KEYS keys, WriteBatches of 1,000, WAL off,
nothing flushed); then every key is read once (``get`` + ``msgpack.unpackb``) in chunks of
10,000 interleaved across the variants (the one that goes first rotates).  Prints where each
database holds its keys after the writes (level-0 files, memtable entries), and per
variant the median over chunks of ``default``'s time over the variant's (>1: faster than
rocksdict's defaults), wall and CPU.
"""

import os
import shutil
import statistics
import sys
import time
from typing import Any

import msgpack
import rocksdict

from benchmarks import baselines
from benchmarks._harness import make_keys, make_values, scratch_dir
from statestore.config import RocksDBConfig
from statestore.stores.engine import new_block_cache, rocksdb_options


def options(variant: str) -> Any:
    base, *mods = variant.split("+")
    if base == "default":
        if mods:
            raise SystemExit("modifiers apply to 'store' only")
        return None
    settings: dict[str, Any] = {}
    hash_index = False
    for mod in mods:
        if mod.startswith("wb"):
            settings["write_buffer_size_bytes"] = int(mod[2:]) << 20
        elif mod.startswith("mtbloom"):
            settings["memtable_bloom_size_ratio"] = float(mod[7:])
        elif mod == "hash":
            hash_index = True
        else:
            raise SystemExit(f"unknown modifier {mod}")
    config = RocksDBConfig(**settings)
    cache = new_block_cache(64 << 20)
    opts = rocksdb_options(config, cache)
    if hash_index:
        table = rocksdict.BlockBasedOptions()
        table.set_block_size(config.block_size_bytes)
        table.set_block_cache(cache)
        table.set_bloom_filter(config.bloom_filter_bits_per_key, False)
        table.set_data_block_index_type(rocksdict.DataBlockIndexType.binary_and_hash())
        table.set_data_block_hash_ratio(0.75)
        opts.set_block_based_table_factory(table)
    return opts


def where(db: Any) -> str:
    l0, mem, imm = (
        db.property_value(f"rocksdb.{name}")
        for name in (
            "num-files-at-level0",
            "num-entries-active-mem-table",
            "num-immutable-mem-table",
        )
    )
    return f"L0 files {l0}, active memtable entries {mem}, immutable memtables {imm}"


def main(n: int, reps: int, variants: list[str]) -> None:
    if "default" not in variants:
        variants = ["default", *variants]
    keys, values, lookups = make_keys(n), make_values(n), make_keys(n, seed=99)
    wall: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    loads = []
    unpack = msgpack.unpackb
    for rep in range(reps):
        with scratch_dir("live-raw") as d:
            dbs = {}
            for i, variant in enumerate(variants):
                db = baselines.raw_open(d / str(i), options(variant))
                baselines.raw_write(db, keys, values)
                dbs[variant] = db
                if rep == 0:
                    print(f"{variant}: {where(db)}")
            loads.append(os.getloadavg()[0])
            for ci, start in enumerate(range(0, n, 10_000)):
                chunk = lookups[start : start + 10_000]
                times = {}
                for variant in variants[ci % len(variants) :] + variants[: ci % len(variants)]:
                    get = dbs[variant].get
                    w, c = time.perf_counter(), time.process_time()
                    for k in chunk:
                        unpack(get(k))
                    times[variant] = (time.perf_counter() - w, time.process_time() - c)
                for variant in variants:
                    wall[variant].append(times["default"][0] / times[variant][0])
                    cpu[variant].append(times["default"][1] / times[variant][1])
            for db in dbs.values():
                db.close()
            shutil.rmtree(d, ignore_errors=True)
    for variant in variants:
        print(
            f"{variant:28s} get vs rocksdict defaults: wall {statistics.median(wall[variant]):.2f}x "
            f"cpu {statistics.median(cpu[variant]):.2f}x"
        )
    print(f"load {[round(x, 2) for x in loads]}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(","))
