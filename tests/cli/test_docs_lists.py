"""Every page that lists the CLI's commands lists all of them (held to the parser)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from statestore.cli.app import build_parser

ROOT = Path(__file__).resolve().parents[2]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


COMMANDS = subcommands(build_parser())
REMEDIES = subcommands(COMMANDS["repair"])


def test_the_quickstart_lists_every_command_and_remedy() -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    bullet = re.search(r"^- \[CLI\]\(cli\.md\):(.*?)(?=^- |\Z)", text, re.M | re.S)
    assert bullet is not None
    listed = set(re.findall(r"`([a-z-]+)`", bullet.group(1)))
    assert set(COMMANDS) <= listed, set(COMMANDS) - listed
    assert set(REMEDIES) <= listed, set(REMEDIES) - listed
    assert "--version" in bullet.group(1)


@pytest.mark.parametrize("page", ["docs/cli.md"])
def test_the_cli_page_synopsis_lists_every_command_and_remedy(page: str) -> None:
    text = (ROOT / page).read_text()
    synopsis = text[text.index("```text") : text.index("```\n", text.index("```text") + 7)]
    for name in COMMANDS:
        if name == "repair":
            continue
        assert f"statestore {name} " in synopsis, name
    for name in REMEDIES:
        assert f"statestore repair {name} " in synopsis, name
    assert "statestore --version" in synopsis


def test_the_readme_lists_every_command() -> None:
    text = (ROOT / "README.md").read_text()
    line = text[text.index("[CLI](docs/cli.md)") :]
    line = line[: line.index(")", line.index("repair"))]
    for name in COMMANDS:
        assert name in line, name
