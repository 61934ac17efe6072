"""Smoke test of the benchmark suite: every store case runs at tiny sizes and reports.

This keeps ``benchmarks/`` from rotting as the APIs under it change.  It checks that
the scripts run and produce well-formed results, never the numbers themselves
(performance is judged by ``python -m benchmarks.run``, not by timed unit tests).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import (
    aio_lag_bench,
    compactness_bench,
    offset_map_bench,
    plots,
    stream_bench,
    timeline_bench,
)
from benchmarks._harness import Result, Target
from benchmarks.run import STORE_CASES, _last_json_line, _results_from

ROOT = Path(__file__).resolve().parent.parent


def test_target_directions() -> None:
    assert Target("ratio>=", 0.6).check(1.0, 0.7)
    assert not Target("ratio>=", 0.6).check(1.0, 0.5)
    assert Target("ratio<=", 1.3).check(1.0, 1.2)
    assert not Target("value>=", 1e6).check(5e5, None)
    assert Result("x", 2.0, "s", "y", 1.0, Target("ratio<=", 1.3)).status == "FAIL"
    assert Result("x", 1.0, "s").status == "info"


def test_runner_reads_the_last_json_line_and_other_shapes() -> None:
    text = 'table\n{"bench": "a", "results": [{"name": "n", "value": 3, "unit": "u"}]}\n'
    payload = _last_json_line(text)
    assert payload is not None
    rows = _results_from(payload, "codec")
    assert [(r.name, r.value, r.group) for r in rows] == [("n", 3.0, "codec")]
    assert _last_json_line("no json here") is None


def test_runner_tiny_store_suite(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--tiny", "--only", "store", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    store = report["scripts"]["store"]
    assert store["exit_code"] == 0
    names = " ".join(r["name"] for r in store["results"])
    for word in (
        "put",
        "get",
        "range",
        "full restore",
        "incremental",
        "updates/key",
        "size",
        "compaction",
        "writer",
    ):
        assert word in names, f"{word!r} missing from {names}"
    for r in store["results"]:
        assert r["value"] == r["value"], r  # not NaN
        assert r["status"] in ("PASS", "FAIL", "info")
    assert set(STORE_CASES) >= {"put", "get", "restore"}


def test_compactness_bench_store_defaults_keep_a_long_running_store_compact(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The counts are deterministic (simulated clock): with the store defaults a day of
    updates over few keys replays a few times the live keys; Kafka's defaults replay all."""
    assert compactness_bench.main(["--quick"]) == 0
    payload = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (row,) = payload["results"]
    assert row["status"] == "PASS", row
    assert row["baseline_value"] == 50  # Kafka defaults: every update replayed (50 per key)


def test_offset_map_bench_reports_growth_and_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert offset_map_bench.main(["--tiny"]) == 0
    payload = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = {row["name"]: row for row in payload["results"]}
    budget = rows["keys mapped per 4 MiB (16 B/slot, load factor 0.9)"]
    assert budget["value"] == 235_929
    assert budget["status"] == "PASS"
    temporaries = rows["merge temporaries per staged record (traced, 4 MiB map filled)"]
    assert temporaries["status"] == "PASS", temporaries  # tracemalloc: deterministic, not timed
    assert any(name.startswith("growth:") for name in rows)


def test_metrics_bench_runs_and_reports_its_target() -> None:
    payload = _bench_payload(
        "benchmarks.metrics_bench", "--records", "2000", "--reps", "1", timeout_s=300
    )
    rows = {row["name"]: row for row in payload["results"]}
    assert rows["put, commit/1,000, fsync, metrics INFO"]["target"] == "ratio>= 0.97"
    assert {row["baseline_name"] for row in rows.values()} == {"metrics OFF"}


