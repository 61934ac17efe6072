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
    "statestore.stores.time.segments": 12,
    "statestore.stores.restore": 13,
    "statestore.stores.reader": 13,
    "statestore.stores.change_logging": 14,
    "statestore.stores.buffer": 15,
    "statestore.txn": 15,
    "statestore.stores.partitioned": 16,
    "statestore.stores.typed": 16,
    "statestore.metrics": 16,
    "statestore.stores.builder": 17,
    "statestore.stores.time.base": 17,
    "statestore.stores.time.timestamped": 17,
    "statestore.stores.time.window": 17,
    "statestore.stores.time.session": 17,
    "statestore.stores.time.versioned": 17,
    "statestore.stores.time.top": 17,
    "statestore.manager": 18,
    "statestore.migrate": 18,
    "statestore.kafka": 18,
    "statestore.cli": 19,
    "statestore.testing": 19,
    "statestore.aio": 19,
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


# ------------------------------------------------ a layer touches only the layer it wraps


def _defined_private_names(tree: ast.AST) -> set[str]:
    """The ``_private`` names a module defines: functions, classes, class attributes, and
    attributes it assigns on ``self``/``cls``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def layer_contacts(source: str, ours: set[str]) -> list[tuple[int, str]]:
    """(line, what) for each place in ``source`` that reaches past the object it holds.

    * ``__self__``: recovering the object behind a bound method (discovering a layer);
    * ``getattr``/``hasattr``/``setattr`` with a ``_private`` (not dunder) name, or ``getattr`` of a
      ``getattr`` (probing for another layer's attributes);
    * ``obj._name`` on anything but ``self``/``cls`` when ``_name`` is one of ``ours`` (a
      private name some module of ours defines) and this module does not define it itself
      (another instance of the module's own class may be touched; another module's may not);
    * ``x.inner.y`` / ``x._inner.inner`` and the like: reaching through the layer one wraps
      to the one under it.
    """
    tree = ast.parse(source)
    own = _defined_private_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr == "__self__":
                found.append((node.lineno, f"{ast.unparse(node)}: inspects a bound method"))
            elif (
                node.attr in ours
                and node.attr not in own
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.append((node.lineno, f"{ast.unparse(node)}: another module's private name"))
            if (
                isinstance(node.value, ast.Attribute)
                and node.value.attr in ("inner", "_inner")
                and node.attr in ("inner", "_inner")
            ):
                found.append((node.lineno, f"{ast.unparse(node)}: reaches under the wrapped layer"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
        ):
            name = node.args[1]
            inner = node.args[0]
            text = str(name.value) if isinstance(name, ast.Constant) else ""
            if text == "__self__":
                found.append((node.lineno, f"{ast.unparse(node)}: inspects a bound method"))
            elif text.startswith("_") and not (text.startswith("__") and text.endswith("__")):
                found.append((node.lineno, f"{ast.unparse(node)}: probes a private name"))
            elif (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Name)
                and inner.func.id == "getattr"
            ):
                found.append((node.lineno, f"{ast.unparse(node)}: getattr of a getattr"))
    return found


def _all_private_names() -> set[str]:
    names: set[str] = set()
    for path in our_modules().values():
        names |= _defined_private_names(ast.parse(path.read_text(encoding="utf-8")))
    return names


def test_a_layer_touches_only_the_layer_it_wraps() -> None:
    """No module discovers or reaches into another's internals: fast paths are offered by a
    layer and granted by the builder (``statestore/stores/builder.py``), never found."""
    ours = _all_private_names()
    offenders = []
    for path in our_modules().values():
        rel = path.relative_to(ROOT)
        for line, what in layer_contacts(path.read_text(encoding="utf-8"), ours):
            offenders.append(f"{rel}:{line}: {what}")
    assert offenders == [], "layer contacts:\n" + "\n".join(offenders)


def test_the_layer_contact_check_can_fail() -> None:
    """What the stack once did to find the write buffer's dict is reported, line by line."""
    source = """
def _buffer_get_parts(get):
    parts = getattr(getattr(get, "__self__", None), "compiled_get_parts", None)
    return parts

def _dict_of_setitem(put):
    owner = getattr(put, "__self__", None)
    return put.__self__

class Typed:
    def peek(self, store):
        store._inner._pending.clear()
        self._inner.inner.engine.flush()
        return getattr(store, "_pending")
"""
    found = layer_contacts(source, ours={"_pending", "_inner", "_buffer_get_parts"})
    lines = sorted({line for line, _ in found})
    assert lines == [3, 7, 8, 12, 13, 14], found
    own = "class A:\n    def __init__(self):\n        self._x = 1\n    def same(self, other):\n        return other._x\n"
    assert layer_contacts(own, ours={"_x"}) == []  # the module's own class, another instance
