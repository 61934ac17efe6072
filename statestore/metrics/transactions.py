"""The transaction coordinator's metrics (group ``TransactionCoordinator``, no tags).

The counters are read from :attr:`TransactionCoordinator.totals
<statestore.txn.coordinator.TransactionCoordinator.totals>` when a snapshot is
taken (the coordinator counts under its own lock); the decision latency is a
histogram the coordinator feeds through its ``decision_observer`` after each
decision, outside its locks.

Thread-safety: decisions run on many threads at once, so the histogram (one
writer by design) is fed under a lock of its own; the counters are plain
reads.
"""

from __future__ import annotations

import threading

from statestore.metrics.definitions import by_name
from statestore.metrics.registry import MetricsRegistry
from statestore.txn.coordinator import TransactionCoordinator

__all__ = ["register_transaction_metrics"]


def register_transaction_metrics(
    registry: MetricsRegistry, coordinator: TransactionCoordinator
) -> None:
    """Register the coordinator's counters and its decision-latency histogram."""
    totals = coordinator.totals
    registry.counter_from(by_name("transactions-committed-total"), lambda: totals.committed)
    registry.counter_from(by_name("transactions-aborted-total"), lambda: totals.aborted)
    registry.counter_from(
        by_name("transactions-rolled-forward-at-open-total"),
        lambda: totals.rolled_forward_at_open,
    )
    registry.counter_from(
        by_name("transactions-aborted-at-open-total"), lambda: totals.aborted_at_open
    )
    histogram = registry.histogram(by_name("decision-latency"))
    lock = threading.Lock()

    def observe(seconds: float) -> None:
        with lock:
            histogram.observe(seconds)

    coordinator.decision_observer = observe
