"""A TTL store's expiry counts as metrics (:data:`~statestore.metrics.definitions.TTL_METRICS`).

Thread-safety: registration is done by the manager under its lock; the
counters are read at snapshot time from the store's
:class:`~statestore.stores.time.ttl.TtlCounts` (integers: a snapshot may lag a
count by one).
"""

from __future__ import annotations

from typing import Any

from statestore.metrics.definitions import by_name
from statestore.metrics.registry import MetricsRegistry

__all__ = ["register_ttl_metrics"]


def register_ttl_metrics(registry: MetricsRegistry, store: Any) -> None:
    """Register ``expired-reads-total`` and ``expired-swept-total`` of ``store`` (a TTL store).

    ``store`` has ``name`` and ``counts`` (``expired_reads``, ``expired_swept``);
    the metrics go with the store's other metrics when it closes (tag ``store``).
    """
    tags = (("store", store.name),)
    counts = store.counts
    registry.counter_from(by_name("expired-reads-total"), lambda: counts.expired_reads, tags)
    registry.counter_from(by_name("expired-swept-total"), lambda: counts.expired_swept, tags)
