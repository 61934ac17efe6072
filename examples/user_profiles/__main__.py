"""``python -m examples.user_profiles``: serve user profiles over HTTP on 127.0.0.1.

    python -m examples.user_profiles --state-dir state/ --port 8080
    curl -s -XPOST localhost:8080/users -d '{"id": "alice", "name": "Alice"}'
    curl -s localhost:8080/users/alice
    curl -s localhost:8080/metrics      # Prometheus text (extra statestore[prometheus])

Prints ``listening on http://127.0.0.1:PORT`` once it accepts requests
(``--port 0`` picks a free port).  SIGTERM or Ctrl-C stops it cleanly; a
``kill -9`` loses nothing that was acknowledged with a 2xx.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from examples.user_profiles.api import HOST, configure_logging, make_server, prometheus_metrics
from examples.user_profiles.service import STORE_NAME, Profile, ProfileService

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
    parser.add_argument("--verbose", "-v", action="store_true", help="log every request")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, got {args.port}")
    configure_logging(args.verbose)
    from statestore import StateManager, StateStoreError  # noqa: PLC0415 - fast --help

    try:
        started = time.perf_counter()
        with StateManager(args.state_dir) as manager:
            store = manager.store(STORE_NAME, value_type=Profile)
            restore_s = time.perf_counter() - started
            try:
                server = make_server(
                    ProfileService(store), args.port, metrics=prometheus_metrics(manager)
                )
            except OSError as exc:
                print(
                    f"{PROG}: error: cannot listen on {HOST}:{args.port}: {exc.strerror}",
                    file=sys.stderr,
                )
                return 1
            with server:
                _stop_on_signals(server.shutdown)
                print(
                    f"restored {STORE_NAME!r} from its changelog in {restore_s:.2f}s",
                    file=sys.stderr,
                )
                print(f"listening on http://{HOST}:{server.port}", flush=True)
                server.serve_forever(poll_interval=0.2)
    except StateStoreError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    print("stopped cleanly", file=sys.stderr)
    return 0


def _stop_on_signals(shutdown: Callable[[], None]) -> None:
    """SIGTERM/SIGINT: stop serving (from another thread: ``shutdown`` waits for the loop)."""

    def handler(_signum: int, _frame: FrameType | None) -> None:
        threading.Thread(target=shutdown, name="shutdown", daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


if __name__ == "__main__":
    raise SystemExit(main())
