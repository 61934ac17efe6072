"""Prometheus exposition of a state manager's and a processor's metrics (extra ``statestore[prometheus]``).

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

:class:`ProcessorCollector` does the same for the distributed runtime: each
scrape takes one ``Processor.metrics()`` snapshot and exports it through
:func:`statestore.metrics.runtime.runtime_samples` (the runtime's own
windowed ``process-rate``, ``commit-rate`` and commit latencies are gauges
there, under Kafka Streams' names, beside the counters).  Tag names become
label names with ``_`` for ``-`` (``thread-id`` -> ``thread_id``).

Thread-safety: :meth:`StateStoreCollector.collect` and
:meth:`ProcessorCollector.collect` may run on any thread
(``prometheus_client`` scrapes on its server's threads); they only read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from statestore.errors import StateStoreError
from statestore.metrics.registry import Histogram, MetricDefinition, MetricsRegistry, Sample
from statestore.metrics.runtime import runtime_samples

__all__ = ["ProcessorCollector", "StateStoreCollector"]

logger = logging.getLogger(__name__)


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
        yield from _families(registry.samples())


class ProcessorCollector(Collector):
    """A ``prometheus_client`` collector over a distributed-mode ``Processor``'s metrics.

    ``thread_id`` is the value of the ``thread_id`` label of every family
    (Kafka Streams' ``thread-id``): give each processor of a registry its own,
    such as its config's ``transactional_id`` (``<application_id>-<instance_id>``).
    A scrape that races with the processor's close (a standby closing while
    its lag is read) exports nothing for that scrape and logs why at DEBUG.
    """

    def __init__(self, processor: Any, *, thread_id: str) -> None:
        """Collect from ``processor`` (a :class:`statestore.kafka.Processor`)."""
        self._processor = processor
        self._thread_id = thread_id

    def collect(self) -> Iterator[Metric]:
        """One family per runtime metric, one sample per thread, task or standby partition."""
        try:
            snapshot = self._processor.metrics()
        except (StateStoreError, RuntimeError) as exc:
            logger.debug("processor %s: metrics not read at this scrape: %s", self._thread_id, exc)
            return
        yield from _families(runtime_samples(snapshot, self._thread_id))


def _families(samples: Iterable[Sample]) -> Iterator[Metric]:
    """One family per definition in ``samples`` (rates left out), in first-seen order."""
    families: dict[str, Metric] = {}
    for sample in samples:
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
    labels = [tag.replace("-", "_") for tag in definition.tags]
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
