"""``python -m examples.user_profiles.cluster``: one instance of the distributed user-profile service.

    python -m examples.user_profiles.cluster --bootstrap broker:9092 --app profiles \\
        --instance i1 --state-dir state-i1/ --port 8081 --standbys 1

Run several (each its own ``--instance``, ``--state-dir`` and ``--port``):
the partitions of the store spread over them by Kafka's group protocol, and
any instance answers any key (:mod:`examples.user_profiles.routing` proxies
to the owner).  Prints ``listening on http://HOST:PORT`` once it serves.
SIGTERM stops it cleanly (requests in flight answered, the processor
commits and leaves the group, so the others take its partitions at once).
A ``kill -9`` loses nothing that was acknowledged with a 2xx.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from examples.user_profiles.app import configure_logging

__all__ = ["main"]

PROG = "python -m examples.user_profiles.cluster"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="One instance of the distributed user-profile service."
    )
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--app", required=True, help="application id (group, topic prefix)")
    parser.add_argument("--instance", required=True, help="this instance's stable id")
    parser.add_argument("--state-dir", type=Path, required=True, help="the state directory")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, required=True, help="port to listen on")
    parser.add_argument(
        "--advertise",
        default=None,
        help="host:port the others reach this one at (default host:port)",
    )
    parser.add_argument(
        "--partitions", type=int, default=6, help="partitions of a new request topic"
    )
    parser.add_argument("--standbys", type=int, default=1, help="num_standby_replicas")
    parser.add_argument("--commit-interval-ms", type=int, default=50)
    parser.add_argument("--graceful-timeout", type=float, default=10.0)
    parser.add_argument("--verbose", "-v", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    configure_logging(args.verbose)
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda _signum, _frame: None)
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    import httpx  # noqa: PLC0415 - fast --help
    import uvicorn  # noqa: PLC0415

    from examples.user_profiles.owner import ProfileOwner  # noqa: PLC0415
    from examples.user_profiles.routing import make_cluster_app  # noqa: PLC0415
    from statestore import StateStoreError  # noqa: PLC0415
    from statestore.kafka import HostInfo  # noqa: PLC0415

    endpoint = HostInfo.parse(args.advertise or f"{args.host}:{args.port}")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((args.host, args.port))
    except OSError as exc:
        listener.close()
        print(f"{PROG}: error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    owner = ProfileOwner(
        bootstrap_servers=args.bootstrap,
        application_id=args.app,
        instance_id=args.instance,
        state_dir=args.state_dir,
        endpoint=endpoint,
        partitions=args.partitions,
        standbys=args.standbys,
        loop=asyncio.get_running_loop(),
        commit_interval_ms=args.commit_interval_ms,
    )
    try:
        await asyncio.to_thread(owner.start)
    except (StateStoreError, TimeoutError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
    async with httpx.AsyncClient(timeout=30.0, limits=limits) as http:
        server = uvicorn.Server(
            uvicorn.Config(
                make_cluster_app(owner, http),
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
            print(f"listening on http://{endpoint}", flush=True)
        try:
            await serving
        finally:
            await asyncio.to_thread(owner.stop)
    print("stopped cleanly", file=sys.stderr)
    return 0 if owner.failed is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
