"""Windowed rates, averages and maxima of the runtime's metrics, as Kafka's ``SampledStat``.

Kafka's metrics keep ``metrics.num.samples`` (2) samples of
``metrics.sample.window.ms`` (30 s) each; a rate is the growth over the samples
kept divided by the time they cover, an average or maximum is taken over the
observations they hold.  :class:`SampledStat` does the same with the same
defaults, and divides a young stat by its real age (at least 1 ms), not by a
full window (as :class:`statestore.metrics.registry.MetricsRegistry` does for
its rates).

Invariants: ``_samples`` is ordered by start time, holds at most
``num_samples`` samples, and the last one is the one being filled.

Thread-safety: thread-safe.  The processor's thread records; a metrics scrape
reads from any thread.  ``_lock`` guards ``_samples`` (a read may start a new
window); it is taken once per poll batch and once per commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = ["NUM_SAMPLES", "SAMPLE_WINDOW_S", "SampledStat"]

SAMPLE_WINDOW_S: Final = 30.0
"""Kafka's ``metrics.sample.window.ms`` default, in seconds."""
NUM_SAMPLES: Final = 2
"""Kafka's ``metrics.num.samples`` default."""


class _Sample:
    __slots__ = ("count", "max", "start_s", "total")

    def __init__(self, start_s: float) -> None:
        self.start_s = start_s
        self.count = 0
        self.total = 0.0
        self.max = 0.0


class SampledStat:
    """Observations over the last ``num_samples`` windows: their rate, average and maximum."""

    def __init__(
        self,
        *,
        window_s: float = SAMPLE_WINDOW_S,
        num_samples: int = NUM_SAMPLES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window_s = window_s
        self._num_samples = num_samples
        self._clock = clock
        self._samples = [_Sample(clock())]
        self._lock = threading.Lock()

    def _current(self, now: float) -> _Sample:
        sample = self._samples[-1]
        if now - sample.start_s >= self._window_s:
            sample = _Sample(now)
            self._samples.append(sample)
            del self._samples[: -self._num_samples]
        return sample

    def record(self, value: float, count: int = 1) -> None:
        """Add ``count`` observations summing to ``value`` (the maximum sees ``value / count``)."""
        each = value / count if count else 0.0
        with self._lock:
            sample = self._current(self._clock())
            sample.count += count
            sample.total += value
            if each > sample.max:  # noqa: PLR1730 - once per poll or commit, plain compare
                sample.max = each

    def _kept(self, now: float) -> list[tuple[float, int, float, float]]:
        """``(start, count, total, max)`` of the samples kept at ``now``, copied under the lock."""
        with self._lock:
            self._current(now)
            horizon = self._window_s * self._num_samples
            return [
                (s.start_s, s.count, s.total, s.max)
                for s in self._samples
                if now - s.start_s < horizon
            ]

    def rate(self) -> float:
        """Observations a second over the samples kept (Kafka's ``Rate`` of a count)."""
        now = self._clock()
        kept = self._kept(now)
        if not kept:
            return 0.0
        elapsed = max(now - kept[0][0], 0.001)
        return sum(count for _start, count, _total, _max in kept) / elapsed

    def avg(self) -> float:
        """Mean observation over the samples kept (0.0 with none; Kafka's ``Avg`` gives NaN)."""
        kept = self._kept(self._clock())
        count = sum(count for _start, count, _total, _max in kept)
        return sum(total for _start, _count, total, _max in kept) / count if count else 0.0

    def max(self) -> float:
        """Largest observation over the samples kept (0.0 with none)."""
        kept = self._kept(self._clock())
        return max((high for _start, count, _total, high in kept if count), default=0.0)
