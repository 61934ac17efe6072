"""The layers hold: every import of our own code goes down (or sideways without a cycle).

The layers, bottom-up, are drawn in ``docs/internals.md``; :data:`LAYERS` is
their one machine-readable copy.  A module's layer is that of the longest
prefix listed.  An import (at module level, inside a function, or under
``TYPE_CHECKING``) may name a module of the same or a lower layer; the import
graph of same-layer modules must have no cycle.  A new module needs no entry
when its package already has one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("changelog", "statestore")

LAYERS: dict[str, int] = {
    # changelog: limits, errors, config -> fs -> record -> segment -> log -> cleaner -> public API
    "changelog.limits": 0,
    "changelog.errors": 0,
    "changelog.native": 0,
    "changelog.config": 1,
    "changelog.fs": 2,
    "changelog.record": 3,
    "changelog.segment": 4,
    "changelog.append_info": 5,
    "changelog.retention": 5,
    "changelog.log_segments": 5,
    "changelog.log_reader": 5,
    "changelog.replace": 5,
    "changelog.recovery_point": 5,
    "changelog.group_commit": 5,
    "changelog.producer_state": 5,
    "changelog.isolation": 5,
    "changelog.load_plan": 5,
    "changelog.loader": 5,
    "changelog.log_dir": 5,
    "changelog.log": 5,
    "changelog.cleaner": 6,
    "changelog.repair": 6,
    "changelog": 7,
    # statestore: base -> the store stack, inside out -> manager -> tools -> public API
    "statestore.errors": 10,
    "statestore.config": 10,
    "statestore.serdes": 10,
    "statestore.partitioner": 10,
    "statestore": 11,
    "statestore.stores": 11,
    "statestore.stores.metadata": 11,
    "statestore.stores.engine": 12,
    "statestore.stores.restore": 13,
    "statestore.stores.change_logging": 14,
    "statestore.stores.buffer": 15,
    "statestore.txn": 15,
    "statestore.stores.partitioned": 16,
    "statestore.stores.typed": 16,
    "statestore.metrics": 16,
    "statestore.stores.builder": 17,
    "statestore.manager": 18,
    "statestore.migrate": 18,
    "statestore.kafka": 18,
    "statestore.cli": 19,
    "statestore.testing": 19,
    "statestore.__init__": 20,
    "statestore.__main__": 20,
}
"""Module prefix -> layer.  ``statestore.stores`` (11) holds the stack's leaves
(``lifecycle``, ``spec``, ``bytes_store``); each layer of the stack has its own number,
so that no layer can import the one built over it."""


def module_name(path: Path) -> str:
    """``changelog/fs/files.py`` -> ``changelog.fs.files``; a package's ``__init__`` keeps its name."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__" and parts[:-1] == ["statestore"]:
        return "statestore.__init__"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    """The layer of the longest listed prefix of ``module``."""
    best = ""
    for prefix in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    assert best, f"{module} is in no layer: add it to LAYERS"
    return LAYERS[best]


def our_modules() -> dict[str, Path]:
    """Every module of our packages, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def resolve(target: str, modules: dict[str, Path]) -> str:
    """The module an import names: ``statestore`` itself means its ``__init__``."""
    if target == "statestore":
        return "statestore.__init__"
    return target


def imports_of(path: Path, modules: dict[str, Path]) -> Iterator[tuple[int, str]]:
    """(line, module) for each import of our own code in ``path``, resolved to modules."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    yield node.lineno, resolve(alias.name, modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield node.lineno, sub if sub in modules else resolve(node.module, modules)


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    """The graph of our imports, and every import that goes up a layer."""
    modules = our_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    upward: list[str] = []
    for name, path in modules.items():
        for line, target in imports_of(path, modules):
            if target == name:
                continue
            graph[name].add(target)
            if layer_of(target) > layer_of(name):
                rel = path.relative_to(ROOT)
                upward.append(
                    f"{rel}:{line}: {name} (layer {layer_of(name)}) imports "
                    f"{target} (layer {layer_of(target)})"
                )
    return graph, upward


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in graph:
                continue
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer() -> None:
    for name in our_modules():
        layer_of(name)


def test_imports_only_go_down() -> None:
    _, upward = import_graph()
    assert upward == [], "imports that go up a layer:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_the_check_can_fail() -> None:
    """The checks are not vacuous: an upward edge and a cycle are each reported."""
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert cycles(graph) == [["a", "b"]]
    assert layer_of("changelog.cleaner.clean") > layer_of("changelog.log")
    assert layer_of("changelog.fs.files") < layer_of("changelog.record.batch")
    assert layer_of("statestore.stores.engine") < layer_of("statestore.stores.change_logging")
    assert layer_of("statestore.stores.buffer") < layer_of("statestore.stores.typed")


def test_no_private_names_across_modules() -> None:
    """No module imports another module's ``_private`` name."""
    offenders = []
    for name, path in our_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] not in PACKAGES:
                    continue
                for alias in node.names:
                    if alias.name.startswith("_"):
                        offenders.append(f"{name}: from {node.module} import {alias.name}")
    assert offenders == []


@pytest.mark.parametrize("package", PACKAGES)
def test_layers_are_documented(package: str) -> None:
    """The tree in docs/internals.md draws every subpackage, and every top-level module of changelog."""
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    tree = text.split("```text", 1)[1].split("```", 1)[0]
    for sub in sorted((ROOT / package).iterdir()):
        if sub.is_dir() and (sub / "__init__.py").exists():
            assert f" {sub.name}/" in tree, f"docs/internals.md does not draw {package}/{sub.name}/"
    for module in sorted((ROOT / package).glob("*.py")):
        assert f"`{module.name}`" in text or module.name in tree, (
            f"docs/internals.md does not name {package}/{module.name}"
        )
