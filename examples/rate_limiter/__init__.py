"""A per-user rate limiter over a sliding window, on a window store (docs/time.md).

``RateLimiter.allow(user, now_ms)`` admits at most ``limit`` requests of a user
in any ``window_ms``: the window store counts requests in buckets of
``bucket_ms`` (one window per bucket), a decision sums the buckets of the last
``window_ms``, and retention drops old buckets whole.  Decisions and the input
position are committed in one transaction, so a restarted limiter continues
exactly where the last acknowledged commit left it.

Run ``python -m examples.rate_limiter STATE_DIR`` for a small demonstration.
"""
