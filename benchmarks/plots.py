"""The pictures of docs/performance.md, drawn with matplotlib from committed benchmark JSON.

Usage::

    python -m benchmarks.plots          # redraw docs/img/*.png from docs/bench/*.json
    python -m benchmarks.plots --run    # re-run the benchmarks first (minutes), then redraw
    ./dev plots                         # the same as the first, with the bench extra installed

Inputs (``docs/bench/``, written by ``--run``; each is a benchmark's own JSON):

=====================  ====================================================================
file                   written by
=====================  ====================================================================
``store.json``         ``python -m benchmarks.run --only put --only get --only restore
                       --only updates --json ...`` (the runner's report)
``metrics.json``       ``python -m benchmarks.metrics_bench`` (its JSON line)
``timeline.json``      ``python -m benchmarks.timeline_bench --out ...``
=====================  ====================================================================

Outputs (``docs/img/``): ``ratios.png`` (every result with a same-run baseline, as a
ratio, with its target), ``metrics-overhead.png`` (throughput per recording level, every
sample), ``log-size.png`` (changelog size and segments over the updates, cleaner on and
off), ``restore-vs-updates.png`` (full restore time against updates per key, compacted).
A missing input skips its picture with a message.  The PNGs are rendered with fixed
sizes, fonts and no timestamps, so a redraw from the same JSON gives the same picture.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "docs" / "bench"
IMG = ROOT / "docs" / "img"
_dirs = {"bench": BENCH, "img": IMG}
"""Where inputs are read and pictures written (``--bench-dir``/``--img-dir`` change them)."""

_PASS, _FAIL, _INFO = "#2e7d32", "#c62828", "#607d8b"


def _plt() -> Any:
    import matplotlib  # noqa: PLC0415 - optional: the bench extra

    matplotlib.use("Agg")
    matplotlib.rcParams.update(
        {
            "font.size": 9,
            "svg.hashsalt": "statestore",
            "figure.dpi": 100,
            "savefig.dpi": 100,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _save(fig: Any, name: str) -> Path:
    _dirs["img"].mkdir(parents=True, exist_ok=True)
    path = _dirs["img"] / name
    fig.savefig(path, metadata={"Software": None}, bbox_inches="tight")
    _plt().close(fig)
    print(f"wrote {path}")
    return path


def _load(name: str) -> dict[str, Any] | None:
    path = _dirs["bench"] / name
    if not path.is_file():
        print(f"skipped: {path} is missing (python -m benchmarks.plots --run)")
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _results(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Result rows of a runner report or of one script's payload."""
    if "scripts" in report:
        return [row for payload in report["scripts"].values() for row in payload.get("results", [])]
    return list(report.get("results", []))


def plot_ratios(report: dict[str, Any]) -> Path | None:
    """Every result with a baseline, as ours / baseline, with its target."""
    rows = [r for r in _results(report) if r.get("ratio") is not None]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.2))
    labels = [f"{r['name']}  vs  {r['baseline_name']}" for r in rows]
    ratios = [r["ratio"] for r in rows]
    colors = [{"PASS": _PASS, "FAIL": _FAIL}.get(r.get("status", ""), _INFO) for r in rows]
    y = list(range(len(rows)))[::-1]
    ax.barh(y, ratios, color=colors, height=0.6)
    for yi, row, ratio in zip(y, rows, ratios, strict=True):
        target = row.get("target")
        if target:
            threshold = float(str(target).split()[-1])
            ax.plot([threshold, threshold], [yi - 0.4, yi + 0.4], color="black", linewidth=1.5)
        ax.text(ratio, yi, f" {ratio:.2f}x", va="center", fontsize=8)
    ax.axvline(1.0, color="#999999", linewidth=0.8, linestyle="--")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("ratio to the same-run baseline (black tick: target; green PASS, red FAIL)")
    ax.set_title("statestore against its baselines")
    return _save(fig, "ratios.png")


def plot_metrics_overhead(payload: dict[str, Any]) -> Path | None:
    """Throughput per recording level, every repetition as a dot, the median as a bar."""
    rows = _results(payload)
    if not rows:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax, kind in zip(axes, ("put", "get"), strict=True):
        mine = [r for r in rows if r["name"].startswith(kind)]
        if not mine:
            continue
        series = [("OFF", mine[0]["baseline_samples"], mine[0]["baseline_value"])]
        series += [(r["name"].rsplit(" ", 1)[-1], r["samples"], r["value"]) for r in mine]
        for x, (_label, samples, median) in enumerate(series):
            ax.bar(x, median / 1000, color="#90a4ae", width=0.6)
            ax.scatter([x] * len(samples), [s / 1000 for s in samples], color="black", s=8)
            ax.text(x, median / 1000, f"{median / 1000:.0f}k", ha="center", va="bottom")
        ax.set_xticks(range(len(series)), [label for label, _s, _m in series])
        ax.set_ylabel("k records/s" if kind == "put" else "k gets/s")
        title = "put + commit/1,000 (fsync)" if kind == "put" else "get, random key"
        ax.set_title(title)
    fig.suptitle("metrics_recording_level: throughput (bar: median, dots: repetitions)", y=1.06)
    return _save(fig, "metrics-overhead.png")


