"""The registry's primitives: counters, windowed rates, gauges, histograms, removal, naming."""

from __future__ import annotations

import attrs
import pytest

from statestore.metrics import MetricDefinition, MetricsRegistry, nest_samples
from statestore.metrics.registry import LATENCY_BUCKETS_S, SAMPLE_WINDOW_S, Histogram

TAGS = (("store", "s"), ("partition", "0"))
COUNT = MetricDefinition(
    name="x-total",
    group="g",
    kind="counter",
    unit="calls",
    description="d",
    tags=("store", "partition"),
)
RATE = attrs.evolve(COUNT, name="x-rate", kind="rate", source="x-total")
GAUGE = MetricDefinition(name="level", group="g", kind="gauge", unit="1", description="d")
HIST = MetricDefinition(name="lat", group="g", kind="histogram", unit="seconds", description="d")


@attrs.define
class FakeClock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def values(registry: MetricsRegistry) -> dict[str, object]:
    return {sample.definition.name: sample.value for sample in registry.samples()}


def test_a_counter_counts_and_its_rate_divides_by_the_time_elapsed() -> None:
    clock = FakeClock()
    registry = MetricsRegistry(clock=clock)
    counter = registry.counter(COUNT, TAGS)
    registry.rate(RATE, TAGS)
    counter.value += 10
    counter.inc(5)
    clock.now += 3.0
    assert values(registry) == {"x-total": 15, "x-rate": pytest.approx(5.0)}


def test_the_rate_covers_at_most_two_sample_windows_as_kafkas() -> None:
    clock = FakeClock()
    registry = MetricsRegistry(clock=clock)
    counter = registry.counter(COUNT, TAGS)
    registry.rate(RATE, TAGS)
    counter.value = 300
    clock.now += SAMPLE_WINDOW_S / 2
    assert values(registry)["x-rate"] == pytest.approx(300 / 15)
    clock.now += SAMPLE_WINDOW_S / 2  # a second window starts (at 300)
    assert values(registry)["x-rate"] == pytest.approx(300 / 30)
    clock.now += SAMPLE_WINDOW_S / 2
    assert values(registry)["x-rate"] == pytest.approx(300 / 45)
    clock.now += SAMPLE_WINDOW_S / 2  # a third: the first (with the 300) expires
    assert values(registry)["x-rate"] == pytest.approx(0.0)
    counter.value += 60
    clock.now += SAMPLE_WINDOW_S / 2
    assert values(registry)["x-rate"] == pytest.approx(60 / 45)


def test_a_gauge_is_read_at_snapshot_time_and_one_that_fails_is_left_out() -> None:
    registry = MetricsRegistry()
    level = [1]
    registry.gauge(GAUGE, lambda: level[0])
    registry.gauge(attrs.evolve(GAUGE, name="broken"), lambda: 1 // 0)
    registry.gauge(attrs.evolve(GAUGE, name="absent"), lambda: None)
    level[0] = 7
    assert values(registry) == {"level": 7}


def test_a_histogram_buckets_counts_sums_and_keeps_the_max() -> None:
    histogram = Histogram()
    for value in (0.00001, 0.003, 0.003, 20.0):
        histogram.observe(value)
    assert histogram.summary() == {
        "count": 4,
        "sum": pytest.approx(20.00601),
        "avg": pytest.approx(20.00601 / 4),
        "max": 20.0,
    }
    assert sum(histogram.bucket_counts) == 4
    assert histogram.bucket_counts[0] == 1  # <= 50 us
    assert histogram.bucket_counts[LATENCY_BUCKETS_S.index(0.005)] == 2
    assert histogram.bucket_counts[-1] == 1  # above every bound: +Inf
    assert Histogram().summary()["avg"] == 0.0


def test_remove_drops_every_metric_with_the_tags_and_tags_must_match_the_definition() -> None:
    registry = MetricsRegistry()
    registry.counter(COUNT, TAGS)
    registry.rate(RATE, TAGS)
    registry.counter(COUNT, (("store", "t"), ("partition", "0")))
    registry.histogram(HIST)
    assert registry.remove({"store": "s"}) == 2
    assert sorted((s.definition.name, s.tags) for s in registry.samples()) == [
        ("lat", ()),
        ("x-total", (("store", "t"), ("partition", "0"))),
    ]
    with pytest.raises(ValueError, match="tags"):
        registry.counter(COUNT, (("store", "s"),))


def test_recording_levels() -> None:
    debug = attrs.evolve(HIST, level="DEBUG")
    assert MetricsRegistry().records(HIST)
    assert not MetricsRegistry().records(debug)
    assert MetricsRegistry(level="DEBUG").records(debug)


def test_prometheus_names() -> None:
    assert COUNT.prometheus_name == "statestore_g_x_total"
    assert HIST.prometheus_name == "statestore_g_lat_seconds"
    state = attrs.evolve(COUNT, group="stream-state-metrics")
    assert state.prometheus_name == "statestore_stream_state_x_total"
    log_size = attrs.evolve(GAUGE, name="NumLogSegments", group="Log")
    assert log_size.prometheus_name == "statestore_log_num_log_segments"
    cleaner = attrs.evolve(GAUGE, name="max-dirty-percent", group="LogCleanerManager")
    assert cleaner.prometheus_name == "statestore_log_cleaner_manager_max_dirty_percent"


def test_nest_samples_groups_by_store_and_partition() -> None:
    registry = MetricsRegistry()
    registry.counter(COUNT, TAGS).value = 3
    registry.histogram(HIST).observe(0.5)
    assert nest_samples(registry.samples()) == {
        "stores": {"s": {0: {"x-total": 3}}},
        "cleaner": {"lat": {"count": 1, "sum": 0.5, "avg": 0.5, "max": 0.5}},
        "transactions": {},
    }