def test_txn_bench_runs_every_case_and_reports_the_durable_floor_target() -> None:
    payload = _bench_payload("benchmarks.txn_bench", "--tiny")
    rows = {row["name"]: row for row in payload["results"]}
    single = rows["put + commit/500, one store"]
    assert single["target"] == "ratio>= 0.9"
    assert single["baseline_name"].startswith("durable floor")
    assert any(name.startswith("commit of 3 stores") for name in rows)
    threads = [row for name, row in rows.items() if "thread(s)" in name]
    assert len(threads) == 8  # 1 and 4 threads: one log, own stores, scoped and unscoped blocks
    for row in payload["results"]:
        assert row["value"] == row["value"] and row["value"] > 0, row  # not NaN
    assert payload["loadavg_before_after_case"].keys() == {"single", "multi", "threads"}


def _bench_payload(*argv: str, timeout_s: float = 600) -> dict[str, Any]:
    """Run ``python -m ARGV``; it must exit 0 and end with its JSON line, returned."""
    proc = subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = _last_json_line(proc.stdout)
    assert payload is not None
    return payload


def _run_bench(*argv: str) -> dict[str, Any]:
    """:func:`_bench_payload`, every result a number above 0."""
    payload = _bench_payload(*argv)
    for row in payload["results"]:
        assert row["value"] == row["value"] and row["value"] > 0, row  # not NaN
    return payload


def test_commit_bench_compares_with_sqlite_and_counts_fsyncs() -> None:
    payload = _run_bench("benchmarks.commit_bench", "--size", "tiny", "--only", "one_put")
    baselines = {row["baseline_name"] for row in payload["results"]}
    expected = {"sqlite", "floor", "rocksdict sync"}
    if importlib.util.find_spec("lmdb") is not None:
        expected.add("lmdb")  # a baseline only where it is installed
    assert baselines == expected


def test_service_bench_runs_every_service_at_1_and_8_clients() -> None:
    payload = _run_bench("benchmarks.service_bench", "--seconds", "0.3")
    assert len(payload["raw"]) == 3 * 2 * 2  # services x client counts x (writes, reads)


def test_plots_draw_every_picture_from_benchmark_json(tmp_path: Path) -> None:
    """timeline_bench's JSON, a metrics_bench-shaped and a runner-shaped report -> four PNGs,
    byte-identical when redrawn from the same JSON."""
    bench = tmp_path / "bench"
    assert timeline_bench.main(["--quick", "--out", str(bench / "timeline.json")]) == 0
    row = {
        "name": "put, commit/1,000, fsync, metrics INFO",
        "value": 2.0,
        "samples": [1.9, 2.1],
        "baseline_name": "metrics OFF",
        "baseline_value": 2.1,
        "baseline_samples": [2.0, 2.2],
        "ratio": 2.0 / 2.1,
        "target": "ratio>= 0.97",
        "status": "FAIL",
    }
    (bench / "metrics.json").write_text(json.dumps({"results": [row]}))
    (bench / "store.json").write_text(json.dumps({"scripts": {"store": {"results": [row]}}}))
    images = tmp_path / "img"
    assert plots.main(["--bench-dir", str(bench), "--img-dir", str(images)]) == 0
    names = ["log-size.png", "metrics-overhead.png", "ratios-throughput.png"]
    assert sorted(p.name for p in images.iterdir()) == names
    first = {name: (images / name).read_bytes() for name in names}
    assert all(data.startswith(b"\x89PNG") for data in first.values())
    assert plots.main(["--bench-dir", str(bench), "--img-dir", str(images)]) == 0
    assert {name: (images / name).read_bytes() for name in names} == first


PICTURES = ("ratios-throughput", "ratios-cost", "metrics-overhead", "log-size")


def test_the_performance_page_shows_the_committed_pictures() -> None:
    text = (ROOT / "docs" / "performance.md").read_text()
    for name in PICTURES:
        assert (ROOT / "docs" / "img" / f"{name}.png").is_file(), name
        assert f"](img/{name}.png)" in text, name
    assert sorted(p.stem for p in (ROOT / "docs" / "img").glob("*.png")) == sorted(PICTURES)


