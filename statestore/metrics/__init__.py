"""Metrics of stores, changelogs and the cleaner, with Kafka's names and groups where Kafka has them.

:class:`MetricsRegistry` holds them (one per state manager);
:mod:`~statestore.metrics.definitions` is the catalog docs/metrics.md is held
equal to; the store stack's metered layer
(:class:`statestore.stores.metered.MeteredStore`, built over this package)
records a store partition's operations; :func:`register_cleaner_metrics` reads the
cleaner; :func:`register_transaction_metrics` reads the transaction
coordinator.  ``StateManager.metrics()`` returns :func:`nest_samples` of the
registry; :mod:`statestore.metrics.prometheus` (extra ``statestore[prometheus]``)
exposes the same samples to Prometheus.
"""

from __future__ import annotations

from statestore.metrics.cleaner import register_cleaner_metrics
from statestore.metrics.definitions import ALL_METRICS, by_name
from statestore.metrics.registry import (
    Counter,
    Gauge,
    Histogram,
    MetricDefinition,
    MetricsRegistry,
    Sample,
)
from statestore.metrics.snapshot import nest_samples
from statestore.metrics.transactions import register_transaction_metrics

__all__ = [
    "ALL_METRICS",
    "Counter",
    "Gauge",
    "Histogram",
    "MetricDefinition",
    "MetricsRegistry",
    "Sample",
    "by_name",
    "nest_samples",
    "register_cleaner_metrics",
    "register_transaction_metrics",
]
