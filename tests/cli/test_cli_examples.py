"""docs/cli.md shows what the demo's state really makes ``statestore`` print.

One real ``./dev demo`` run (``--kill-seed 42``, its state kept), the damaged copy of
``scripts/cli_examples.py``, then every ``$ statestore ...`` example of the page that runs
on ``state`` or ``damaged``: each must exit as the page says, print the page's header
(its lines up to a table's rule of dashes, or its first line) and every row label of the
page's tables (the word a table row starts with: a store, a partition path).  Lines are
compared after every number is replaced by ``N``, runs of dashes by ``--`` and runs of spaces
by one.  Figures, column widths, how many rows a run prints and the prose that follows a table
(what a damaged segment's verdict or salvage says) move with the demo's timing (how far the
cleaner got before the kill, whether the damaged segment was flushed); the shapes must not: a
one-partition store, a column, a store the demo never makes fails here.
Examples on other states (the ``carts``/``users`` ones of the repair remedies) are held by
their own tests.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"


def _script() -> object:
    spec = importlib.util.spec_from_file_location(
        "cli_examples", ROOT / "scripts" / "cli_examples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shape(line: str) -> str:
    """``line`` with numbers as ``N``, ages as ``AGE`` and runs of spaces as one.

    ``top``'s ``cleaned`` column is ``never`` or ``Ns ago`` depending on whether the demo's
    background cleaner reached a partition before the kill: both are the same shape.
    """
    line = re.sub(r"\b(never|\d+(\.\d+)?[smh] ago)\b", "AGE", line)
    line = re.sub(r"-{2,}", "--", line)  # a rule's width follows the widest value
    return " ".join(re.sub(r"\d+(\.\d+)?", "N", line).split())


def header(lines: list[str]) -> list[str]:
    """The lines up to and including a table's rule of dashes, else the first line."""
    for i, line in enumerate(lines):
        if line and set(line.replace(" ", "")) == {"-"}:
            return lines[: i + 1]
    return lines[:1]


def row_labels(lines: list[str]) -> set[str]:
    """The word each table row starts with (a store, a partition path): every line after a
    rule of dashes up to the next blank line."""
    labels: set[str] = set()
    in_table = False
    for line in lines:
        if not line.strip():
            in_table = False
        elif set(line.replace(" ", "")) == {"-"}:
            in_table = True
        elif in_table:
            labels.add(line.split()[0])
    return labels


def examples() -> list[tuple[str, int, list[str]]]:
    """``(command, exit status, shown output lines up to a '...')`` of each demo example."""
    text = DOC.read_text()
    found = []
    for block in re.findall(r"```text\n(.*?)```", text, re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("$ statestore "):
                continue
            command = line[2:]
            if not re.search(r" (state|damaged)(/|\b)", command) or re.search(
                r"carts|orders|users", command
            ):
                continue  # the remedies' examples on the tests' own small states
            shown = []
            for out in lines[i + 1 :]:
                if out.startswith("$ ") or out == "...":
                    break
                shown.append(out)
            status = 0
            if command.endswith('; echo "exit $?"'):
                command = command.removesuffix('; echo "exit $?"')
                status = int(shown.pop().split()[-1])
            found.append((command, status, shown))
    return found


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("demo")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.balances.demo",
            "--state-dir",
            str(work / "state"),
            "--kill-seed",
            "42",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    shutil.copytree(work / "state", work / "damaged")
    _script().damage(work / "damaged")  # type: ignore[attr-defined]
    return work


EXAMPLES = examples()


def test_the_page_has_the_demo_examples() -> None:
    commands = [command.split()[1] for command, _status, _shown in EXAMPLES]
    for name in (
        "inspect",
        "top",
        "dump",
        "verify",
        "compact",
        "restore",
        "get",
        "scan",
        "metadata",
        "repair",
    ):
        assert name in commands, name


@pytest.mark.parametrize(("command", "status", "shown"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_each_example_prints_what_the_page_shows(
    demo_dir: Path, command: str, status: int, shown: list[str]
) -> None:
    args = shlex.split(command)[1:]
    done = subprocess.run(
        [sys.executable, "-m", "statestore", *args],
        cwd=demo_dir,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    printed = (done.stdout + done.stderr).splitlines()
    assert done.returncode == status, done.stdout + done.stderr
    want = [shape(line) for line in shown]
    got = [shape(line) for line in printed]
    assert header(got) == header(want)
    assert row_labels(want) <= row_labels(got), sorted(row_labels(want) - row_labels(got))
