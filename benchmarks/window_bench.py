"""Window store put + commit and fetch against raw rocksdict with the same key layout.

Workload: ``--users`` keys, one put per user per 1-second window, windows
advancing (``--windows`` of them), a commit every 1,000 puts; retention 60 s
in segments of 30 s, so segments expire and are dropped while the run goes.
Values are counts (8-byte longs, :class:`~statestore.LongSerde`).

Our side: :meth:`StateManager.window_store`, ``put`` + ``commit()`` (the
changelog append fsynced per commit, RocksDB WAL off).  The baseline is the
durable floor of the same work on raw rocksdict with statestore's RocksDB
options: per commit one ``WriteBatch`` (WAL off) of ``segment id | key |
start | seqnum`` -> ``timestamp | value``, the stream time, a ``delete_range``
for expired segments, and an ``os.write`` + ``os.fsync`` of the same key and
value bytes to an append-only file (no framing, no CRC, no Kafka batch, no
offsets); no read-your-writes buffer, no serdes, no expiry filter.

Fetch: ``fetch(key, now - 30 s, now)`` for every user (about 30 windows each),
values decoded; the baseline seeks the key in each live segment that overlaps
the time range (as the store's time-bounded scan reads only those), reads to
the range's end with rocksdict's plain iterator and decodes the same bytes;
no read-your-writes merge, no scan-end check, no serdes.

Restore: the same workload (a commit per window), closed and reopened with a
full restore (the reopen is timed); the floor is a raw ``WriteBatch`` load of
the live entries only, in batches of 10,000, and a flush.

Run: ``python -m benchmarks.window_bench [--users N] [--windows N] [--json PATH]``
(alone on the machine, or under a shared machine's benchmark lock).  Results (wall
time, and process CPU time, RocksDB's background threads included, which a
loaded machine disturbs less) go to stdout and, with ``--json``, to ``PATH``
with the machine and its load average before and after (the source of
docs/performance.md's table).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import tempfile
from pathlib import Path

import rocksdict

from benchmarks._harness import Stopwatch, Timing, machine_info
from benchmarks.baselines import engine_options, raw_open
from statestore import LongSerde, StateManager, StateManagerConfig, WindowStore

RETENTION_MS = 60_000
SEGMENT_MS = 30_000
WINDOW_MS = 1_000
_SEG = struct.Struct(">Q")
_SUFFIX = struct.Struct(">qi")
_LONG = struct.Struct(">q")


def ours(path: Path, users: list[str], windows: int) -> tuple[Timing, Timing]:
    """Put + commit, then fetch, through a window store."""
    config = StateManagerConfig(run_cleaner=False)
    with StateManager(path, lambda: 0, config=config) as manager:
        store = manager.window_store(
            "w",
            window_size_ms=WINDOW_MS,
            retention_ms=RETENTION_MS,
            segment_interval_ms=SEGMENT_MS,
            value_serde=LongSerde(),
        )
        n = 0
        sw = Stopwatch().start()
        for window in range(windows):
            start = window * WINDOW_MS
            for user in users:
                store.put(user, window, start, timestamp_ms=start)
                n += 1
                if n % 1000 == 0:
                    store.commit()
        store.commit()
        put = sw.stop()
        now = (windows - 1) * WINDOW_MS
        sw = Stopwatch().start()
        for user in users:
            for _start, _value in store.fetch(user, now - 30_000, now):
                pass
        return put, sw.stop()


def ours_restore(path: Path, users: list[str], windows: int) -> tuple[Timing, int]:
    """Write the workload, close, then time a full restore (the reopen); returns it and the live count."""
    config = StateManagerConfig(run_cleaner=False)
    with StateManager(path, lambda: 0, config=config) as manager:
        store = _open_window(manager)
        for window in range(windows):
            for user in users:
                store.put(user, window, window * WINDOW_MS, timestamp_ms=window * WINDOW_MS)
            store.commit()
    with StateManager(path, lambda: 0, config=config) as manager:
        sw = Stopwatch().start()
        store = _open_window(manager)
        timing = sw.stop()
        return timing, sum(1 for _ in store.all())


def _open_window(manager: StateManager) -> WindowStore[str, int]:
    return manager.window_store(
        "w",
        window_size_ms=WINDOW_MS,
        retention_ms=RETENTION_MS,
        segment_interval_ms=SEGMENT_MS,
        value_serde=LongSerde(),
    )


def raw_restore(path: Path, users: list[str], windows: int) -> Timing:
    """The floor of that restore: WriteBatches of 10,000 of the live entries (segment-prefixed) + flush.

    Only the entries a window store keeps are loaded (the expired ones are skipped for
    free here; the store's restore reads and drops them).
    """
    db = raw_open(path, engine_options())
    wo = rocksdict.WriteOptions()
    wo.disable_wal = True  # type: ignore[method-assign, assignment]
    keys = [user.encode() for user in users]
    stream_time = (windows - 1) * WINDOW_MS
    oldest = max(0, (stream_time - RETENTION_MS) // SEGMENT_MS)
    pairs = [
        (
            _SEG.pack(window * WINDOW_MS // SEGMENT_MS) + key + _SUFFIX.pack(window * WINDOW_MS, 0),
            _LONG.pack(window * WINDOW_MS) + _LONG.pack(window),
        )
        for window in range(windows)
        if window * WINDOW_MS // SEGMENT_MS >= oldest
        for key in keys
    ]
    try:
        sw = Stopwatch().start()
        for start in range(0, len(pairs), 10_000):
            batch = rocksdict.WriteBatch(raw_mode=True)
            for key, value in pairs[start : start + 10_000]:
                batch.put(key, value)
            db.write(batch, wo)
        db.flush(True)
        return sw.stop()
    finally:
        db.close()


def raw(path: Path, users: list[str], windows: int) -> tuple[Timing, Timing]:
    """The durable floor of the same puts and fetches on raw rocksdict (see the module docstring)."""
    db = raw_open(path, engine_options())
    wo = rocksdict.WriteOptions()
    wo.disable_wal = True  # type: ignore[method-assign, assignment]
    fd = os.open(path.with_suffix(".append"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    keys = [user.encode() for user in users]
    try:
        stream_time = -1
        live_from = 0
        segments: set[int] = set()
        batch = rocksdict.WriteBatch(raw_mode=True)
        parts: list[bytes] = []
        n = 0
        sw = Stopwatch().start()

        def commit() -> None:
            nonlocal batch, parts, live_from
            oldest = max(0, (stream_time - RETENTION_MS) // SEGMENT_MS)
            if oldest > live_from:
                batch.delete_range(_SEG.pack(0), _SEG.pack(oldest))
                live_from = oldest
            batch.put(b"stream-time", _LONG.pack(stream_time))
            db.write(batch, wo)
            os.write(fd, b"".join(parts))
            os.fsync(fd)
            batch = rocksdict.WriteBatch(raw_mode=True)
            parts = []

        for window in range(windows):
            start = window * WINDOW_MS
            segment = start // SEGMENT_MS
            segments.add(segment)
            stream_time = max(stream_time, start)
            for key in keys:
                windowed = key + _SUFFIX.pack(start, 0)
                value = _LONG.pack(start) + _LONG.pack(window)
                batch.put(_SEG.pack(segment) + windowed, value)
                parts.append(windowed)
                parts.append(value)
                n += 1
                if n % 1000 == 0:
                    commit()
        commit()
        put = sw.stop()
        now = (windows - 1) * WINDOW_MS
        low = now - 30_000
        live = sorted(
            s
            for s in segments
            if s >= live_from and max(low, 0) // SEGMENT_MS <= s <= now // SEGMENT_MS
        )
        sw = Stopwatch().start()
        for key in keys:
            lo_suffix = _SUFFIX.pack(max(low, 0), 0)
            hi_suffix = _SUFFIX.pack(now, 0x7FFFFFFF)
            for segment in live:
                prefix = _SEG.pack(segment)
                hi = prefix + key + hi_suffix
                for stored, value in db.items(from_key=prefix + key + lo_suffix):
                    if stored > hi:
                        break
                    if len(stored) == len(prefix) + len(key) + 12:
                        _LONG.unpack_from(value, 8)
        return put, sw.stop()
    finally:
        os.close(fd)
        db.close()


def main() -> None:
    """Run both sides once each, interleaved twice, and print the medians' ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    users = [f"user:{i:06d}" for i in range(args.users)]
    puts = args.users * args.windows
    results: dict[str, list[tuple[Timing, Timing]]] = {"ours": [], "raw": []}
    for _round in range(2):
        for name, run in (("ours", ours), ("raw", raw)):
            with tempfile.TemporaryDirectory() as tmp:
                results[name].append(run(Path(tmp) / name, users, args.windows))
    for name, runs in results.items():
        put = min(r[0].wall for r in runs)
        fetch = min(r[1].wall for r in runs)
        print(
            f"{name:5s} put+commit {puts / put:10,.0f}/s ({put:.2f} s)   "
            f"fetch {args.users / fetch:9,.0f} keys/s ({fetch:.2f} s)"
        )
    ours_put = min(r[0].wall for r in results["ours"])
    raw_put = min(r[0].wall for r in results["raw"])
    ours_fetch = min(r[1].wall for r in results["ours"])
    raw_fetch = min(r[1].wall for r in results["raw"])
    print(
        f"ratio (ours/raw throughput): put {raw_put / ours_put:.2f}x, fetch {raw_fetch / ours_fetch:.2f}x"
    )
    # process CPU (RocksDB's background threads included): steadier than wall time on a
    # shared machine
    cpu = {
        name: (min(r[0].cpu for r in runs), min(r[1].cpu for r in runs))
        for name, runs in results.items()
    }
    print(
        f"CPU: put ours {cpu['ours'][0]:.2f} s raw {cpu['raw'][0]:.2f} s"
        f" ({cpu['raw'][0] / cpu['ours'][0]:.2f}x), fetch ours {cpu['ours'][1]:.3f} s"
        f" raw {cpu['raw'][1]:.3f} s ({cpu['raw'][1] / cpu['ours'][1]:.2f}x)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        restore, live = ours_restore(Path(tmp) / "ours", users, args.windows)
    with tempfile.TemporaryDirectory() as tmp:
        floor = raw_restore(Path(tmp) / "raw", users, args.windows)
    print(
        f"restore: ours {restore.wall:.2f} s ({puts} records in the changelog, {live} live),"
        f" raw load of the live entries {floor.wall:.2f} s; CPU {restore.cpu:.2f} s"
        f" vs {floor.cpu:.2f} s"
    )
    if args.json is not None:
        doc = {
            "bench": "window",
            "users": args.users,
            "windows": args.windows,
            "puts": puts,
            "ours_put_per_s": puts / ours_put,
            "raw_put_per_s": puts / raw_put,
            "put_ratio": raw_put / ours_put,
            "ours_fetch_keys_per_s": args.users / ours_fetch,
            "raw_fetch_keys_per_s": args.users / raw_fetch,
            "fetch_ratio": raw_fetch / ours_fetch,
            "ours_restore_s": restore.wall,
            "raw_restore_s": floor.wall,
            "restore_ratio": floor.wall / restore.wall,
            "ours_put_cpu_s": cpu["ours"][0],
            "raw_put_cpu_s": cpu["raw"][0],
            "ours_fetch_cpu_s": cpu["ours"][1],
            "raw_fetch_cpu_s": cpu["raw"][1],
            "ours_restore_cpu_s": restore.cpu,
            "raw_restore_cpu_s": floor.cpu,
            "live_windows": live,
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
            "machine": machine_info(),
        }
        args.json.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
