"""Every page that lists the CLI's commands lists all of them, and every ``statestore ...``
that README.md and docs/*.md quote exists with its flags (held to the parser)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from statestore.cli.app import build_parser
from tests.test_docs_commands import all_quoted, check_flags

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


QUOTED = all_quoted("statestore")


def test_the_docs_quote_the_cli() -> None:
    assert len([args for _where, args in QUOTED if len(args) > 1]) >= 30


def check_command(command: list[str], where: str) -> None:
    """``command``'s (sub)commands exist and each has the flags given after it."""
    parser = build_parser()
    args = command[1:]
    for i, arg in enumerate(args):
        choices = subcommands(parser)
        if "..." in arg:
            break  # "statestore repair ... --apply": any remedy
        if arg.startswith("-"):
            check_flags(parser, args[i:], where)
            flag = arg.partition("=")[0]
            assert flag in parser._option_string_actions, f"{where}: {parser.prog} has no {flag}"
        elif choices:
            assert arg in choices, f"{where}: {parser.prog} has no command {arg}"
            parser = choices[arg]


def test_the_command_check_can_fail() -> None:
    check_command(["statestore", "repair", "truncate", "P", "--offset", "3", "--apply"], "ok")
    with pytest.raises(AssertionError, match="has no command nosuch"):
        check_command(["statestore", "nosuch"], "here")
    with pytest.raises(AssertionError, match="has no --nosuch"):
        check_command(["statestore", "repair", "salvage", "P", "--nosuch"], "here")


@pytest.mark.parametrize(("where", "command"), QUOTED, ids=str)
def test_each_quoted_command_has_its_subcommand_and_flags(where: str, command: list[str]) -> None:
    """Every ``statestore ...`` the docs quote names commands that exist, with their flags."""
    check_command(command, where)
