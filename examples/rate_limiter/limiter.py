"""The rate limiter (see the package docstring) and a request stream to drive it.

Thread-safety: not thread-safe (one thread per limiter, like its store).
"""

from __future__ import annotations

from pathlib import Path

from statestore import LongSerde, StateManager, WindowStore
from statestore.testing import Reporter

STORE = "rate-limiter"


class RateLimiter:
    """At most ``limit`` requests per user in any ``window_ms`` (buckets of ``bucket_ms``)."""

    def __init__(
        self, manager: StateManager, *, limit: int, window_ms: int, bucket_ms: int = 1_000
    ) -> None:
        """Open (and restore) the limiter's window store in ``manager``."""
        self._limit = limit
        self._window_ms = window_ms
        self._bucket_ms = bucket_ms
        self.store: WindowStore[str, int] = manager.window_store(
            STORE,
            window_size_ms=bucket_ms,
            retention_ms=window_ms + bucket_ms,
            value_serde=LongSerde(),
        )

    def used(self, user: str, now_ms: int) -> int:
        """Requests of ``user`` counted in the window ending at ``now_ms``."""
        first = max(0, (now_ms - self._window_ms) // self._bucket_ms * self._bucket_ms + 1)
        return sum(count for _start, count in self.store.fetch(user, first, now_ms))

    def allow(self, user: str, now_ms: int) -> bool:
        """Whether ``user`` may make a request at ``now_ms``; an admitted one is counted."""
        if self.used(user, now_ms) >= self._limit:
            return False
        bucket = now_ms // self._bucket_ms * self._bucket_ms
        count = self.store.fetch_window(user, bucket) or 0
        self.store.put(user, count + 1, bucket, timestamp_ms=now_ms)
        return True


def request(i: int) -> tuple[str, int]:
    """The ``i``-th request of the demonstration stream: ``(user, time in ms)``."""
    return f"user-{(i * 7919) % 5}", i * 97


LIMIT = 5
WINDOW_MS = 2_000
BUCKET_MS = 500


def serve(state_dir: Path, reporter: Reporter, count: int) -> None:
    """Decide ``count`` requests of :func:`request`, one transaction each (with the position); ack each.

    Resumes after the committed position.  A ``statestore.testing`` service.
    """
    with StateManager(state_dir) as manager:
        limiter = RateLimiter(manager, limit=LIMIT, window_ms=WINDOW_MS, bucket_ms=BUCKET_MS)
        position = manager.metadata.get("position", -1)
        for i in range(position + 1, count):
            user, now = request(i)
            with manager.transaction():
                limiter.allow(user, now)
                manager.metadata["position"] = i
            reporter.ack(i)


def expected_counts(last: int) -> dict[tuple[str, int], int]:
    """A plain model of the buckets after requests ``0..last``: ``{(user, bucket start): count}``.

    Only buckets the store still serves (newer than its retention) are kept.
    """
    buckets: dict[tuple[str, int], int] = {}
    stream_time = -1
    for i in range(last + 1):
        user, now = request(i)
        first = max(0, (now - WINDOW_MS) // BUCKET_MS * BUCKET_MS + 1)
        used = sum(c for (u, start), c in buckets.items() if u == user and first <= start <= now)
        bucket = now // BUCKET_MS * BUCKET_MS
        if used < LIMIT:
            buckets[(user, bucket)] = buckets.get((user, bucket), 0) + 1
            stream_time = max(stream_time, bucket)
    horizon = stream_time - (WINDOW_MS + BUCKET_MS)
    return {key: c for key, c in buckets.items() if key[1] > horizon}
