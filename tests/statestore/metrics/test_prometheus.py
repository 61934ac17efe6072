"""The Prometheus collector: every non-rate metric as one family, parsed back by prometheus_client."""

from __future__ import annotations

import attrs
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statestore.metrics.definitions import ALL_METRICS
from statestore.metrics.prometheus import StateStoreCollector
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import NO_CLEANER


def scrape(source: object) -> dict[str, object]:
    registry = CollectorRegistry()
    registry.register(StateStoreCollector(source))
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_store_metrics_scraped_and_parsed(open_manager: OpenManager) -> None:
    manager = open_manager(config=attrs.evolve(NO_CLEANER, metrics_recording_level="DEBUG"))
    store = manager.store("users", partitions=2)
    for i in range(30):
        store[f"u{i}"] = {"i": i}
    store.get("u1")
    manager.commit()
    families = scrape(manager)
    puts = families["statestore_stream_state_put"]  # the parser drops a counter's _total
    assert puts.type == "counter"  # type: ignore[attr-defined]
    by_partition = {
        s.labels["partition"]: s.value
        for s in puts.samples  # type: ignore[attr-defined]
        if s.name.endswith("_total")
    }
    snapshot = manager.metrics()["stores"]["users"]
    assert by_partition == {str(p): float(snapshot[p]["put-total"]) for p in (0, 1)}
    assert sum(by_partition.values()) == 30
    latency = families["statestore_stream_state_commit_latency_seconds"]
    assert latency.type == "histogram"  # type: ignore[attr-defined]
    counts = [s for s in latency.samples if s.name.endswith("_count")]  # type: ignore[attr-defined]
    assert sorted(s.value for s in counts) == [1.0, 1.0]
    inf = [s for s in latency.samples if s.labels.get("le") == "+Inf"]  # type: ignore[attr-defined]
    assert len(inf) == 2
    log_end = families["statestore_log_log_end_offset"]
    # 30 records plus one COMMIT marker per partition (a two-partition commit is a transaction)
    assert sum(s.value for s in log_end.samples) == 32  # type: ignore[attr-defined]
    assert "statestore_stream_state_get_latency_seconds" in families
    assert not any(name.endswith("_rate") for name in families)


def test_every_family_name_is_a_catalog_name(open_manager: OpenManager) -> None:
    manager = open_manager(config=attrs.evolve(NO_CLEANER, run_cleaner=True))
    store = manager.store("s")
    store["a"] = 1
    manager.commit()
    families = scrape(manager)
    expected = {
        d.prometheus_name.removesuffix("_total") if d.kind == "counter" else d.prometheus_name
        for d in ALL_METRICS
        if d.kind != "rate"
    }
    assert set(families) <= expected
    assert "statestore_log_cleaner_manager_uncleanable_partitions_count" in families


def test_metrics_off_exposes_nothing(open_manager: OpenManager) -> None:
    manager = open_manager(config=attrs.evolve(NO_CLEANER, metrics_recording_level="OFF"))
    manager.store("s")
    assert scrape(manager) == {}
