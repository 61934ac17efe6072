"""``python -m examples.user_profiles``: serve user profiles over HTTP on 127.0.0.1 (uvicorn).

    python -m examples.user_profiles --state-dir state/ --port 8080
    curl -s -XPOST localhost:8080/users -d '{"id": "alice", "name": "Alice"}'
    curl -s localhost:8080/users/alice
    curl -s localhost:8080/metrics      # Prometheus text (extra statestore[prometheus])
    curl -s localhost:8080/openapi.json

Prints ``listening on http://127.0.0.1:PORT`` once it accepts requests
(``--port 0`` picks a free port).  SIGTERM or Ctrl-C stops it gracefully: it
stops accepting connections, finishes the requests in flight (their commits
included, up to ``--graceful-timeout``), closes the state manager and prints
``stopped cleanly``.  A ``kill -9`` loses nothing that was acknowledged with a 2xx.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from examples.user_profiles.app import HOST, configure_logging, make_app, prometheus_metrics
from examples.user_profiles.service import STORE_NAME, ProfileService, open_profiles

__all__ = ["main"]

PROG = "python -m examples.user_profiles"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="User profiles over HTTP, kept in a statestore store."
    )
    parser.add_argument("--state-dir", type=Path, required=True, help="the state directory")
    parser.add_argument(
        "--port", type=int, default=8080, help="port on 127.0.0.1 (0: any free port)"
    )
    parser.add_argument(
        "--graceful-timeout",
        type=float,
        default=10.0,
        help="seconds a shutdown waits for requests in flight (default 10)",
    )
    parser.add_argument(
        "--inactive-ttl-s",
        type=float,
        default=None,
        help="profiles not written for this many seconds expire (a store with a TTL; "
        "fixed when the store is created)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="log every request")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, got {args.port}")
    configure_logging(args.verbose)
    # uvicorn restores the handlers it found and re-raises a signal it stopped on: these make
    # that re-raise a no-op, so the shutdown below runs to its end.
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda _signum, _frame: None)
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415 - fast --help

    from statestore import StateStoreError  # noqa: PLC0415
    from statestore.aio import AsyncStateManager  # noqa: PLC0415

    started = time.perf_counter()
    try:
        manager = await AsyncStateManager.open(args.state_dir)
    except StateStoreError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    try:
        ttl_ms = None if args.inactive_ttl_s is None else max(1, int(args.inactive_ttl_s * 1000))
        store = await open_profiles(manager, inactive_ttl_ms=ttl_ms)
        restore_s = time.perf_counter() - started
        # IPPROTO_TCP given explicitly: asyncio sets TCP_NODELAY only on connections whose
        # socket says so, and without it a keep-alive response waits ~40 ms (Nagle + delayed ACK)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((HOST, args.port))
        except OSError as exc:
            listener.close()
            print(
                f"{PROG}: error: cannot listen on {HOST}:{args.port}: {exc.strerror}",
                file=sys.stderr,
            )
            return 1
        app = make_app(ProfileService(store), metrics=prometheus_metrics(manager.manager))
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                lifespan="off",
                log_level="debug" if args.verbose else "warning",
                access_log=args.verbose,
                timeout_graceful_shutdown=args.graceful_timeout,
            )
        )
        serving = asyncio.create_task(server.serve(sockets=[listener]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if server.started:
            print(
                f"restored {STORE_NAME!r} from its changelog in {restore_s:.2f}s", file=sys.stderr
            )
            print(f"listening on http://{HOST}:{listener.getsockname()[1]}", flush=True)
        await serving
    except StateStoreError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    finally:
        await manager.aclose()
    print("stopped cleanly", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
