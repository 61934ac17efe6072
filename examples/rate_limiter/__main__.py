"""``python -m examples.rate_limiter STATE_DIR``: decide a few requests and print the decisions."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from examples.rate_limiter.limiter import BUCKET_MS, LIMIT, WINDOW_MS, RateLimiter, request
from statestore import StateManager


def main(argv: Sequence[str] | None = None) -> None:
    """Decide 40 requests of the demonstration stream, committing each, and print them."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.rate_limiter",
        description="Decide 40 requests of a demonstration stream with a window-store rate "
        "limiter, committing each decision, and print the decisions.",
    )
    parser.add_argument(
        "state_dir",
        metavar="STATE_DIR",
        nargs="?",
        type=Path,
        default=Path("rate-limiter-state"),
        help="the state directory (default: rate-limiter-state)",
    )
    state_dir = parser.parse_args(argv).state_dir
    with StateManager(state_dir) as manager:
        limiter = RateLimiter(manager, limit=LIMIT, window_ms=WINDOW_MS, bucket_ms=BUCKET_MS)
        for i in range(40):
            user, now = request(i)
            with manager.transaction():
                allowed = limiter.allow(user, now)
            print(f"{now:6d} ms  {user}  {'allowed' if allowed else 'limited'}")


if __name__ == "__main__":
    main()
