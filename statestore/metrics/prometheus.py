"""Prometheus exposition of a state manager's metrics (extra ``statestore[prometheus]``).

Register a :class:`StateStoreCollector` with a ``prometheus_client`` registry
and serve that registry however the service serves HTTP::

    from prometheus_client import REGISTRY, start_http_server
    from statestore.metrics.prometheus import StateStoreCollector

    REGISTRY.register(StateStoreCollector(manager))
    start_http_server(9108, addr="127.0.0.1")

Each scrape reads the manager's registry once (:meth:`MetricsRegistry.samples`)
and turns every definition into one family named
:attr:`~statestore.metrics.registry.MetricDefinition.prometheus_name`, labelled
with the definition's tags: counters as counters, gauges as gauges,
histograms as histograms (cumulative ``le`` buckets in seconds, ``_sum`` and
``_count``).  Rates are left out: Prometheus computes them from the counters
with ``rate()``.  docs/metrics.md lists every family name.

Thread-safety: :meth:`StateStoreCollector.collect` may run on any thread
(``prometheus_client`` scrapes on its server's threads); it only reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from statestore.metrics.registry import Histogram, MetricDefinition, MetricsRegistry

__all__ = ["StateStoreCollector"]


class StateStoreCollector(Collector):
    """A ``prometheus_client`` collector over a :class:`~statestore.StateManager`'s metrics.

    ``source`` is the manager (its :attr:`metrics_registry` is read at each
    scrape, so a manager with metrics off exposes nothing) or a
    :class:`MetricsRegistry`.
    """

    def __init__(self, source: Any) -> None:
        """Collect from ``source`` (a state manager or a metrics registry)."""
        self._source = source

    def _registry(self) -> MetricsRegistry | None:
        if isinstance(self._source, MetricsRegistry):
            return self._source
        registry: MetricsRegistry | None = self._source.metrics_registry
        return registry

    def collect(self) -> Iterator[Metric]:
        """One family per metric definition, one sample per tag set."""
        registry = self._registry()
        if registry is None:
            return
        families: dict[str, Metric] = {}
        for sample in registry.samples():
            definition = sample.definition
            if definition.kind == "rate":
                continue
            family = families.get(definition.name)
            if family is None:
                family = families[definition.name] = _family(definition)
            labels = [value for _name, value in sample.tags]
            if isinstance(sample.value, Histogram):
                assert isinstance(family, HistogramMetricFamily)
                family.add_metric(labels, _buckets(sample.value), sample.value.sum)
            else:
                family.add_metric(labels, float(sample.value))  # type: ignore[attr-defined]
        yield from families.values()


def _family(definition: MetricDefinition) -> Metric:
    name = definition.prometheus_name
    doc = f"{definition.description} ({definition.unit})"
    labels = list(definition.tags)
    if definition.kind == "counter":
        return CounterMetricFamily(name, doc, labels=labels)
    if definition.kind == "histogram":
        return HistogramMetricFamily(name, doc, labels=labels)
    return GaugeMetricFamily(name, doc, labels=labels)


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs ending with ``+Inf``."""
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(histogram.bounds, histogram.bucket_counts, strict=False):
        running += count
        out.append((repr(bound), float(running)))
    out.append(("+Inf", float(max(histogram.count, running))))  # count is read last: >= running
    return out
