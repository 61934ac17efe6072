"""The distributed-mode benchmark cases run (tiny sizes, the session's broker) and report well-formed rows.

Never checks the numbers: performance is judged by ``python -m benchmarks.cluster_bench``.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.cluster_bench import case_eos, case_restore, case_restore_partitions
from benchmarks.stream_bench import bench
from kafka_harness.broker import KafkaBroker


def test_cluster_bench_cases_run(cluster: KafkaBroker) -> None:
    rows = case_restore(cluster.bootstrap_servers, 300, 1)
    rows += case_eos(cluster.bootstrap_servers, {"txns_100": 2, "txns_1000": 1}, 1)
    rows += case_restore_partitions(cluster.bootstrap_servers, 300, 1)
    assert [r.unit for r in rows] == ["rec/s"] * 5
    assert all(r.value > 0 and r.baseline_value for r in rows)


def test_stream_bench_runs_statestore_and_the_floor(cluster: KafkaBroker, tmp_path: Path) -> None:
    rows, runs = bench(
        cluster.bootstrap_servers,
        events=600,
        keys=50,
        reps=1,
        cadences=["100/txn"],
        cases=[("statestore", "exactly_once_v2"), ("raw", "exactly_once_v2")],
        quix_python=None,
        work=tmp_path,
    )
    assert [r.unit for r in rows] == ["rec/s", "us/rec"]
    assert all(r.value > 0 and r.baseline_value for r in rows)
    assert all(run["records"] > 0 and run["cpu_s"] > 0 for run in runs)
    for run in runs:  # the CPU split by thread: the interpreter's own, librdkafka's
        split = run["threads_cpu_s"]
        # /proc counts thread CPU in clock ticks (10 ms): a smoke run's share may round to 0
        assert "main" in split and all(seconds >= 0 for seconds in split.values())
        assert any(group.startswith("rdk:") for group in split)


def test_window_quix_bench_runs_the_statestore_side(cluster: KafkaBroker, tmp_path: Path) -> None:
    from benchmarks import window_quix_bench  # noqa: PLC0415

    _results, runs = window_quix_bench.bench(
        cluster.bootstrap_servers,
        events=2_000,
        keys=100,
        reps=1,
        cadences=["1000/txn"],
        quix_python=None,
        work=tmp_path,
        cases=("statestore",),
    )
    (run,) = runs
    assert run["case"] == "statestore"
    assert run["records"] > 0
    assert run["wall_s"] > 0
    assert run["cpu_s"] > 0
