"""Logging: module loggers under one tree per package, and the cleaner summary's own logger."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

from changelog.cleaner.clean import clean_log
from tests.statestore.conftest import OpenManager

ROOT = Path(__file__).resolve().parents[3]


def test_every_module_logs_under_its_own_name() -> None:
    """``logging.getLogger(__name__)`` only (plus the summary logger), so each package is one tree."""
    for package in ("changelog", "statestore"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "getLogger"
                ):
                    arg = ast.unparse(node.args[0]) if node.args else ""
                    assert arg in ("__name__", "f'{__package__}.summary'"), (path, arg)


def test_the_documented_recipe_writes_cleaner_summaries_to_their_own_file(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    summary = logging.getLogger("changelog.cleaner.summary")
    target = tmp_path / "log-cleaner.log"
    handler = logging.FileHandler(target)
    old_level, old_propagate = summary.level, summary.propagate
    summary.setLevel(logging.INFO)
    summary.propagate = False
    summary.addHandler(handler)
    try:
        manager = open_manager()
        store = manager.store("users")
        for round_ in range(30):
            for i in range(40):
                store[f"k{i}"] = round_
            manager.commit()
        assert clean_log(store.changelog, force=True) is not None
    finally:
        summary.removeHandler(handler)
        handler.close()
        summary.setLevel(old_level)
        summary.propagate = old_propagate
    text = target.read_text()
    assert text.startswith(
        "[users-changelog-0] cleaned log users-changelog-0 (dirty section = [0, "
    )
    assert "MB/sec" in text
    assert "Buffer utilization:" in text
    assert "messages" in text
