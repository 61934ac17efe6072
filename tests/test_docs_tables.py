"""Tables of settings in docs/scale-out.md are held to the classes they describe.

``ProcessorConfig``'s table lists one setting per row (two joined by `` / `` share a row) with
its default; ``SecurityConfig``'s lists its fields (several joined by ``, `` share a row).  The
names must equal the attrs fields, and a plain default (a number, a boolean, a string,
``None``, ``()``) must equal the field's.  (docs/configuration.md's tables are held by
tests/test_docs_consistency.py.)
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import attrs

from statestore.kafka.config import ProcessorConfig
from statestore.kafka.security import SecurityConfig

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "scale-out.md"


def table_after(text: str, marker: str) -> list[list[str]]:
    """The rows (cells stripped) of the first table after ``marker``, header and rule left out."""
    rows = []
    lines = text[text.index(marker) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def names(cell: str) -> list[str]:
    return re.findall(r"`(\w+)`", cell)


def plain(cell: str) -> object:
    """A default cell as a Python value, or ``...`` when it is not a plain literal."""
    value = cell.strip("`")
    if value in {"required"}:
        return attrs.NOTHING
    if re.fullmatch(r"\d+", value):
        return int(value)
    if value in {"None", "False", "True", "()"}:
        return ast.literal_eval(value)
    if re.fullmatch(r"[a-z_0-9]+", value):
        return value
    return ...


def test_processor_config_table_is_the_class() -> None:
    rows = table_after(PAGE.read_text(encoding="utf-8"), "`ProcessorConfig` (frozen attrs")
    documented: dict[str, object] = {}
    for row in rows:
        fields, defaults = names(row[0]), row[1].split(" / ")
        for i, field in enumerate(fields):
            documented[field] = plain(defaults[i] if len(defaults) == len(fields) else row[1])
    fields = {f.name: f.default for f in attrs.fields(ProcessorConfig)}
    assert sorted(documented) == sorted(fields)
    for name, default in documented.items():
        if default is not ... and not isinstance(fields[name], attrs.Factory):
            assert default == fields[name], name


def test_security_config_table_is_the_class() -> None:
    rows = table_after(PAGE.read_text(encoding="utf-8"), "| `SecurityConfig` field")
    documented = sorted(name for row in rows for name in names(row[0]))
    assert documented == sorted(f.name for f in attrs.fields(SecurityConfig))


def test_the_table_reader_can_fail() -> None:
    text = "`ProcessorConfig` (frozen attrs\n\n| a | b | c |\n|---|---|---|\n| `x` | 1 | y |\n"
    assert table_after(text, "`ProcessorConfig` (frozen attrs") == [["`x`", "1", "y"]]
    assert plain("`10000`") == 10_000
    assert plain("`ChangelogTopicConfig()`") is ...


def test_the_readme_and_the_quickstart_show_the_same_example() -> None:
    """The 20-line example appears twice; tests/examples/test_quickstart.py checks its output."""

    def block(page: Path) -> str:
        (code,) = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        return code

    assert block(ROOT / "README.md") == block(ROOT / "docs" / "quickstart.md")


def test_the_readme_and_the_docs_home_link_every_page_of_the_site() -> None:
    nav = set(re.findall(r":\s*([\w-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    assert len(nav) >= 15
    home = set(re.findall(r"\]\(([\w-]+\.md)", (ROOT / "docs" / "index.md").read_text()))
    readme = set(re.findall(r"\]\(docs/([\w-]+\.md)", (ROOT / "README.md").read_text()))
    assert nav - {"index.md"} == home, sorted(nav - {"index.md"} ^ home)
    assert nav - {"index.md"} <= readme, sorted(nav - {"index.md"} - readme)


HISTORY = re.compile(
    r"\bissues? ?#?\d+\b|\bengineers?\b|\bmy (run|machine|test)s?\b|\bround \d+\b"
    r"|\bthis session\b|research notes|\bPR ?#\d+",
    re.I,
)


def test_the_docs_describe_the_product_not_its_history() -> None:
    """No issue numbers, rounds, sessions or people: README and docs speak in product voice."""
    assert HISTORY.search("as found in round 2 by issue #27")
    found = [
        f"{page.name}:{number}: {match.group(0)}"
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for match in HISTORY.finditer(line)
    ]
    assert not found, found


def _api_objects() -> dict[str, type]:
    from statestore import StateManager  # noqa: PLC0415
    from statestore.kafka import KafkaStoreSpec, Processor  # noqa: PLC0415

    return {"manager": StateManager, "KafkaStoreSpec": KafkaStoreSpec, "processor": Processor}


def api_claims(text: str) -> list[tuple[int, str, str, list[str]]]:
    """``(line, object, name, keywords)`` of each ``manager.name(kw=...)`` (or
    ``KafkaStoreSpec.``, ``processor.``) in an inline code span (not an ``await``-ed one: that
    is the asyncio manager)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for span in re.findall(r"`([^`]+)`", line):
            if "await" in span:
                continue
            for m in re.finditer(
                r"(?<![\w.])(manager|KafkaStoreSpec|processor)\.(\w+)(\(([^()]*)\))?", span
            ):
                if m.group(2) == "py":
                    continue  # a file name: manager.py
                found.append(
                    (number, m.group(1), m.group(2), re.findall(r"(\w+)=", m.group(4) or ""))
                )
    return found


def test_every_method_and_keyword_the_docs_name_exists() -> None:
    """``manager.window_store(name, window_size_ms=...)`` in prose: the method and its keywords
    exist (an attribute set in ``__init__`` counts)."""
    objects = _api_objects()
    assert api_claims("`manager.store(x, partitions=2)` `manager.py`") == [
        (1, "manager", "store", ["partitions"])
    ]
    wrong = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, obj, name, keywords in api_claims(page.read_text(encoding="utf-8")):
            cls = objects[obj]
            where = f"{page.name}:{number}: {obj}.{name}"
            attr = getattr(cls, name, None)
            if attr is None:
                if f"self.{name} " not in inspect.getsource(cls):
                    wrong.append(f"{where}: no such attribute")
                continue
            if not keywords or not callable(attr):
                continue
            params = inspect.signature(attr).parameters
            if any(p.kind == p.VAR_KEYWORD for p in params.values()):
                continue
            wrong += [f"{where}: no keyword {kw}" for kw in keywords if kw not in params]
    assert not wrong, wrong
