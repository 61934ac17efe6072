"""Kafka's ``Throttler``: keeps the cleaner's I/O under a byte rate by sleeping."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

__all__ = ["Throttler"]


class Throttler:
    """Keeps a byte rate under ``bytes_per_second`` by sleeping (Kafka's ``Throttler``).

    Callers report bytes with :meth:`maybe_throttle`; once per ``check_interval_s``
    (or sooner, once a whole interval's budget of bytes has been seen) the
    observed rate is compared with the target and the caller sleeps long
    enough to bring it back.  ``math.inf`` disables it.

    Invariants: ``_observed`` counts the bytes since ``_period_start``; a
    period never ends before ``check_interval_s`` or its byte budget.

    Thread-safety: thread-safe; ``_lock`` guards the period's start and byte count
    (the sleep happens outside it).
    """

    def __init__(
        self,
        bytes_per_second: float,
        *,
        check_interval_s: float = 0.1,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bytes_per_second = bytes_per_second
        self._check_interval_s = check_interval_s
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = monotonic()
        self._observed = 0

    def maybe_throttle(self, nbytes: int) -> None:
        """Count ``nbytes`` of I/O and sleep if the rate is above the target."""
        if math.isinf(self.bytes_per_second):
            return
        with self._lock:
            self._observed += nbytes
            now = self._monotonic()
            elapsed = now - self._period_start
            budget = self.bytes_per_second * self._check_interval_s
            if elapsed < self._check_interval_s and self._observed < budget:
                return
            wanted = self._observed / self.bytes_per_second
            pause = wanted - elapsed
            self._period_start = now + max(pause, 0.0)
            self._observed = 0
        if pause > 0:
            self._sleep(pause)
