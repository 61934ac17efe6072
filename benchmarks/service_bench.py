"""The user-profile service over HTTP: requests/s and latency, 1 vs 8 clients, against two baselines.

Services, each a Starlette app under uvicorn in its own process on 127.0.0.1:

==========  ==============================================================================
service     what a write does before it answers 2xx
==========  ==============================================================================
statestore  ``examples.user_profiles``: a transaction on ``statestore.aio`` (read the
            profile, write it, commit: changelog append + fsync on the committer thread,
            shared by concurrent requests; RocksDB); a read is a committed get
floor       the same routes on plain rocksdict + an fsynced append: the record appended to
            a file and ``os.fsync``-ed, then put into rocksdict (WAL off), inline on the
            event loop: the least a durable web write can do in Python (no read-modify-
            write, no shared fsync, no changelog format)
sqlite      the same routes on sqlite3, WAL mode, ``synchronous=FULL``, one connection,
            inline on the event loop: what a Python developer would pick instead
==========  ==============================================================================

Load: an ``httpx.AsyncClient`` per client task in this process, ``clients`` tasks (1 or 8),
each doing ``PUT /users/{id}`` (a ~100-byte JSON profile over 1,000 ids) for ``seconds``,
then ``GET /users/{id}`` for ``seconds``.  Reported per service and client count: requests/s
and p50/p99 latency, writes and reads apart.  The load generator shares the 2 cores with the
server: absolute numbers are low and the ratios are what to read; the 1-minute load average
is printed beside every case.

``python -m benchmarks.service_bench --seconds 3`` (alone on the machine).
Prints a table, then one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks._harness import Result, emit_json, machine_info, print_table

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]

BASELINE_APP = r"""
import json, os, sqlite3, sys
import rocksdict, uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

kind, state = sys.argv[1], sys.argv[2]
os.makedirs(state, exist_ok=True)
if kind == "floor":
    options = rocksdict.Options(raw_mode=True); options.create_if_missing(True)
    db = rocksdict.Rdict(os.path.join(state, "rocksdb"), options)
    no_wal = rocksdict.WriteOptions(); no_wal.disable_wal = True
    fd = os.open(os.path.join(state, "append.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(key, value):
        os.write(fd, key + value); os.fsync(fd)
        batch = rocksdict.WriteBatch(raw_mode=True); batch.put(key, value); db.write(batch, no_wal)

    def read(key):
        return db.get(key)
else:
    conn = sqlite3.connect(os.path.join(state, "kv.sqlite"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL"); conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY, value BLOB) WITHOUT ROWID")

    def write(key, value):
        conn.execute("BEGIN"); conn.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))
        conn.execute("COMMIT")

    def read(key):
        row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

async def user(request: Request) -> Response:
    key = request.path_params["user_id"].encode()
    if request.method == "GET":
        value = read(key)
        if value is None:
            return JSONResponse({"error": "no profile"}, status_code=404)
        return Response(value, media_type="application/json")
    fields = await request.json()
    value = json.dumps({"id": key.decode(), "fields": fields}).encode()
    write(key, value)
    return Response(value, media_type="application/json")

app = Starlette(routes=[Route("/users/{user_id}", user, methods=["GET", "PUT"])])
import socket
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY
sock.bind(("127.0.0.1", 0))
sock.listen(128)  # connections queue from now on: the client may connect as soon as it reads the line
print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])
"""


def _start(service: str, state: Path) -> tuple[subprocess.Popen[str], str]:
    if service == "statestore":
        argv = [
            sys.executable,
            "-m",
            "examples.user_profiles",
            "--state-dir",
            str(state),
            "--port",
            "0",
        ]
    else:
        argv = [sys.executable, "-c", BASELINE_APP, service, str(state)]
    process = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"{service} did not start: {line!r}")
    return process, line.split(" ", 2)[2].strip()


async def _phase(base: str, clients: int, seconds: float, method: str) -> tuple[float, list[float]]:
    import httpx  # noqa: PLC0415

    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            n = 0
            # At least one request per client: on a loaded machine the client's set-up alone
            # can outlast a short phase, which would leave no latency to report.
            while n == 0 or time.perf_counter() < deadline:
                user = f"user{rng.randrange(1000):04d}"
                n += 1
                start = time.perf_counter()
                if method == "PUT":
                    r = await http.put(
                        f"/users/{user}",
                        json={"name": f"name {n}", "email": f"{user}@example.com", "n": n},
                    )
                else:
                    r = await http.get(f"/users/{user}")
                latencies.append(time.perf_counter() - start)
                if r.status_code >= 500:
                    raise RuntimeError(f"{method} {user}: {r.status_code}")

    started = time.perf_counter()
    await asyncio.gather(*(client(seed) for seed in range(clients)))
    return len(latencies) / (time.perf_counter() - started), latencies


def _pct(latencies: list[float], q: float) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e3


def main(argv: Sequence[str] | None = None) -> int:
    """Run every service at 1 and 8 clients; print a table and one line of JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.service_bench")
    parser.add_argument("--seconds", type=float, default=3.0, help="per phase (writes, reads)")
    args = parser.parse_args(argv)
    measured: dict[tuple[str, int, str], tuple[float, float, float, str]] = {}
    for clients in (1, 8):
        for service in ("statestore", "floor", "sqlite"):
            with tempfile.TemporaryDirectory(prefix=f"bench-service-{service}-") as tmp:
                process, base = _start(service, Path(tmp) / "state")
                try:
                    for method in ("PUT", "GET"):
                        rate, lat = asyncio.run(_phase(base, clients, args.seconds, method))
                        load = f"{os.getloadavg()[0]:.2f}"
                        measured[(service, clients, method)] = (
                            rate,
                            _pct(lat, 0.5),
                            _pct(lat, 0.99),
                            load,
                        )
                finally:
                    process.terminate()
                    process.wait(timeout=60)
    results: list[Result] = []
    for (service, clients, method), (rate, p50, p99, load) in measured.items():
        if service != "statestore":
            continue
        for base in ("floor", "sqlite"):
            b_rate, b_p50, b_p99, _ = measured[(base, clients, method)]
            kind = "write" if method == "PUT" else "read"
            note = f"load {load}"
            results.append(
                Result(
                    f"{kind}s, {clients} clients: req/s vs {base}",
                    rate,
                    "req/s",
                    base,
                    b_rate,
                    group="service",
                    note=note,
                )
            )
            results.append(
                Result(
                    f"{kind}s, {clients} clients: p50 vs {base}",
                    p50,
                    "ms",
                    base,
                    b_p50,
                    group="service",
                    note=note,
                )
            )
            results.append(
                Result(
                    f"{kind}s, {clients} clients: p99 vs {base}",
                    p99,
                    "ms",
                    base,
                    b_p99,
                    group="service",
                    note=note,
                )
            )
    print_table(results, title="the user-profile service over HTTP")
    emit_json(
        "service",
        results,
        extra={
            "machine": machine_info(),
            "raw": {f"{s} {c} {m}": v for (s, c, m), v in measured.items()},
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
