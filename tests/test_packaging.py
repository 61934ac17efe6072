"""The distribution ships our two import packages, typed, and not a namesake."""

from __future__ import annotations

import subprocess
import sys
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


def test_the_local_mode_never_imports_the_kafka_client() -> None:
    # statestore[kafka] is optional: importing and using the local stores must not need it.
    code = (
        "import sys, tempfile, pathlib, statestore\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        "    with statestore.StateManager(pathlib.Path(d)) as m:\n"
        "        s = m.store('s'); s.put('k', 1); s.commit()\n"
        "bad = [n for n in sys.modules if n.startswith(('confluent_kafka', 'statestore.kafka'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_license_is_an_spdx_expression_so_setuptools_does_not_warn() -> None:
    # A `{ text = ... }` table made setuptools >= 77 print ~55 lines of deprecation
    # warnings at every install; the string needs setuptools >= 77 to build.
    import tomllib  # noqa: PLC0415

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    requires = project["build-system"]["requires"]
    assert "setuptools>=77" in requires, requires


def test_statestore_version_prints_the_installed_version() -> None:
    from importlib.metadata import version  # noqa: PLC0415

    done = subprocess.run(
        [sys.executable, "-m", "statestore", "--version"],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == f"statestore {version('statestore')}"
