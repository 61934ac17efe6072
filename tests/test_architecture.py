"""The layers hold: every import of our own code goes down (or sideways without a cycle).

The layers, bottom-up, are drawn in ``docs/internals.md``; :data:`LAYERS` is
their one machine-readable copy, and a test holds the drawing's ``layer N`` labels
and the store stack's two drawings (``docs/internals.md``,
``statestore/stores/__init__.py``) equal to it.  A module's layer is that of the
longest prefix listed.  An import (at module level, inside a function, or under
``TYPE_CHECKING``) may name a module of the same or a lower layer; the import
graph of same-layer modules must have no cycle.  A new module needs no entry
when its package already has one.  Neither shipped package imports the
repository's own code outside them (``kafka_harness``, ``tests``, ...).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("changelog", "statestore")

LAYERS: dict[str, int] = {
    # changelog: limits, errors, config -> fs -> record -> segment -> log -> cleaner, repair -> API
    "changelog.limits": 0,
    "changelog.errors": 0,
    "changelog.native": 0,
    "changelog.config": 1,
    "changelog.fs": 2,
    "changelog.record": 3,
    "changelog.segment": 4,
    "changelog.log": 5,
    "changelog.cleaner": 6,
    "changelog.repair": 6,
    "changelog": 7,
    # statestore: base -> txn -> metrics -> the store stack, inside out -> manager -> tools -> API
    "statestore.errors": 10,
    "statestore.config": 10,
    "statestore.serdes": 10,
    "statestore.partitioner": 10,
    "statestore.txn": 11,
    "statestore.metrics": 12,
    "statestore.stores": 13,
    "statestore.stores.engine": 14,
    "statestore.stores.time.segments": 14,
    "statestore.stores.restore": 15,
    "statestore.stores.reader": 15,
    "statestore.stores.change_logging": 16,
    "statestore.stores.caching": 16,
    "statestore.stores.buffer": 17,
    "statestore.stores.metered": 18,
    "statestore.stores.partitioned": 19,
    "statestore.stores.typed": 20,
    "statestore.stores.time": 21,
    "statestore.stores.time.layout": 13,
    "statestore.stores.time.settings": 13,
    "statestore.stores.builder": 22,
    "statestore.manager": 23,
    "statestore.migrate": 23,
    "statestore.kafka": 23,
    "statestore.cli": 24,
    "statestore.testing": 24,
    "statestore.aio": 24,
    "statestore.__init__": 25,
    "statestore.__main__": 25,
}
"""Module prefix -> layer.  Outside the store stack an entry is a package (or a module at a
package's root); ``statestore.stores`` (13) holds the stack's leaves (``lifecycle``, ``spec``,
``metadata``, ``bytes_store``; ``time.layout`` and ``time.settings``), and each layer of the
stack has its own number, in the order ``statestore/stores/__init__.py`` draws and
``builder.py`` builds, so that no layer can import the one built over it."""


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
    assert layer_of("changelog.cleaner.clean") > layer_of("changelog.log.log")
    assert layer_of("changelog.fs.files") < layer_of("changelog.record.batch")
    assert layer_of("statestore.stores.engine") < layer_of("statestore.stores.change_logging")
    assert layer_of("statestore.stores.buffer") < layer_of("statestore.stores.metered")
    assert layer_of("statestore.stores.metered") < layer_of("statestore.stores.typed")
    assert layer_of("statestore.stores.typed") < layer_of("statestore.stores.builder")
    assert layer_of("statestore.txn.participant") < layer_of("statestore.stores.buffer")
    assert layer_of("statestore.metrics.registry") < layer_of("statestore.stores.metered")


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


NOT_SHIPPED = ("kafka_harness", "tests", "benchmarks", "examples", "scripts")
"""Top-level packages of the repository that are not in the distribution."""


def test_shipped_packages_import_nothing_unshipped() -> None:
    """``statestore`` and ``changelog`` import nothing of the repository that is not shipped."""
    offenders = []
    for name, path in our_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module]
            offenders += [
                f"{name}:{node.lineno}: {target}"
                for target in targets
                if target.split(".")[0] in NOT_SHIPPED
            ]
    assert offenders == []


# ------------------------------------------------ the drawings agree with LAYERS


def _text_blocks(text: str) -> list[str]:
    """The bodies of the text code blocks of a Markdown page, in order."""
    return [part.split("```", 1)[0] for part in text.split("```text")[1:]]


_LAYER_LABEL = re.compile(r"\blayers? (\d+)(?:-(\d+))?\b")


def drawn_layers(tree: str) -> dict[str, tuple[int, int]]:
    """Module or package -> (lowest, highest) layer, from a tree drawn two spaces a level.

    A line names packages (``fs/``) and modules (``files.py``, ``__init__.py``), then, after
    two or more spaces, says what they are; ``layer N`` there labels each name on the line,
    ``layers A-B`` a package whose modules span A to B.  A name without a label gets its
    package's single label.  Lines whose names are not all packages or modules (a
    description's continuation) are skipped.
    """
    drawn: dict[str, tuple[int, int]] = {}
    packages: list[tuple[str, tuple[int, int] | None]] = []
    for line in tree.splitlines():
        stripped = line.lstrip(" ")
        if not stripped:
            continue
        depth = (len(line) - len(stripped)) // 2
        names_part, _, description = re.split(r"(\s{2,})", stripped + "  ", maxsplit=1)
        names = names_part.split(" ")
        if not all(n.endswith(("/", ".py")) for n in names):
            continue
        del packages[depth:]
        if len(packages) < depth:
            continue
        label = _LAYER_LABEL.search(description)
        span = (int(label[1]), int(label[2] or label[1])) if label else None
        if span is None and packages and packages[-1][1] is not None:
            inherited = packages[-1][1]
            span = inherited if inherited[0] == inherited[1] else None
        parent = [p for p, _ in packages]
        for name in names:
            if name.endswith("/"):
                dotted = ".".join([*parent, name[:-1]])
            elif name in ("__init__.py", "__main__.py") and parent == ["statestore"]:
                dotted = f"statestore.{name[:-3]}"
            elif name == "__init__.py":
                dotted = ".".join(parent)
            else:
                dotted = ".".join([*parent, name[:-3]])
            if span is not None:
                drawn[dotted] = span
        if len(names) == 1 and names[0].endswith("/"):
            packages.append((names[0][:-1], span))
    return drawn


def test_the_drawn_tree_agrees_with_layers() -> None:
    """Every ``layer N`` of the tree in docs/internals.md is the layer LAYERS gives that module
    or package, every drawn name exists, and every entry of LAYERS is drawn with its layer."""
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    drawn = drawn_layers(_text_blocks(text)[0])
    modules = our_modules()
    wrong = []
    for dotted, (low, high) in sorted(drawn.items()):
        path = ROOT.joinpath(*dotted.removesuffix(".__init__").removesuffix(".__main__").split("."))
        if dotted not in modules and not path.is_dir():
            wrong.append(f"{dotted}: drawn, but no such module or package")
            continue
        inside = [layer for prefix, layer in LAYERS.items() if prefix.startswith(dotted + ".")]
        expected = (layer_of(dotted), max([layer_of(dotted), *inside]))
        if low == high:
            expected = (layer_of(dotted), layer_of(dotted))
        if (low, high) != expected:
            wrong.append(f"{dotted}: drawn as layer {low}-{high}, LAYERS says {expected}")
    for prefix, layer in LAYERS.items():
        if prefix not in drawn or drawn[prefix][0] != layer:
            wrong.append(f"{prefix}: LAYERS says {layer}, drawn as {drawn.get(prefix)}")
    assert wrong == [], "docs/internals.md and LAYERS differ:\n" + "\n".join(wrong)


def stack_order(drawing: str) -> list[tuple[str, int]]:
    """(name, layer) for each line of a drawing of the store stack, top first.

    A line names one or more layers (``typed.KeyValueStore``, ``restore, reader``), relative
    to ``statestore.stores``, before two or more spaces; tree characters are ignored, and a
    line starting with ``|`` (an alternative to the line above, as distributed mode's
    change-logging layer) is skipped."""
    order = []
    for line in drawing.splitlines():
        stripped = line.strip().lstrip("└─ ")
        if not stripped or stripped.startswith("|") or not re.match(r"[a-z_]", stripped):
            continue
        names = re.split(r"\s{2,}", stripped, maxsplit=1)[0]
        for name in names.split(", "):
            order.append((name, layer_of(f"statestore.stores.{name}")))
    return order


@pytest.mark.parametrize("where", ["docs/internals.md", "statestore/stores/__init__.py"])
def test_the_drawn_stack_agrees_with_layers(where: str) -> None:
    """The store stack is drawn top down: each line's layer is at or below the line above's."""
    text = (ROOT / where).read_text(encoding="utf-8")
    if where.endswith(".md"):
        drawing = next(b for b in _text_blocks(text) if "engine.RocksDBEngine" in b)
    else:
        drawing = text.split("::", 1)[1].split("\n\n", 2)[1]
    order = stack_order(drawing)
    assert len(order) >= 5, order
    layers = [layer for _, layer in order]
    assert layers == sorted(layers, reverse=True), f"{where} draws the stack out of order: {order}"


def test_the_drawing_checks_can_fail() -> None:
    """A wrong label, a missing entry and a stack drawn out of order are each reported."""
    tree = "changelog/\n  log/        layer 6: wrong\n    log.py      the log\n  fs/  layer 2\n"
    drawn = drawn_layers(tree)
    assert drawn == {"changelog.log": (6, 6), "changelog.log.log": (6, 6), "changelog.fs": (2, 2)}
    assert drawn["changelog.log"][0] != layer_of("changelog.log")
    assert "changelog.record" not in drawn
    order = stack_order(
        "typed.KeyValueStore  top\n└── engine.RocksDBEngine  x\n    └── buffer.WriteBuffer  y\n"
    )
    layers = [layer for _, layer in order]
    assert layers != sorted(layers, reverse=True)


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
