"""docs/metrics.md lists exactly the catalog's metrics, each with the catalog's fields."""

from __future__ import annotations

import re
from pathlib import Path

from statestore.metrics.definitions import (
    ALL_METRICS,
    CLEANER_METRICS,
    PARTITION_METRICS,
    TRANSACTION_METRICS,
    TTL_METRICS,
)
from statestore.metrics.registry import MetricDefinition
from statestore.metrics.runtime import RUNTIME_METRICS

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def doc_row(definition: MetricDefinition) -> str:
    """The row docs/metrics.md must have for ``definition``."""
    prometheus = "-" if definition.kind == "rate" else f"`{definition.prometheus_name}`"
    kind = definition.kind + (" (DEBUG)" if definition.level == "DEBUG" else "")
    return (
        f"| `{definition.name}` | {definition.group} | {kind} | {definition.unit} | "
        f"{definition.description} | {definition.kafka or '-'} | {prometheus} |"
    )


def doc_rows(section: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"^## {section}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, f"docs/metrics.md has no section {section!r}"
    return [line for line in match.group(1).splitlines() if line.startswith("| `")]


def test_the_store_partition_table_is_the_catalog() -> None:
    assert doc_rows("Store partitions") == [doc_row(d) for d in PARTITION_METRICS]


def test_the_cleaner_table_is_the_catalog() -> None:
    assert doc_rows("The cleaner") == [doc_row(d) for d in CLEANER_METRICS]


def test_the_transactions_table_is_the_catalog() -> None:
    assert doc_rows("Transactions") == [doc_row(d) for d in TRANSACTION_METRICS]


def test_the_ttl_table_is_the_catalog() -> None:
    assert doc_rows("TTL stores") == [doc_row(d) for d in TTL_METRICS]


def test_the_catalog_covers_the_issues_kafka_names() -> None:
    names = {definition.name for definition in ALL_METRICS}
    assert {
        "put-rate",
        "get-latency",
        "restore-rate",
        "restore-remaining-records-total",
        "max-dirty-percent",
        "cleaner-recopy-percent",
        "max-clean-time-secs",
        "max-buffer-utilization-percent",
        "uncleanable-partitions-count",
        "LogStartOffset",
        "LogEndOffset",
        "NumLogSegments",
        "Size",
    } <= names
    for definition in ALL_METRICS:
        if definition.kind == "rate":
            assert definition.source in names


def test_the_prometheus_snippet_runs_and_serves_metrics(tmp_path: Path) -> None:
    import socket  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Serving `/metrics` to Prometheus") :]
    start = section.index("```python\n") + len("```python\n")
    code = section[start : section.index("\n```", start)]
    with socket.socket() as probe:  # a free port instead of the snippet's 9108
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-c", code.replace("9108", str(port))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        'statestore_stream_state_records_committed_total{partition="0",store="users"} 1.0'
        in done.stdout
    )


def test_the_processor_table_is_the_catalog() -> None:
    assert doc_rows(r"The processor \(distributed mode\)") == [doc_row(d) for d in RUNTIME_METRICS]
