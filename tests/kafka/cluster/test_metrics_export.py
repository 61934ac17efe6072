"""The runtime's metrics on a Prometheus scrape of real processors on the broker, moving.

Processor ``i1`` runs with a skipping handler, a dead letter topic and one
standby replica; ``prometheus_client``'s HTTP server scrapes it on its own
thread while the test's thread polls (the collector reads the processor from
another thread, as in production).  Expected values come from what the test
fed and from the oracle, not from ``processor.metrics()``:

* after 40 records (one poison): ``process_total`` counts every record applied
  at least once (the poison's replay after the rewind counts again),
  ``commit_total`` >= 1 and the latency gauges > 0, ``dropped_records_total`` and
  ``processing_errors_total`` are 1, every task is ``running``;
* after 40 more: the counters have grown;
* a second processor ``i2`` (fresh state directory) joins: it takes partitions
  from ``i1`` and restores them (its ``restore_total`` > 0), and ``i1`` then keeps
  standbys of them whose ``records_lag`` shows on its scrape and reaches 0.
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from kafka_harness.broker import KafkaBroker
from statestore.kafka import Processor, log_and_continue
from statestore.metrics.prometheus import ProcessorCollector
from tests.kafka.cluster.oracle import PARTITIONS, App, run_until

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

Scrape = Callable[[], dict[str, list[tuple[dict[str, str], float]]]]


def _server(processor: Processor, thread_id: str) -> Iterator[Scrape]:
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, thread_id=thread_id))
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{server.server_port}/metrics"

    def scrape() -> dict[str, list[tuple[dict[str, str], float]]]:
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode()
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                out.setdefault(sample.name, []).append((sample.labels, sample.value))
        return out

    try:
        yield scrape
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def _value(page: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    """The one sample of a thread-level family (labelled with its thread only)."""
    ((labels, value),) = page[name]
    assert set(labels) == {"thread_id"}, labels
    return value


def test_a_scrape_shows_the_runtime_metrics_moving(cluster: KafkaBroker, tmp_path: Path) -> None:
    app = App(cluster.bootstrap_servers, "metrics-export", dlq=True)
    poison = 7
    app.feed(40)
    first = app.processor(
        tmp_path / "i1",
        fail_on=lambda seq: seq == poison,
        handler=log_and_continue,
        num_standby_replicas=1,
        standby_refresh_ms=200,
    )
    # closing(): a failed assertion still stops the server while its thread runs (a generator
    # left to the interpreter's exit would wait for a server thread already gone)
    with first, contextlib.closing(_server(first, "metrics-export-i1")) as scrapes:
        scrape = next(scrapes)
        run_until(lambda: first.poll_once(0.1), app.committed_end)
        first.commit()
        page = scrape()
        assert _value(page, "statestore_stream_thread_process_total") >= 40
        assert _value(page, "statestore_stream_thread_commit_total") >= 1
        assert _value(page, "statestore_stream_thread_commit_latency_avg_ms") > 0
        assert _value(page, "statestore_stream_thread_commit_latency_max_ms") > 0
        assert _value(page, "statestore_stream_thread_commit_rate") > 0
        assert _value(page, "statestore_stream_thread_process_rate") > 0
        assert _value(page, "statestore_stream_thread_dropped_records_total") == 1
        assert _value(page, "statestore_stream_thread_processing_errors_total") == 1
        assert _value(page, "statestore_stream_thread_restore_remaining_records_total") == 0
        states = page["statestore_stream_task_state"]
        assert sorted((labels["task_id"], labels["state"], value) for labels, value in states) == [
            (f"0_{p}", "running", 1.0) for p in range(PARTITIONS)
        ]
        processed = _value(page, "statestore_stream_thread_process_total")
        commits = _value(page, "statestore_stream_thread_commit_total")

        app.feed(40)
        run_until(lambda: first.poll_once(0.1), app.committed_end)
        first.commit()
        page = scrape()
        assert _value(page, "statestore_stream_thread_process_total") >= processed + 40
        assert _value(page, "statestore_stream_thread_commit_total") > commits
        assert _value(page, "statestore_stream_thread_dropped_records_total") == 1

        second = app.processor(
            tmp_path / "i2",
            fail_on=lambda seq: seq == poison,
            handler=log_and_continue,
            instance_id="i2",
            num_standby_replicas=1,
            standby_refresh_ms=200,
        )
        with second, contextlib.closing(_server(second, "metrics-export-i2")) as second_scrapes:
            second_scrape = next(second_scrapes)

            def both() -> None:
                first.poll_once(0.05)
                second.poll_once(0.05)

            def standbys_caught_up() -> bool:
                lags = scrape().get("statestore_stream_standby_records_lag", [])
                moved = {int(labels["partition"]) for labels, _v in lags}
                return (
                    len(second.assignment) > 0
                    and moved == set(second.assignment)
                    and all(value == 0 for _labels, value in lags)
                )

            run_until(both, standbys_caught_up)
            restored = second_scrape()
            # i2's partitions were restored from the changelog, or promoted from standbys it
            # warmed first (then nothing is replayed): the page shows the processor's count
            assert (
                _value(restored, "statestore_stream_thread_restore_total")
                == (second.metrics()["restore-total"])
            )
            assert _value(restored, "statestore_stream_thread_restore_remaining_records_total") == 0
            lags = scrape()["statestore_stream_standby_records_lag"]
            assert {labels["store"] for labels, _v in lags} == {"sums"}
            second.commit()
        first.commit()
    app.check(skipped=[poison])
