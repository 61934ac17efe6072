"""``StateManager.metrics()``: the registry's samples as one plain, JSON-friendly dict.

Shape::

    {
        "stores": {"<store>": {<partition int>: {"<metric name>": value, ...}}},
        "cleaner": {"<metric name>": value, ...},
        "transactions": {"<metric name>": value, ...},
        "ttl": {"<store>": {"<metric name>": value, ...}},   # only with a TTL store
    }

Counters, rates and gauges are numbers; a histogram is
``{"count", "sum", "avg", "max"}`` (seconds).  Per-partition names are unique
across their groups (``stream-state-metrics``, ``stream-task-metrics``,
``Log``), so one dict per partition holds them all; the group of each name is
in :mod:`statestore.metrics.definitions` and docs/metrics.md.  Untagged
metrics go to ``"transactions"`` when their group is the coordinator's
(``TransactionCoordinator``), else to ``"cleaner"``.

Thread-safety: a pure function of the samples.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from statestore.metrics.definitions import TRANSACTION_GROUP
from statestore.metrics.registry import Histogram, Sample

__all__ = ["nest_samples"]


def nest_samples(samples: Iterable[Sample]) -> dict[str, Any]:
    """Group ``samples`` into the shape of the module docstring (the first three keys always)."""
    stores: dict[str, dict[int, dict[str, Any]]] = {}
    cleaner: dict[str, Any] = {}
    transactions: dict[str, Any] = {}
    ttl: dict[str, dict[str, Any]] = {}
    for sample in samples:
        value = sample.value.summary() if isinstance(sample.value, Histogram) else sample.value
        tags = dict(sample.tags)
        if "store" in tags and "partition" not in tags:  # a TTL store's per-store counts
            ttl.setdefault(tags["store"], {})[sample.definition.name] = value
        elif "store" in tags:
            partition = stores.setdefault(tags["store"], {}).setdefault(int(tags["partition"]), {})
            partition[sample.definition.name] = value
        elif sample.definition.group == TRANSACTION_GROUP:
            transactions[sample.definition.name] = value
        else:
            cleaner[sample.definition.name] = value
    nested: dict[str, Any] = {"stores": stores, "cleaner": cleaner, "transactions": transactions}
    if ttl:
        nested["ttl"] = ttl
    return nested
