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

Outputs (``docs/img/``): ``ratios-throughput.png`` and ``ratios-cost.png`` (every result
with a same-run baseline, as a ratio with its target and the PASS/FAIL the JSON records:
one chart per direction, higher-is-better throughputs apart from lower-is-better times and
sizes), ``metrics-overhead.png`` (throughput per recording level, every sample),
``log-size.png`` (changelog size and segments over the updates, cleaner on and off).  The
tables docs/performance.md shows beside them (the ratios, and the full restores after
compaction: records written and replayed) are rewritten from the same JSON, between the
page's ``<!-- plots: ... -->`` markers.  A missing input skips its picture with a message.
The PNGs are rendered with fixed sizes, fonts and no timestamps, so a redraw from the same
JSON gives the same picture.
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


def results(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Result rows of a runner report or of one script's payload."""
    if "scripts" in report:
        return [row for payload in report["scripts"].values() for row in payload.get("results", [])]
    return list(report.get("results", []))


_LOWER_UNITS = frozenset({"s", "ms", "MiB", "bytes", "B"})


def direction(row: dict[str, Any]) -> str:
    """``"higher"`` or ``"lower"``: which way is better for ``row``'s ratio.

    The target says it (``ratio>= x``: higher, ``ratio<= x``: lower); a row without
    one goes by its unit (times and sizes: lower; rates: higher).
    """
    target = str(row.get("target") or "")
    if ">=" in target:
        return "higher"
    if "<=" in target:
        return "lower"
    return "lower" if row.get("unit") in _LOWER_UNITS else "higher"


def threshold(row: dict[str, Any]) -> float | None:
    """The target's number (``ratio>= 0.9`` -> 0.9), ``None`` without a target."""
    target = row.get("target")
    return float(str(target).split()[-1]) if target else None


def ratio_rows(report: dict[str, Any], which: str) -> list[dict[str, Any]]:
    """The rows with a same-run baseline whose better direction is ``which``, in report order."""
    return [r for r in results(report) if r.get("ratio") is not None and direction(r) == which]


RATIO_CHARTS = {"higher": "ratios-throughput.png", "lower": "ratios-cost.png"}
"""One chart per direction, so that every bar of a chart reads the same way."""


def _status(row: dict[str, Any]) -> str:
    status = str(row.get("status") or "info")
    return status if status in ("PASS", "FAIL") else "no target"


def plot_ratio_chart(report: dict[str, Any], which: str) -> Path | None:
    """The rows of one direction as ratios to their baselines, each with its target and status."""
    rows = ratio_rows(report, which)
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(rows) + 1.3))
    labels = [f"{r['name']}\nvs {r['baseline_name']}" for r in rows]
    ratios = [float(r["ratio"]) for r in rows]
    colors = [{"PASS": _PASS, "FAIL": _FAIL}.get(_status(r), _INFO) for r in rows]
    y = list(range(len(rows)))[::-1]
    ax.barh(y, ratios, color=colors, height=0.6)
    right = max([*ratios, *(threshold(r) or 0 for r in rows), 1.0]) * 1.45
    for yi, row, ratio in zip(y, rows, ratios, strict=True):
        limit = threshold(row)
        note = f" {ratio:.2f}x  {_status(row)}"
        if limit is not None:
            ax.plot([limit, limit], [yi - 0.42, yi + 0.42], color="black", linewidth=1.5)
            note += f" ({'>=' if which == 'higher' else '<='} {limit:g})"
        ax.text(max(ratio, limit or 0), yi, note, va="center", fontsize=8)
    ax.axvline(1.0, color="#999999", linewidth=0.8, linestyle="--")
    ax.set_xlim(0, right)
    ax.set_yticks(y, labels, fontsize=7.5)
    if which == "higher":
        ax.set_xlabel("ours / baseline throughput: higher is better (black tick: target)")
        ax.set_title("Throughput against same-run baselines")
    else:
        ax.set_xlabel("ours / baseline time or size: lower is better (black tick: target)")
        ax.set_title("Time and size against same-run baselines")
    return _save(fig, RATIO_CHARTS[which])


def ratio_table(report: dict[str, Any]) -> str:
    """The markdown table docs/performance.md shows under the two ratio charts (same JSON)."""
    lines = [
        "| chart | result | baseline | ratio | target | status |",
        "|---|---|---|---|---|---|",
    ]
    for which in ("higher", "lower"):
        chart = RATIO_CHARTS[which]
        for row in ratio_rows(report, which):
            target = row.get("target") or "-"
            lines.append(
                f"| {chart} | {row['name']} | {row['baseline_name']} |"
                f" {float(row['ratio']):.2f}x | {target} | {_status(row)} |"
            )
    return "\n".join(lines)


