"""The distribution ships our two import packages, typed, and not a namesake."""

from __future__ import annotations

from pathlib import Path

import changelog
import statestore

ROOT = Path(__file__).resolve().parent.parent


def test_changelog_is_ours_not_the_pypi_namesake() -> None:
    # An unrelated PyPI distribution is also called "changelog".
    assert Path(changelog.__file__).resolve().parent == ROOT / "changelog"
    assert hasattr(changelog, "LogConfig")


def test_statestore_is_ours() -> None:
    assert Path(statestore.__file__).resolve().parent == ROOT / "statestore"


def test_py_typed_markers_ship() -> None:
    assert (ROOT / "changelog" / "py.typed").exists()
    assert (ROOT / "statestore" / "py.typed").exists()
