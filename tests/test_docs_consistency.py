"""The docs cannot drift from the code: every documented setting exists and every setting is documented.

``docs/configuration.md`` has one section per configuration class, headed
``## `ClassName`: ...``, whose table lists one setting per row in its first
column.  The set of those names must equal the attrs fields of the class.  The loader's pass
table is the same in code and in docs/recovery.md.  Every ``statestore.x.y`` / ``changelog.x.y``
an inline code span names resolves to a module or an object, and every ``test_...`` name the
docs cite is a test (or test module) under tests/, and a ``file.py::test_name`` citation names
a test defined in that file.  Every module docs/internals.md's package tree names exists.
"""

from __future__ import annotations

import importlib
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


DOTTED = re.compile(r"(?<![\w/.-])((?:statestore|changelog)(?:\.[A-Za-z_]\w*)+)")
# Dotted names in the docs that are not Python objects of ours.
NOT_OBJECTS = {
    "changelog.cleaner.summary",  # a logger (changelog/cleaner/clean.py)
    "statestore.cache.max.bytes",  # Kafka Streams' setting
    "statestore.checkpoint",  # Kafka Streams' checkpoint file
    "statestore.store",  # the "format" value of a store's metadata file
}


def resolves(dotted: str) -> bool:
    """``dotted`` is a module of ours, or an attribute (a chain of them) of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def dotted_names(text: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each ``statestore.x`` / ``changelog.x`` inside an inline code span."""
    return [
        (number, match.group(1))
        for number, line in enumerate(text.splitlines(), 1)
        for span in re.findall(r"`([^`]+)`", line)
        for match in DOTTED.finditer(span)
    ]


def test_the_dotted_name_check_can_fail() -> None:
    found = dotted_names("`statestore.builder` and `changelog.cleaner.service.CleanerService`")
    assert found == [(1, "statestore.builder"), (1, "changelog.cleaner.service.CleanerService")]
    assert not resolves("statestore.builder")
    assert not resolves("statestore.config.NO_SUCH_NAME")
    assert resolves("changelog.cleaner.service.CleanerService")
    assert resolves("statestore.stores.builder")


def test_every_module_and_object_the_docs_name_by_its_dotted_path_exists() -> None:
    """``statestore.config.STORE_LOG_CONFIG``, ``changelog.cleaner.worker.WORKER_NICENESS``,
    the logger ``statestore.stores.builder``: a module moved or renamed fails here."""
    missing = [
        f"{page.relative_to(ROOT)}:{number}: {name}"
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for number, name in dotted_names(page.read_text(encoding="utf-8"))
        if name not in NOT_OBJECTS and not resolves(name)
    ]
    assert not missing, missing


TEST_NAME = re.compile(r"\b(test_[a-z0-9_]+)\b")
# Tests the docs show as the reader's own (docs/testing.md), not the repository's.
READERS_TESTS = {"test_counter_crash", "test_counter_survives_kill_9"}


def repository_test_names() -> set[str]:
    """Every test function and test module name under tests/."""
    names = set()
    for path in (ROOT / "tests").rglob("*.py"):
        names.add(path.stem)
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r"^\s*(?:async )?def (test_\w+)", text, re.M))
    return names


def test_the_test_name_check_can_fail() -> None:
    names = repository_test_names()
    assert "test_the_test_name_check_can_fail" in names
    assert "test_docs_consistency" in names
    assert "test_no_such_test_anywhere" not in names


def test_every_test_the_docs_name_exists() -> None:
    """A sentence that cites ``test_kill9_midway_...`` as proof names a test that still exists."""
    names = repository_test_names() | READERS_TESTS
    missing = [
        f"{page.relative_to(ROOT)}:{number}: {name}"
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for name in TEST_NAME.findall(line)
        if name not in names
    ]
    assert not missing, missing


def listed_steps(text: str, name: str) -> list[str]:
    """The step names listed after ``name``` ``: (``a.b.name``` ``: too), up to the next ``;``."""
    start = text.index(f"{name}`:") + len(name) + 2
    return re.findall(r"`([A-Z]\d+(?:\.\d+)?)`", text[start : text.index(";", start)])


def test_the_fault_hook_steps_in_the_testing_guide_are_the_coordinator_s() -> None:
    from statestore.txn.coordinator import COMMIT_STEPS, RECOVERY_STEPS  # noqa: PLC0415

    assert listed_steps("`X`: `T1`, `T1.1`; `Y`: `O1`", "X") == ["T1", "T1.1"]
    text = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    assert listed_steps(text, "COMMIT_STEPS") == list(COMMIT_STEPS)
    assert listed_steps(text, "RECOVERY_STEPS") == list(RECOVERY_STEPS)


CITED_TEST = re.compile(r"([\w/]*test_\w+\.py)::(test_\w+)")


def cited_test_is_in_its_file(file: str, name: str) -> bool:
    """``file`` (a path, or a bare file name: any file of that name under tests/) defines ``name``."""
    files = [ROOT / file] if "/" in file else list((ROOT / "tests").rglob(file))
    return any(
        path.is_file()
        and re.search(rf"^\s*(?:async )?def {name}\b", path.read_text(encoding="utf-8"), re.M)
        for path in files
    )


def test_the_cited_test_check_can_fail() -> None:
    assert cited_test_is_in_its_file(
        "tests/test_docs_consistency.py", "test_the_cited_test_check_can_fail"
    )
    assert cited_test_is_in_its_file(
        "test_docs_consistency.py", "test_the_cited_test_check_can_fail"
    )
    assert not cited_test_is_in_its_file(
        "test_docs_commands.py", "test_the_cited_test_check_can_fail"
    )
    assert not cited_test_is_in_its_file("tests/no_such_file.py", "test_x")


def test_every_cited_file_and_test_pair_exists() -> None:
    """``test_loader.py::test_a_missing_segment_is_refused``: the test is in that file."""
    wrong = [
        f"{page.relative_to(ROOT)}:{number}: {file}::{name}"
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for file, name in CITED_TEST.findall(line)
        if not cited_test_is_in_its_file(file, name)
    ]
    assert not wrong, wrong


def tree_files(block: str) -> set[str]:
    """The ``dir/file.py`` paths a ``text`` tree names: a line ``name/`` opens a directory at its
    indent, and every ``*.py``/``*.c`` before a line's description column is a file in it."""
    stack: list[tuple[int, str]] = []
    named = set()
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        stack = [(level, name) for level, name in stack if level < indent]
        words = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].split()
        if len(words) == 1 and words[0].endswith("/"):
            stack.append((indent, words[0]))
            continue
        prefix = "".join(name for _level, name in stack)
        named |= {prefix + word for word in words if re.fullmatch(r"\w+\.(?:py|c)", word)}
    return named


def test_the_tree_reader_can_fail() -> None:
    block = "pkg/          top\n  a.py b.py  two\n  sub/\n    c.py      one\n  d.c\n"
    assert tree_files(block) == {"pkg/a.py", "pkg/b.py", "pkg/sub/c.py", "pkg/d.c"}


def test_every_module_of_the_internals_tree_exists() -> None:
    """docs/internals.md's package tree names files that exist (a moved or renamed module fails)."""
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    start = text.index("```text\n") + len("```text\n")
    named = tree_files(text[start : text.index("```", start)])
    assert len(named) > 50
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert not missing, missing