def plot_log_size(payload: dict[str, Any]) -> Path | None:
    """Changelog size over the updates written, with and without the cleaner."""
    series = payload.get("series", {}).get("size_over_time")
    if not series:
        return None
    plt = _plt()
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 4.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for name, color in (("uncleaned", "#c62828"), ("cleaned", "#2e7d32")):
        points = series[name]
        x = [p["records_written"] / 1000 for p in points]
        label = "cleaner off" if name == "uncleaned" else "cleaner on (its own due logic)"
        top.plot(x, [p["size_bytes"] / 2**20 for p in points], color=color, label=label)
        bottom.step(x, [p["segments"] for p in points], color=color, where="post")
    floor = series["fully_compacted_bytes"] / 2**20
    top.axhline(floor, color="#999999", linestyle="--", linewidth=0.8)
    top.text(0, floor, " fully compacted (one record per key)", va="bottom", fontsize=8)
    top.set_ylabel("Size (MiB)")
    top.legend(loc="upper left")
    top.set_title(f"changelog size over time ({series['keys']:,} keys, 1 MiB segments)")
    bottom.set_ylabel("NumLogSegments")
    bottom.set_xlabel("thousand updates written")
    return _save(fig, "log-size.png")


def plot_restore(payload: dict[str, Any]) -> Path | None:
    """Full restore time against updates per key, with the log compacted."""
    series = payload.get("series", {}).get("restore_vs_updates")
    if not series:
        return None
    points = series["points"]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3))
    x = [p["updates_per_key"] for p in points]
    ax.plot(x, [p["seconds"] for p in points], marker="o", color="#2e7d32", label="restore time")
    for p in points:
        for s in p["samples"]:
            ax.scatter([p["updates_per_key"]], [s], color="black", s=6)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("updates per key written before compaction")
    ax.set_ylabel("full restore (s)")
    twin = ax.twinx()
    twin.bar(x, [p["records_written"] / 1000 for p in points], alpha=0.15, color="#c62828")
    twin.set_ylabel("thousand records written (bars)")
    ax.set_title(f"full restore of {series['keys']:,} keys, compacted: replays the live keys only")
    return _save(fig, "restore-vs-updates.png")


def run_benchmarks() -> None:
    """Re-run the benchmarks whose JSON the pictures read (minutes on 2 cores).

    The store rows compare with quixstreams only where the bench extra is installed.
    """
    bench = _dirs["bench"]
    bench.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    commands = [
        [
            *(py, "-m", "benchmarks.run", "--json", str(bench / "store.json")),
            *("--only", "put", "--only", "get", "--only", "restore", "--only", "updates"),
        ],
        [py, "-m", "benchmarks.timeline_bench", "--out", str(bench / "timeline.json")],
    ]
    for command in commands:
        print("running", " ".join(command[1:]), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
    proc = subprocess.run(
        [py, "-m", "benchmarks.metrics_bench"], cwd=ROOT, check=True, capture_output=True, text=True
    )
    print(proc.stdout)
    line = proc.stdout.strip().splitlines()[-1]
    (bench / "metrics.json").write_text(
        json.dumps(json.loads(line), indent=1, sort_keys=True) + "\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Draw every picture whose input exists; with ``--run`` produce the inputs first."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", action="store_true", help="re-run the benchmarks first")
    parser.add_argument("--bench-dir", type=Path, default=BENCH, help="where the JSON inputs are")
    parser.add_argument("--img-dir", type=Path, default=IMG, help="where the PNGs go")
    args = parser.parse_args(argv)
    _dirs["bench"], _dirs["img"] = args.bench_dir, args.img_dir
    if args.run:
        run_benchmarks()
    store = _load("store.json")
    if store is not None:
        plot_ratios(store)
    metrics = _load("metrics.json")
    if metrics is not None:
        plot_metrics_overhead(metrics)
    timeline = _load("timeline.json")
    if timeline is not None:
        plot_log_size(timeline)
        plot_restore(timeline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