def test_the_pictures_and_the_page_hold_the_numbers_of_the_committed_json(
    tmp_path: Path,
) -> None:
    """Each figure is redrawn from docs/bench/*.json byte for byte, the page's tables are
    the same JSON, and every PASS/FAIL is the one the JSON records and its ratio implies."""
    bench = ROOT / "docs" / "bench"
    store = json.loads((bench / "store.json").read_text())
    timeline = json.loads((bench / "timeline.json").read_text())
    text = (ROOT / "docs" / "performance.md").read_text()
    assert plots.doc_block(text, "ratios") == plots.ratio_table(store)
    assert plots.doc_block(text, "restore") == plots.restore_table(timeline)

    with_baseline = [r for r in plots.results(store) if r.get("ratio") is not None]
    higher, lower = plots.ratio_rows(store, "higher"), plots.ratio_rows(store, "lower")
    assert len(higher) + len(lower) == len(with_baseline)  # each drawn once
    for which, rows in (("higher", higher), ("lower", lower)):
        for row in rows:
            limit = plots.threshold(row)
            if limit is None:
                assert row["status"] not in ("PASS", "FAIL"), row
                continue
            assert ("<=" in row["target"]) == (which == "lower"), row  # one direction a chart
            met = row["ratio"] >= limit if which == "higher" else row["ratio"] <= limit
            assert row["status"] == ("PASS" if met else "FAIL"), row
            assert f"{row['ratio']:.2f}x | {row['target']} | {row['status']} |" in text, row
    for point in timeline["series"]["restore_vs_updates"]["points"]:
        assert point["records_replayed"] == timeline["series"]["restore_vs_updates"]["keys"]

    images, page = tmp_path / "img", tmp_path / "performance.md"
    page.write_text(text)
    argv = ["--bench-dir", str(bench), "--img-dir", str(images), "--doc", str(page)]
    assert plots.main(argv) == 0
    assert page.read_text() == text  # the page's tables are already what the JSON says
    for name in PICTURES:
        committed = (ROOT / "docs" / "img" / f"{name}.png").read_bytes()
        assert (images / f"{name}.png").read_bytes() == committed, f"{name}.png: ./dev plots"


def test_the_stream_table_is_the_committed_json() -> None:
    """docs/performance.md's processing-throughput table is docs/bench/stream.json's."""
    text = (ROOT / "docs" / "performance.md").read_text()
    begin, end = stream_bench.TABLE_BEGIN, stream_bench.TABLE_END
    block = text[text.index(begin) + len(begin) : text.index(end)].strip("\n")
    payload = json.loads((ROOT / "docs" / "bench" / "stream.json").read_text())
    assert block == stream_bench.markdown_table(payload)
    assert payload["events"] == 500_000 and payload["partitions"] == 6


def test_aio_lag_bench_reports_every_case_against_the_idle_loop() -> None:
    # Not _run_bench: the lag a workload adds to the idle loop's p99 may be below zero.
    payload = _bench_payload("benchmarks.aio_lag_bench", "--seconds", "0.2", "--rounds", "1")
    assert all(row["value"] == row["value"] for row in payload["results"])  # not NaN
    assert set(payload["cases"]) == set(aio_lag_bench.CASES)
    rows = {row["name"]: row for row in payload["results"]}
    assert rows["loop lag p99 added, one_put"]["baseline_name"] == "idle loop, same run (p99)"
    # the control shows the probe sees a loop blocked by commits made on it
    assert rows["loop lag p50, commits on the loop (control)"]["status"] == "PASS"
    assert all(case["wakeups"] > 0 for case in payload["cases"].values())


def test_the_loop_lag_table_is_the_committed_json() -> None:
    """docs/serving.md's loop-lag table is docs/bench/aio_lag.json's."""
    text = (ROOT / "docs" / "serving.md").read_text()
    begin, end = aio_lag_bench.TABLE_BEGIN, aio_lag_bench.TABLE_END
    block = text[text.index(begin) + len(begin) : text.index(end)].strip("\n")
    payload = json.loads((ROOT / "docs" / "bench" / "aio_lag.json").read_text())
    assert block == aio_lag_bench.markdown_table(payload)
