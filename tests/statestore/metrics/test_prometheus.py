"""The Prometheus collector: every non-rate metric as one family, parsed back by prometheus_client."""

from __future__ import annotations

import attrs
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statestore.metrics.definitions import ALL_METRICS
from statestore.metrics.prometheus import ProcessorCollector, StateStoreCollector
from statestore.metrics.runtime import RUNTIME_METRICS
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


class _Snapshot:
    """A processor stand-in: ``metrics()`` returns a fixed snapshot, or raises as a closing one."""

    def __init__(self, snapshot: dict[str, object] | None) -> None:
        self.snapshot = snapshot

    def metrics(self) -> dict[str, object]:
        if self.snapshot is None:
            raise RuntimeError("Consumer closed")
        return self.snapshot


def _scrape_processor(processor: object) -> str:
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, thread_id="app-i1"))
    return generate_latest(registry).decode()


def test_a_processor_snapshot_is_exported_under_kafka_streams_names() -> None:
    snapshot: dict[str, object] = {
        "commit-total": 3,
        "commit-failed-total": 1,
        "commit-rate": 0.5,
        "commit-latency-avg": 12.5,
        "commit-latency-max": 20.0,
        "process-total": 40,
        "process-rate": 7.25,
        "restore-total": 9,
        "restore-remaining-records-total": 2,
        "processing-errors-total": 1,
        "dropped-records-total": 1,
        "task-states": {1: "running", 0: "restoring"},
        "standby-lag": {2: {"sums": 5, "other": None}},
    }
    text = _scrape_processor(_Snapshot(snapshot))
    thread = '{thread_id="app-i1"}'
    lines = set(text.splitlines())
    assert {
        f"statestore_stream_thread_process_total{thread} 40.0",
        f"statestore_stream_thread_process_rate{thread} 7.25",
        f"statestore_stream_thread_commit_total{thread} 3.0",
        f"statestore_stream_thread_commit_failed_total{thread} 1.0",
        f"statestore_stream_thread_commit_rate{thread} 0.5",
        f"statestore_stream_thread_commit_latency_avg_ms{thread} 12.5",
        f"statestore_stream_thread_commit_latency_max_ms{thread} 20.0",
        f"statestore_stream_thread_restore_total{thread} 9.0",
        f"statestore_stream_thread_restore_remaining_records_total{thread} 2.0",
        f"statestore_stream_thread_processing_errors_total{thread} 1.0",
        f"statestore_stream_thread_dropped_records_total{thread} 1.0",
        'statestore_stream_task_state{state="restoring",task_id="0_0",thread_id="app-i1"} 1.0',
        'statestore_stream_task_state{state="running",task_id="0_1",thread_id="app-i1"} 1.0',
        'statestore_stream_standby_records_lag{partition="2",store="sums",thread_id="app-i1"} 5.0',
    } <= lines
    assert 'store="other"' not in text, "a standby with no fetch yet has no lag sample"
    assert "# TYPE statestore_stream_thread_process_total counter" in lines
    assert "# TYPE statestore_stream_thread_process_rate gauge" in lines
    names = {family.name for family in text_string_to_metric_families(text)}
    expected = {
        d.prometheus_name.removesuffix("_total") if d.kind == "counter" else d.prometheus_name
        for d in RUNTIME_METRICS
    }
    assert names == expected


def test_a_scrape_racing_with_close_exports_nothing() -> None:
    assert _scrape_processor(_Snapshot(None)) == ""
