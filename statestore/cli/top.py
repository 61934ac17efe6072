"""``statestore top``: a live, read-only view of a state directory, refreshed every few seconds.

Each refresh reads the files only (as ``inspect`` does, without the pass over
the records that counts keys): per store partition the log start and end
offsets, the append rate since the previous refresh (offsets per second), the
segments, the size, the cleaner's dirty ratio and first dirty offset, when the
cleaner last finished a pass over it (the age of its ``cleaner-offset-checkpoint``)
and the size of its RocksDB.  Nothing is locked or written, so it runs next to
the service.

What the files cannot tell (how far a restore has got, the cleaner's own
counters) the service can: with ``--metrics-url`` each refresh also scrapes
the service's Prometheus endpoint (extra ``statestore[prometheus]``) and adds
the restore's remaining records and the commit count per partition, and a
line of cleaner metrics.

Thread-safety: a command; single-threaded.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from changelog.fs.checkpoint import CLEANER_CHECKPOINT
from statestore.cli.errors import UsageError
from statestore.cli.output import format_bytes, format_table
from statestore.cli.read_commands import dir_size
from statestore.cli.statedir import find_stores, lock_holder, scan_partition, select_stores

__all__ = ["cmd_top", "scrape_metrics", "snapshot"]

_CLEAR = "\x1b[H\x1b[2J"
_CLEANER_FAMILIES = (
    ("passes", "statestore_log_cleaner_cleaner_passes"),
    ("max dirty %", "statestore_log_cleaner_manager_max_dirty_percent"),
    ("uncleanable", "statestore_log_cleaner_manager_uncleanable_partitions_count"),
    ("since last clean ms", "statestore_log_cleaner_time_since_last_clean_ms"),
    ("dead threads", "statestore_log_cleaner_dead_thread_count"),
)


def scrape_metrics(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``url``'s Prometheus text as ``{family: [(labels, value)]}`` (counters: their ``_total``)."""
    try:
        from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415
    except ImportError:
        raise UsageError("--metrics-url needs the statestore[prometheus] extra") from None
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - the user's URL
        text = response.read().decode("utf-8")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            if family.type == "counter" and not sample.name.endswith("_total"):
                continue
            if family.type == "histogram":
                continue
            out.setdefault(family.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def _labelled(
    metrics: dict[str, list[tuple[dict[str, str], float]]], family: str, **labels: str
) -> float | None:
    for sample_labels, value in metrics.get(family, []):
        if all(sample_labels.get(k) == v for k, v in labels.items()):
            return value
    return None


def snapshot(
    state_dir: Path,
    store_name: str | None,
    *,
    now: Callable[[], float] = time.time,
    metrics: dict[str, list[tuple[dict[str, str], float]]] | None = None,
) -> dict[str, Any]:
    """One refresh's figures as a plain dict (what ``--json`` prints, one line per refresh)."""
    stores = select_stores(find_stores(state_dir), store_name, state_dir)
    taken = now()
    partitions = []
    for store in stores:
        for number, directory in enumerate(store.changelog_dirs):
            info = scan_partition(directory, count_keys=False)
            checkpoint = directory / CLEANER_CHECKPOINT
            try:
                cleaned_s: float | None = max(taken - checkpoint.stat().st_mtime, 0.0)
            except FileNotFoundError:
                cleaned_s = None
            row: dict[str, Any] = {
                "store": store.name,
                "partition": number,
                "log_start_offset": info.log_start_offset,
                "log_end_offset": info.log_end_offset,
                "segments": len(info.segments),
                "size_bytes": info.size_bytes,
                "dirty_ratio": round(info.dirty_ratio, 4),
                "first_dirty_offset": info.first_dirty_offset,
                "last_cleaned_s_ago": None if cleaned_s is None else round(cleaned_s, 1),
                "rocksdb_bytes": dir_size(store.rocksdb_dirs[number]),
            }
            if metrics is not None:
                labels = {"store": store.name, "partition": str(number)}
                row["restore_remaining_records"] = _labelled(
                    metrics, "statestore_stream_task_restore_remaining_records_total", **labels
                )
                row["commits"] = _labelled(metrics, "statestore_stream_state_commit", **labels)
            partitions.append(row)
    doc: dict[str, Any] = {
        "state_dir": str(state_dir),
        "time": taken,
        "locked_by": lock_holder(state_dir),
        "partitions": partitions,
    }
    if metrics is not None:
        doc["cleaner"] = {label: _labelled(metrics, family) for label, family in _CLEANER_FAMILIES}
    return doc


def _rates(
    previous: dict[str, Any] | None, current: dict[str, Any]
) -> dict[tuple[str, int], float]:
    """Offsets appended per second since ``previous``, per (store, partition)."""
    if previous is None:
        return {}
    elapsed = current["time"] - previous["time"]
    if elapsed <= 0:
        return {}
    before = {(p["store"], p["partition"]): p["log_end_offset"] for p in previous["partitions"]}
    return {
        (p["store"], p["partition"]): (p["log_end_offset"] - before[(p["store"], p["partition"])])
        / elapsed
        for p in current["partitions"]
        if (p["store"], p["partition"]) in before
    }


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _frame(doc: dict[str, Any], rates: dict[tuple[str, int], float], interval_s: float) -> str:
    holder = doc["locked_by"]
    status = f"in use by {holder}" if holder else "not in use"
    when = time.strftime("%H:%M:%S", time.localtime(doc["time"]))
    lines = [f"statestore top {doc['state_dir']} ({status}) at {when}, every {interval_s:g}s", ""]
    with_metrics = "cleaner" in doc
    headers = [
        "store",
        "partition",
        "log start",
        "log end",
        "appended/s",
        "segments",
        "size",
        "dirty ratio",
        "first dirty",
        "cleaned",
        "rocksdb",
    ]
    if with_metrics:
        headers += ["commits", "restore left"]
    rows: list[list[object]] = []
    for p in doc["partitions"]:
        rate = rates.get((p["store"], p["partition"]))
        row: list[object] = [
            p["store"],
            p["partition"],
            p["log_start_offset"],
            p["log_end_offset"],
            "-" if rate is None else f"{rate:,.0f}",
            p["segments"],
            format_bytes(p["size_bytes"]),
            f"{p['dirty_ratio']:.2f}",
            p["first_dirty_offset"],
            _age(p["last_cleaned_s_ago"]),
            "-" if p["rocksdb_bytes"] is None else format_bytes(p["rocksdb_bytes"]),
        ]
        if with_metrics:
            row += [
                "-" if p["commits"] is None else f"{p['commits']:.0f}",
                "-"
                if p["restore_remaining_records"] is None
                else f"{p['restore_remaining_records']:.0f}",
            ]
        rows.append(row)
    lines.append(format_table(headers, rows, right=[False] + [True] * (len(headers) - 1)))
    if with_metrics:
        cleaner = ", ".join(
            f"{label} {'-' if value is None else f'{value:g}'}"
            for label, value in doc["cleaner"].items()
        )
        lines += ["", f"cleaner: {cleaner}"]
    return "\n".join(lines) + "\n"


def cmd_top(args: argparse.Namespace, out: TextIO) -> int:
    """Refresh the view every ``--interval`` seconds, ``--count`` times (default: until Ctrl-C)."""
    if args.interval <= 0:
        raise UsageError("--interval must be > 0")
    state_dir: Path = args.state_dir
    if not state_dir.is_dir():
        raise UsageError(f"{state_dir}: not a directory")
    clear = not args.json and out.isatty()
    previous: dict[str, Any] | None = None
    frames = 0
    try:
        while args.count is None or frames < args.count:
            if frames:
                time.sleep(args.interval)
            metrics = None if args.metrics_url is None else scrape_metrics(args.metrics_url)
            doc = snapshot(state_dir, args.store, metrics=metrics)
            rates = _rates(previous, doc)
            if args.json:
                doc["appended_per_s"] = {f"{s}-{p}": round(r, 1) for (s, p), r in rates.items()}
                out.write(json.dumps(doc, sort_keys=True) + "\n")
            else:
                out.write(
                    (_CLEAR if clear else ("\n" if frames else ""))
                    + _frame(doc, rates, args.interval)
                )
            out.flush()
            previous = doc
            frames += 1
    except KeyboardInterrupt:
        return 0
    return 0
