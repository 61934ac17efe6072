"""The docs cannot drift from the code: every documented setting exists and every setting is documented.

``docs/configuration.md`` has one section per configuration class, headed
``## `ClassName`: ...``, whose table lists one setting per row in its first
column.  The set of those names must equal the attrs fields of the class.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from changelog.config import CleanerConfig, LogConfig
from statestore.config import RocksDBConfig, StateManagerConfig, StoreConfig
from statestore.kafka.store import KafkaStoreSpec
from statestore.stores.time.settings import TimeSettings, TtlSettings

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
CLASSES = [
    LogConfig,
    CleanerConfig,
    StateManagerConfig,
    StoreConfig,
    RocksDBConfig,
    TimeSettings,
    KafkaStoreSpec,
    TtlSettings,
]


def documented_settings(text: str, class_name: str) -> list[str]:
    """The first-column names of the table in the section of ``class_name``."""
    match = re.search(rf"^## `{class_name}`[^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, f"docs/configuration.md has no section for {class_name}"
    return re.findall(r"^\| `([a-z_0-9]+)` \|", match.group(1), re.M)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_configuration_reference_matches_the_class(cls: type) -> None:
    text = CONFIGURATION.read_text(encoding="utf-8")
    documented = documented_settings(text, cls.__name__)
    fields = [field.name for field in attrs.fields(cls)]
    assert sorted(documented) == sorted(fields), (
        f"{cls.__name__}: documented only {sorted(set(documented) - set(fields))}, "
        f"undocumented {sorted(set(fields) - set(documented))}"
    )


def test_the_check_can_fail() -> None:
    text = "## `X`: a class\n\n| setting | meaning |\n|---|---|\n| `a_ms` | one |\n\n## `Y`\n| `b` | two |\n"
    assert documented_settings(text, "X") == ["a_ms"]


def rst_protocol_table(path: Path) -> dict[str, set[str]]:
    """Step id -> the step ids of its last column, from the rst table of a module docstring."""
    text = path.read_text(encoding="utf-8").split('"""', 2)[1]
    rows: dict[str, set[str]] = {}
    current = ""
    for line in text.splitlines():
        match = re.match(r"^([A-Z]\d+)\s{2,}", line)
        if match:
            current = match.group(1)
            rows[current] = set()
        if current and re.match(r"^(?:[A-Z]\d+)?\s", line + " "):
            tail = line[66:] if len(line) > 66 else ""
            rows[current] |= set(re.findall(r"\b[A-Z]\d+\b", tail))
        if line.startswith("===="):
            current = ""
    return rows


def markdown_protocol_table(path: Path, first: str) -> dict[str, set[str]]:
    """Step id -> step ids of the last column, from the Markdown table whose rows start with ``first``."""
    rows: dict[str, set[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(rf"^\| ({first}\d+) \|", line)
        if match:
            last = line.rstrip(" |").rsplit("|", 1)[1]
            rows[match.group(1)] = set(re.findall(r"\b[A-Z]\d+\b", last))
    return rows


def test_loader_passes_in_code_and_docs_are_the_same() -> None:
    """The loader's pass table (changelog/log/loader.py) and docs/recovery.md list the same passes,
    each finishing or undoing the same protocol steps."""
    code = rst_protocol_table(ROOT / "changelog" / "log" / "loader.py")
    docs = markdown_protocol_table(ROOT / "docs" / "recovery.md", "L")
    assert sorted(code) == sorted(docs)
    assert code == docs
