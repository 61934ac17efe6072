"""``python -m examples.rate_limiter STATE_DIR``: decide a few requests and print the decisions."""

from __future__ import annotations

import sys
from pathlib import Path

from examples.rate_limiter.limiter import BUCKET_MS, LIMIT, WINDOW_MS, RateLimiter, request
from statestore import StateManager


def main() -> None:
    """Decide 40 requests of the demonstration stream, committing each, and print them."""
    state_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "rate-limiter-state")
    with StateManager(state_dir) as manager:
        limiter = RateLimiter(manager, limit=LIMIT, window_ms=WINDOW_MS, bucket_ms=BUCKET_MS)
        for i in range(40):
            user, now = request(i)
            with manager.transaction():
                allowed = limiter.allow(user, now)
            print(f"{now:6d} ms  {user}  {'allowed' if allowed else 'limited'}")


if __name__ == "__main__":
    main()
