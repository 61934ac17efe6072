"""docs/metrics.md lists exactly the catalog's metrics, each with the catalog's fields."""

from __future__ import annotations

import re
from pathlib import Path

from statestore.metrics.definitions import (
    ALL_METRICS,
    CLEANER_METRICS,
    PARTITION_METRICS,
    TRANSACTION_METRICS,
)
from statestore.metrics.registry import MetricDefinition

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
