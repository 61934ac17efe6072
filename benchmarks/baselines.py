"""Same-run baselines: raw ``rocksdict`` and quixstreams' RocksDB state partition.

Raw rocksdict is the floor any RocksDB-backed store pays: WriteBatch of 1,000 with the WAL
off (statestore's changelog is its WAL, so this is the engine it can at best match),
values packed with a reused ``msgpack.Packer``, reads as ``get`` + ``msgpack.unpackb``,
and restore as a plain WriteBatch load of the very pairs the changelog holds, in the
changelog's (random) key order.  :func:`raw_put` never fsyncs; :func:`raw_put_durable`
is the *durable floor*: the same WriteBatches plus, per commit, an ``os.write`` of the
same key and value bytes to an append-only file and an ``os.fsync`` of it (what any
store that makes a commit durable before returning must at least pay).

Reopening keeps the configured options: :func:`raw_open` passes ``column_families={}``,
because rocksdict's ``Rdict(path, options)`` on an existing database reloads the
column-family options stored on disk and silently replaces the configured block cache
with RocksDB's 8 MiB default (measured: ``rocksdb.block-cache-capacity`` 8388608 instead
of 67108864).  Before this was fixed the get baseline ran with an 8 MiB cache against
statestore's 64 MiB and the suite reported "get 1.22x raw".

quixstreams' ``RocksDBStorePartition`` is used without Kafka the way its own tests build
it (``RocksDBStorePartition(path, options=RocksDBOptions(open_max_retries=0, ...))``, one
transaction per 1,000 records, ``tx.set``/``tx.get`` with a prefix, ``prepare()`` +
``flush()``).  Its values are msgpack (``dumps``/``loads`` set to msgpack, as a quix user
would) so serialization costs match.  Recovery is the partition's own
``recover_from_changelog_message`` per record, the call quix's ``RecoveryPartition`` makes
for each consumed changelog message; consuming from Kafka is left out, which flatters quix.
Its changelog producer is ``None``: quix's put here logs nothing.  Durability differs and
favours quix: its commit (``prepare`` + ``flush``) writes RocksDB with the WAL on but never
fsyncs (strace over 100 commits: 17 fsyncs + 3 fdatasyncs, none per commit, against
statestore's 123), so every quix row carries that note.

Every function takes a fresh directory (or an open database) and returns the
:class:`~benchmarks._harness.Timing` (wall and process CPU seconds) of the measured part;
opening and closing the database is not measured.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgpack
import rocksdict

from benchmarks._harness import Stopwatch, Timing

__all__ = [
    "block_cache_bytes",
    "engine_options",
    "quix_available",
    "quix_get",
    "quix_open",
    "quix_put",
    "quix_recovery",
    "raw_get",
    "raw_multi_get",
    "raw_open",
    "raw_put",
    "raw_put_durable",
    "raw_range",
    "raw_restore",
    "raw_write",
    "settle",
    "store_db",
]

_QUIX_PREFIX = b"bench"


# --------------------------------------------------------------------------- raw rocksdict


def engine_options() -> Any:
    """statestore's own RocksDB options (Kafka Streams' memtables, bloom filters, and a block
    cache of ``StateManagerConfig().block_cache_size_bytes``), for the "same options" raw
    baseline.  Fails loudly (ImportError) if the engine stops offering them, rather than
    falling back to rocksdict's defaults."""
    from statestore.config import RocksDBConfig, StateManagerConfig  # noqa: PLC0415
    from statestore.stores.engine import new_block_cache, rocksdb_options  # noqa: PLC0415

    cache = new_block_cache(StateManagerConfig().block_cache_size_bytes)
    return rocksdb_options(RocksDBConfig(), cache)


def raw_open(path: Path, options: Any | None = None) -> rocksdict.Rdict:
    """rocksdict's defaults in raw mode, or ``options`` (see :func:`engine_options`)."""
    if options is None:
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
    # column_families={} keeps ``options`` (block cache included) on reopen; see the module
    # docstring.
    return rocksdict.Rdict(str(path), options, column_families={})


