"""The metrics registry: definitions, the three primitive kinds, windowed rates, snapshots.

A metric is identified like a Kafka ``MetricName``: a name, a group and tags
(``store``/``partition`` for a store partition, none for the cleaner).  What
a name means (kind, unit, description, Kafka equivalent) is a
:class:`MetricDefinition`; every definition of the library lives in
:mod:`statestore.metrics.definitions`, and docs/metrics.md is held equal to
that catalog by a test.

Kinds:

* **counter**: a :class:`Counter`, an integer that only grows.  The hot path
  adds to ``counter.value`` directly (an attribute add: ~20 ns).
* **rate**: derived, never recorded: the per-second growth of its
  ``source`` counter over the sample window (Kafka's ``Rate`` with
  ``metrics.sample.window.ms`` = 30 s, ``metrics.num.samples`` = 2): the
  registry keeps the counter's value at the start of the window and divides
  the growth since then by the time elapsed (at least 1 ms).  Unlike Kafka, a
  young metric is divided by its real age, not by the full window.
* **gauge**: a :class:`Gauge`, a callable read when a snapshot is taken
  (Kafka's ``Gauge``); a gauge that raises is left out of that snapshot.
* **histogram**: a :class:`Histogram` of observations (seconds) in fixed
  buckets, with count, sum and max; its snapshot value is the plain dict
  ``{"count", "sum", "avg", "max"}`` (Kafka's ``-avg``/``-max`` pair, over
  the metric's lifetime rather than a window).

Thread-safety: :class:`MetricsRegistry` is thread-safe: ``_lock`` guards
``_metrics`` and the rate windows.  A :class:`Counter` or :class:`Histogram`
has one writer (the thread that owns the store or the cleaner's bookkeeping);
snapshots read them from any thread and see a recent value (single attribute
reads are atomic in CPython).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal

import attrs

__all__ = [
    "LATENCY_BUCKETS_S",
    "Counter",
    "Gauge",
    "Histogram",
    "MetricDefinition",
    "MetricKind",
    "MetricsRegistry",
    "Sample",
    "Tags",
]

logger = logging.getLogger(__name__)

MetricKind = Literal["counter", "rate", "gauge", "histogram"]
Tags = tuple[tuple[str, str], ...]
"""Tag pairs in a fixed order, e.g. ``(("store", "users"), ("partition", "0"))``."""

SAMPLE_WINDOW_S: Final = 30.0
"""Kafka's ``metrics.sample.window.ms`` default (30 s), in seconds."""
NUM_SAMPLES: Final = 2
"""Kafka's ``metrics.num.samples`` default: the rate covers up to 2 windows."""

LATENCY_BUCKETS_S: Final = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds (seconds) of the latency histograms' buckets; the last bucket is ``+Inf``."""


@attrs.frozen(kw_only=True)
class MetricDefinition:
    """What a metric name means.  Immutable; thread-safe.

    ``kafka`` names the Kafka (or Kafka Streams) metric it corresponds to, with
    its group, or is empty when Kafka has none.  ``source`` is the counter a
    ``rate`` is derived from.  ``level`` is the recording level that turns the
    metric on (``DEBUG`` metrics cost a clock read per operation).
    """

    name: str
    group: str
    kind: MetricKind
    unit: str
    description: str
    kafka: str = ""
    tags: tuple[str, ...] = ()
    source: str = ""
    level: Literal["INFO", "DEBUG"] = "INFO"

    @property
    def prometheus_name(self) -> str:
        """The Prometheus family name: ``statestore_<group>_<name>`` in snake case.

        The group loses Kafka's ``-metrics`` suffix (``stream-state-metrics`` ->
        ``stream_state``); a name in seconds ends in ``_seconds`` (unless it
        says ``secs`` already, as Kafka's ``max-clean-time-secs``), one in
        milliseconds in ``_ms`` (Kafka Streams' ``commit-latency-avg``).  Rates have
        no family: Prometheus derives rates from counters with ``rate()``.
        """
        group = _snake(self.group.removesuffix("-metrics"))
        name = _snake(self.name)
        if self.unit == "seconds" and not name.endswith(("_seconds", "_secs")):
            name += "_seconds"
        elif self.unit == "ms" and not name.endswith("_ms"):
            name += "_ms"
        return f"statestore_{group}_{name}"


def _snake(text: str) -> str:
    out = []
    for index, char in enumerate(text):
        if char.isupper() and index and not text[index - 1].isupper():
            out.append("_")
        out.append("_" if char in "-. " else char.lower())
    return "".join(out)