def plot_metrics_overhead(payload: dict[str, Any]) -> Path | None:
    """Throughput per recording level (higher is better), every repetition as a dot."""
    rows = results(payload)
    if not rows:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, kind in zip(axes, ("put", "get"), strict=True):
        mine = [r for r in rows if r["name"].startswith(kind)]
        if not mine:
            continue
        series = [("OFF", mine[0]["baseline_samples"], mine[0]["baseline_value"], None)]
        series += [(r["name"].rsplit(" ", 1)[-1], r["samples"], r["value"], r) for r in mine]
        ticks = []
        for x, (label, samples, median, row) in enumerate(series):
            ax.bar(x, median / 1000, color="#90a4ae", width=0.6)
            ax.scatter([x] * len(samples), [s / 1000 for s in samples], color="black", s=8)
            tick = f"{label}\nmedian {median / 1000:.1f}k"
            if row is not None:
                tick += f"\n{float(row['ratio']):.2f}x OFF, {_status(row)}"
                if row.get("target"):
                    tick += f" ({row['target'].replace('ratio', '')})"
            ticks.append(tick)
        ax.set_xticks(range(len(series)), ticks, fontsize=7.5)
        ax.set_ylim(bottom=0)
        ax.set_ylabel(
            "k records/s (higher is better)" if kind == "put" else "k gets/s (higher is better)"
        )
        ax.set_title("put + commit/1,000 (fsync)" if kind == "put" else "get, random key")
    fig.suptitle("metrics_recording_level: throughput (bar: median, dots: repetitions)")
    fig.tight_layout()
    return _save(fig, "metrics-overhead.png")


def plot_log_size(payload: dict[str, Any]) -> Path | None:
    """Changelog size and segments over the updates written, with and without the cleaner."""
    series = payload.get("series", {}).get("size_over_time")
    if not series:
        return None
    plt = _plt()
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 4.8), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for name, color in (("uncleaned", "#c62828"), ("cleaned", "#2e7d32")):
        points = series[name]
        x = [p["records_written"] / 1000 for p in points]
        label = "cleaner off" if name == "uncleaned" else "cleaner on (its own due logic)"
        top.plot(x, [p["size_bytes"] / 2**20 for p in points], color=color, label=label)
        bottom.step(x, [p["segments"] for p in points], color=color, where="post", label=label)
    floor = series["fully_compacted_bytes"] / 2**20
    top.axhline(
        floor,
        color="#555555",
        linestyle="--",
        linewidth=0.8,
        label=f"fully compacted: one record per key ({floor:.1f} MiB)",
    )
    top.set_ylabel("Size (MiB)")
    top.set_ylim(bottom=0)
    top.legend(loc="upper left", fontsize=8)
    top.set_title(f"changelog size over time ({series['keys']:,} keys, 1 MiB segments)")
    bottom.set_ylabel("NumLogSegments")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("thousand updates written")
    fig.tight_layout()
    return _save(fig, "log-size.png")


def restore_table(payload: dict[str, Any]) -> str | None:
    """The markdown table of the full restores after compaction (records, not the noisy times)."""
    series = payload.get("series", {}).get("restore_vs_updates")
    if not series:
        return None
    lines = [
        "| updates per key | records written | records replayed | restore, median of 3 (s) |",
        "|---|---|---|---|",
    ]
    for p in series["points"]:
        lines.append(
            f"| {p['updates_per_key']} | {p['records_written']:,} | {p['records_replayed']:,} |"
            f" {p['seconds']:.2f} |"
        )
    return "\n".join(lines)


_BLOCKS = {
    "ratios": (
        "<!-- plots: ratio table (generated by ./dev plots from docs/bench/store.json) -->",
        "<!-- plots: end ratio table -->",
    ),
    "restore": (
        "<!-- plots: restore table (generated by ./dev plots from docs/bench/timeline.json) -->",
        "<!-- plots: end restore table -->",
    ),
}


def doc_block(text: str, name: str) -> str | None:
    """The generated block ``name`` of docs/performance.md (``None`` if it has none)."""
    begin, end = _BLOCKS[name]
    if begin not in text or end not in text:
        return None
    return text[text.index(begin) + len(begin) : text.index(end)].strip("\n")


def _write_block(path: Path, name: str, body: str) -> None:
    text = path.read_text()
    begin, end = _BLOCKS[name]
    if begin not in text or end not in text:
        print(f"skipped: {path} has no {name} block")
        return
    new = text[: text.index(begin) + len(begin)] + "\n" + body + "\n" + text[text.index(end) :]
    if new != text:
        path.write_text(new)
        print(f"wrote the {name} table of {path}")


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
    parser.add_argument(
        "--doc",
        type=Path,
        default=None,
        help="the page whose generated tables to rewrite (default: docs/performance.md when"
        " --bench-dir is the default; none otherwise)",
    )
    args = parser.parse_args(argv)
    _dirs["bench"], _dirs["img"] = args.bench_dir, args.img_dir
    doc = args.doc
    if doc is None and args.bench_dir == BENCH:
        doc = ROOT / "docs" / "performance.md"
    if args.run:
        run_benchmarks()
    store = _load("store.json")
    if store is not None:
        for which in RATIO_CHARTS:
            plot_ratio_chart(store, which)
        if doc is not None:
            _write_block(doc, "ratios", ratio_table(store))
    metrics = _load("metrics.json")
    if metrics is not None:
        plot_metrics_overhead(metrics)
    timeline = _load("timeline.json")
    if timeline is not None:
        plot_log_size(timeline)
        table = restore_table(timeline)
        if doc is not None and table is not None:
            _write_block(doc, "restore", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