def settle(*dbs: Any, timeout_s: float = 600.0) -> None:
    """Wait until no database has a compaction pending or running (at most ``timeout_s``).

    Read benchmarks measure both sides settled: RocksDB compacts a database in the
    background for a while after it is built or restored (statestore's full restore asks for
    its level-0 compaction at once), and that CPU is charged to this process, to whichever
    side happens to run.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = [
            int(db.property_value("rocksdb.compaction-pending") or 0)
            + int(db.property_value("rocksdb.num-running-compactions") or 0)
            for db in dbs
        ]
        if not any(busy):
            return
        time.sleep(0.5)


def store_db(store: Any) -> Any:
    """The rocksdict database under a one-partition statestore store (for :func:`settle`)."""
    layer = store._inner
    while not hasattr(layer, "engine"):
        layer = layer.inner
    return layer.engine._db


def block_cache_bytes(db: rocksdict.Rdict) -> int:
    """The block cache capacity RocksDB reports for ``db`` (the suite prints it for both sides)."""
    return int(db.property_value("rocksdb.block-cache-capacity") or 0)


def _no_wal() -> rocksdict.WriteOptions:
    wo = rocksdict.WriteOptions()
    # rocksdict's stub declares a method; at runtime it is a property.
    wo.disable_wal = True  # type: ignore[method-assign, assignment]
    return wo


def raw_write(
    db: rocksdict.Rdict, keys: Sequence[bytes], values: Sequence[Any], *, commit_every: int = 1000
) -> Timing:
    """Pack and write ``keys``/``values`` into the open ``db`` in WriteBatches of ``commit_every``, WAL off."""
    wo = _no_wal()
    pack = msgpack.Packer().pack
    n = len(keys)
    sw = Stopwatch().start()
    for start in range(0, n, commit_every):
        wb = rocksdict.WriteBatch(raw_mode=True)
        for i in range(start, min(start + commit_every, n)):
            wb.put(keys[i], pack(values[i]))
        db.write(wb, wo)
    return sw.stop()


def raw_put(
    path: Path,
    keys: Sequence[bytes],
    values: Sequence[Any],
    *,
    commit_every: int = 1000,
    options: Any | None = None,
) -> Timing:
    """:func:`raw_write` into a database opened (and closed after) at ``path``."""
    db = raw_open(path, options)
    try:
        return raw_write(db, keys, values, commit_every=commit_every)
    finally:
        db.close()


def raw_put_durable(
    path: Path,
    keys: Sequence[bytes],
    values: Sequence[Any],
    *,
    commit_every: int = 1000,
    options: Any | None = None,
) -> Timing:
    """The durable floor: :func:`raw_put` plus, per commit, an fsynced append of the same bytes.

    The append file gets each record's key and packed value bytes (no framing, no CRC);
    ``os.fsync`` runs after each commit's ``db.write``, as statestore's commit fsyncs its
    changelog segment.
    """
    db = raw_open(path, options)
    wo = _no_wal()
    pack = msgpack.Packer().pack
    n = len(keys)
    fd = os.open(path.with_suffix(".append"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        sw = Stopwatch().start()
        for start in range(0, n, commit_every):
            wb = rocksdict.WriteBatch(raw_mode=True)
            parts = []
            for i in range(start, min(start + commit_every, n)):
                key = keys[i]
                value = pack(values[i])
                wb.put(key, value)
                parts.append(key)
                parts.append(value)
            db.write(wb, wo)
            os.write(fd, b"".join(parts))
            os.fsync(fd)
        return sw.stop()
    finally:
        os.close(fd)
        db.close()


def raw_restore(
    path: Path,
    pairs: Sequence[tuple[bytes, bytes]],
    *,
    batch_records: int = 1000,
    flush: bool = False,
    options: Any | None = None,
) -> Timing:
    """Load already-encoded pairs with WriteBatches of ``batch_records``, WAL off.

    ``flush=True`` also flushes the memtables to SST files inside the timing (what a
    restore with the WAL off must do before it may call the state durable).
    """
    db = raw_open(path, options)
    wo = _no_wal()
    n = len(pairs)
    try:
        sw = Stopwatch().start()
        for start in range(0, n, batch_records):
            wb = rocksdict.WriteBatch(raw_mode=True)
            for k, v in pairs[start : start + batch_records]:
                wb.put(k, v)
            db.write(wb, wo)
        if flush:
            db.flush(True)
        return sw.stop()
    finally:
        db.close()


def raw_get(db: rocksdict.Rdict, keys: Sequence[bytes]) -> Timing:
    """Point reads in the given (random) order, each value unpacked."""
    get = db.get
    unpack = msgpack.unpackb
    sw = Stopwatch().start()
    for k in keys:
        v = get(k)
        if v is None:
            raise KeyError(k)
        unpack(v)
    return sw.stop()


def raw_multi_get(db: rocksdict.Rdict, keys: Sequence[bytes], *, per_call: int = 1000) -> Timing:
    """RocksDB multi-get (``Rdict.get(list)``) of ``per_call`` keys at a time, each value unpacked."""
    get = db.get
    unpack = msgpack.unpackb
    n = len(keys)
    sw = Stopwatch().start()
    for start in range(0, n, per_call):
        for v in get(list(keys[start : start + per_call])):
            if v is None:
                raise KeyError(start)
            unpack(v)
    return sw.stop()


def raw_range(db: rocksdict.Rdict, bounds: Sequence[tuple[bytes, bytes]]) -> Timing:
    """For each ``[lo, hi)``, iterate the items (upper bound in ReadOptions), values unpacked.

    RocksDB stops at the bound itself, which statestore cannot do: rocksdict 0.3.29's
    ``ReadOptionsPy.to_read_opt`` hands RocksDB a pointer into a buffer it frees right
    away, so statestore bounds its scans in C with ``itertools.takewhile`` instead
    (``RocksDBEngine.items``).  Here the freed buffer has not been reused in practice
    (5,000 of 5,000 scans of 100 keys returned exactly 100), so this is the fastest raw
    scan, not a safe one.
    """
    unpack = msgpack.unpackb
    sw = Stopwatch().start()
    for lo, hi in bounds:
        ro = rocksdict.ReadOptions()
        ro.set_iterate_upper_bound(hi)
        for _k, v in db.items(from_key=lo, read_opt=ro):
            unpack(v)
    return sw.stop()


# --------------------------------------------------------------------------- quixstreams


def quix_available() -> bool:
    try:
        import quixstreams.state.rocksdb  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def quix_open(path: Path) -> Any:
    """A quixstreams RocksDB state partition, built the way quixstreams' own tests build it."""
    from quixstreams.state.rocksdb.options import RocksDBOptions  # noqa: PLC0415
    from quixstreams.state.rocksdb.partition import RocksDBStorePartition  # noqa: PLC0415

    options = RocksDBOptions(
        open_max_retries=0,
        open_retry_backoff=3.0,
        dumps=msgpack.packb,
        loads=msgpack.unpackb,
    )
    return RocksDBStorePartition(str(path), options=options)