class Counter:
    """An integer that only grows (``value``); its single writer adds to it directly."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        """Add ``amount`` (>= 0)."""
        self.value += amount


class Gauge:
    """A value read when a snapshot is taken: ``read()`` calls the function it was given."""

    __slots__ = ("read",)

    def __init__(self, read: Callable[[], float | int | None]) -> None:
        self.read = read


class Histogram:
    """Observations in fixed buckets, with count, sum and max (one writer).

    ``bucket_counts[i]`` counts observations ``<= bounds[i]`` and above the
    previous bound (not cumulative); the last entry counts those above every
    bound.
    """

    __slots__ = ("bounds", "bucket_counts", "count", "max", "sum")

    def __init__(self, bounds: Iterable[float] = LATENCY_BUCKETS_S) -> None:
        self.bounds = tuple(bounds)
        self.bucket_counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0
        self.max = 0.0

    def observe(self, value: float) -> None:
        """Record one observation (~0.2 us)."""
        self.bucket_counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value
        if value > self.max:  # noqa: PLR1730 - a compare is cheaper than max() on this path
            self.max = value

    def summary(self) -> dict[str, float | int]:
        """``{"count", "sum", "avg", "max"}`` (avg 0.0 with no observation)."""
        count = self.count
        total = self.sum
        return {
            "count": count,
            "sum": total,
            "avg": total / count if count else 0.0,
            "max": self.max,
        }


Metric = Counter | Gauge | Histogram


@attrs.frozen
class Sample:
    """One metric's value in a snapshot.  Immutable; thread-safe.

    ``value`` is a number for counters, rates and gauges and a
    :class:`Histogram` (read it at once) for histograms.
    """

    definition: MetricDefinition
    tags: Tags
    value: Any


class _Window:
    """Where a rate's window starts: the source counter's value at a time."""

    __slots__ = ("start_s", "start_value")

    def __init__(self, start_s: float, start_value: float) -> None:
        self.start_s = start_s
        self.start_value = start_value


class MetricsRegistry:
    """Every metric of one state manager, by ``(name, tags)``.

    ``clock`` returns seconds (monotonic; injectable for tests).
    Thread-safety: see the module docstring.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        level: Literal["INFO", "DEBUG"] = "INFO",
    ) -> None:
        self._clock = clock
        self.level = level
        self._lock = threading.Lock()
        self._metrics: dict[tuple[str, Tags], tuple[MetricDefinition, Metric | None]] = {}
        self._windows: dict[tuple[str, Tags], list[_Window]] = {}

    def records(self, definition: MetricDefinition) -> bool:
        """Whether ``definition`` is recorded at this registry's level."""
        return definition.level == "INFO" or self.level == "DEBUG"

    # ------------------------------------------------------------ registration

    def _add(self, definition: MetricDefinition, tags: Tags, metric: Metric | None) -> None:
        names = tuple(name for name, _value in tags)
        if names != definition.tags:
            raise ValueError(f"{definition.name}: tags {names} are not {definition.tags}")
        with self._lock:
            self._metrics[(definition.name, tags)] = (definition, metric)
            if definition.kind == "rate":
                # The window starts when the rate is registered, with its source at 0.
                self._windows[(definition.name, tags)] = [_Window(self._clock(), 0.0)]

    def counter(self, definition: MetricDefinition, tags: Tags = ()) -> Counter:
        """Register (or replace) a counter and return it."""
        assert definition.kind == "counter", definition
        counter = Counter()
        self._add(definition, tags, counter)
        return counter

    def counter_from(
        self, definition: MetricDefinition, read: Callable[[], int | None], tags: Tags = ()
    ) -> None:
        """Register a counter kept elsewhere (``read()`` returns its total at snapshot time)."""
        assert definition.kind == "counter", definition
        self._add(definition, tags, Gauge(read))

    def gauge(
        self,
        definition: MetricDefinition,
        read: Callable[[], float | int | None],
        tags: Tags = (),
    ) -> Gauge:
        """Register (or replace) a gauge reading ``read()`` at snapshot time."""
        assert definition.kind == "gauge", definition
        gauge = Gauge(read)
        self._add(definition, tags, gauge)
        return gauge

    def histogram(self, definition: MetricDefinition, tags: Tags = ()) -> Histogram:
        """Register (or replace) a histogram and return it."""
        assert definition.kind == "histogram", definition
        histogram = Histogram()
        self._add(definition, tags, histogram)
        return histogram

    def rate(self, definition: MetricDefinition, tags: Tags = ()) -> None:
        """Register a rate over the counter ``definition.source`` with the same tags."""
        assert definition.kind == "rate", definition
        assert definition.source, definition
        self._add(definition, tags, None)

    def remove(self, match: Mapping[str, str]) -> int:
        """Unregister every metric whose tags include all of ``match``; returns how many."""
        wanted = set(match.items())
        with self._lock:
            keys = [key for key in self._metrics if wanted <= set(key[1])]
            for key in keys:
                del self._metrics[key]
                self._windows.pop(key, None)
        return len(keys)

    # ------------------------------------------------------------ reading

    def _rate(self, key: tuple[str, Tags], value: float, now: float) -> float:
        """Per-second growth of ``value`` over the current window (lock held)."""
        windows = self._windows[key]
        if now - windows[-1].start_s >= SAMPLE_WINDOW_S:
            windows.append(_Window(now, value))
            del windows[:-NUM_SAMPLES]
        start = windows[0]
        return (value - start.start_value) / max(now - start.start_s, 0.001)

    def samples(self) -> list[Sample]:
        """Every registered metric's current value, in registration order.

        Gauges are read here (a gauge that raises is skipped, logged at DEBUG);
        rates are computed from their source counters.
        """
        with self._lock:
            entries = list(self._metrics.items())
        now = self._clock()
        out: list[Sample] = []
        counters: dict[tuple[str, Tags], int] = {}
        for (name, tags), (_definition, metric) in entries:
            if isinstance(metric, Counter):
                counters[(name, tags)] = metric.value
        for (name, tags), (definition, metric) in entries:
            value: Any
            if isinstance(metric, Counter):
                value = counters[(name, tags)]
            elif isinstance(metric, Histogram):
                value = metric
            elif isinstance(metric, Gauge):
                try:
                    value = metric.read()
                except Exception as exc:  # noqa: BLE001 - a gauge over a closing log must not break a scrape
                    logger.debug("gauge %s %s not read: %s", name, tags, exc)
                    continue
                if value is None:
                    continue
            else:
                source = counters.get((definition.source, tags))
                if source is None:
                    continue
                with self._lock:
                    if (name, tags) not in self._windows:
                        continue
                    value = self._rate((name, tags), source, now)
            out.append(Sample(definition, tags, value))
        return out