def quix_put(
    path: Path,
    keys: Sequence[bytes],
    values: Sequence[Any],
    *,
    commit_every: int = 1000,
) -> Timing:
    """One transaction per ``commit_every`` records: ``tx.set`` each, ``prepare`` + ``flush``."""
    part = quix_open(path)
    n = len(keys)
    try:
        sw = Stopwatch().start()
        for start in range(0, n, commit_every):
            tx = part.begin()
            for i in range(start, min(start + commit_every, n)):
                tx.set(keys[i], values[i], prefix=_QUIX_PREFIX)
            tx.prepare()
            tx.flush()
        return sw.stop()
    finally:
        part.close()


def quix_get(part: Any, keys: Sequence[bytes], *, per_tx: int = 1000) -> Timing:
    """Point reads through a transaction (one per ``per_tx`` reads), values unpacked."""
    n = len(keys)
    sw = Stopwatch().start()
    for start in range(0, n, per_tx):
        tx = part.begin()
        for i in range(start, min(start + per_tx, n)):
            if tx.get(keys[i], prefix=_QUIX_PREFIX) is None:
                raise KeyError(keys[i])
    return sw.stop()


def quix_recovery(path: Path, pairs: Sequence[tuple[bytes, bytes]]) -> Timing:
    """Replay already-encoded pairs through ``recover_from_changelog_message``, one per record."""
    part = quix_open(path)
    try:
        recover = part.recover_from_changelog_message
        prefix = _QUIX_PREFIX + b"|"
        sw = Stopwatch().start()
        for offset, (k, v) in enumerate(pairs):
            recover(key=prefix + k, value=v, cf_name="default", offset=offset)
        part.complete_recovery()
        return sw.stop()
    finally:
        part.close()
