"""Every command README.md and docs/*.md quote exists, with the flags they give it.

A quoted command is an inline code span that starts with it, or a line of a fenced block
(a ``bash``/``sh``/``console`` or unlabelled block's lines; a ``text`` block's ``$ `` lines and its synopsis
lines that start with ``statestore ``).  The command is cut at a pipe, ``;``, ``&&``, a
redirection, a comment or a run of two spaces (a synopsis' description column).

- ``./dev SUB ...``: ``SUB`` is one of the ``dev`` script's subcommands; ``./dev test --tier T``
  names a tier; ``./dev demo``, ``demo-cluster``, ``bench`` and ``plots`` pass their arguments
  to a Python parser, whose flags are checked as below.
- ``python -m benchmarks.NAME ...``: the module exists and its parser has every flag given
  (and a flag with choices gets one of them, unless the value is a placeholder in capitals).
- ``statestore ...`` (and ``python -m statestore``): checked against the CLI's parser in
  ``tests/cli/test_docs_lists.py``, with the extraction of this module.

Parsers are built inside each script's ``main``; the test calls ``main`` with
``ArgumentParser.parse_known_args`` replaced by one that hands the parser back before any
work starts.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
STARTS = re.compile(
    r"(?:\$ )?(?:[A-Z_]+=\S* )*(?:nice -n \d+ )?(?:\S*python3? -m (?P<module>statestore|benchmarks\.\w+)|(?P<prog>statestore|\./dev))"
    r"(?=\s|$)(?P<rest>.*)"
)
CUT = re.compile(r"\s\||;|&&|\s>|\s#|\s{2,}|\)\s*$")
DEV_TIERS = {"fast", "slow", "kafka", "all"}
DEV_PASSES_TO = {
    "demo": "examples.balances.demo",
    "demo-cluster": "examples.balances.cluster_demo",
    "bench": "benchmarks.run",
    "plots": "benchmarks.plots",
}


def quoted_commands(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, program, arguments)`` of every command quoted on a page.

    ``program`` is ``statestore``, ``./dev`` or a module (``benchmarks.store_bench``).
    """
    lines = text.splitlines()
    fence: str | None = None
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            continue
        candidates: list[str] = []
        if fence is None:
            candidates = re.findall(r"`([^`]+)`", line)
        elif fence in {"bash", "sh", "shell", "console", ""}:
            candidates = [line.strip()]
        elif fence == "text" and (
            line.startswith("$ ") or re.match(r"statestore (--|[a-z][a-z-]*(\s|$))", line)
        ):
            candidates = [line]
        for candidate in candidates:
            found = STARTS.fullmatch(candidate.strip())
            if found is None:
                continue
            program = found.group("module") or found.group("prog")
            rest = CUT.split(found.group("rest"), maxsplit=1)[0]
            try:
                args = shlex.split(rest)
            except ValueError:
                args = rest.split()
            args = [a.strip("[]()") for a in args if a.strip("[]()")]
            if args and not re.match(r"-|[a-z.]", args[0]):
                continue  # not a command: `statestore = "..."` (an entry point), ...
            yield number, program, args


def all_quoted(program: str) -> list[tuple[str, list[str]]]:
    """Every quoted command of ``program`` (a prefix: ``benchmarks.``), as ``(where, args)``."""
    found = []
    for page in PAGES:
        for line, prog, args in quoted_commands(page.read_text(encoding="utf-8")):
            if prog.startswith(program):
                where = f"{page.relative_to(ROOT)}:{line}"
                found.append((where, [prog, *args]))
    return found


class _CapturedError(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser captured")
        self.parser = parser


def parser_of(module_name: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser ``module_name``'s ``main`` builds, captured before it parses anything."""

    def capture(self: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise _CapturedError(self)

    module = importlib.import_module(module_name)
    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
        patch.setattr("sys.argv", [module_name])
        try:
            main = module.main
            main() if main.__code__.co_argcount == 0 else main([])
        except _CapturedError as captured:
            return captured.parser
    raise AssertionError(f"{module_name}.main returned without parsing arguments")


def check_flags(parser: argparse.ArgumentParser, args: list[str], where: str) -> None:
    """Every ``-x``/``--xx`` in ``args`` is an option of ``parser``; choices are respected."""
    options = parser._option_string_actions
    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg in {"-", "--"} or re.fullmatch(r"-\d+", arg):
            continue
        flag, _, value = arg.partition("=")
        assert flag in options, f"{where}: {parser.prog} has no {flag} (has {sorted(options)})"
        action = options[flag]
        if not value and action.nargs != 0 and i + 1 < len(args):
            value = args[i + 1]
        if action.choices is not None and value and not re.fullmatch(r"[A-Z_<>.]+", value):
            assert value in action.choices, f"{where}: {flag} {value} not in {action.choices}"


def dev_subcommands() -> set[str]:
    text = (ROOT / "dev").read_text(encoding="utf-8")
    case = text[text.index('case "$cmd" in') :]
    return set(re.findall(r"^    ([a-z-]+)\)$", case, re.M))


def test_the_extraction_finds_commands_where_a_reader_sees_them() -> None:
    text = (
        "Run `./dev test --tier slow` or `statestore inspect state | less`.\n"
        "```bash\n.venv/bin/python -m benchmarks.store_bench --only get  # one case\n```\n"
        "```text\n$ statestore verify state\nstatestore 0.1\n"
        "statestore top STATE_DIR     the same, live\n```\n"
    )
    assert list(quoted_commands(text)) == [
        (1, "./dev", ["test", "--tier", "slow"]),
        (1, "statestore", ["inspect", "state"]),
        (3, "benchmarks.store_bench", ["--only", "get"]),
        (6, "statestore", ["verify", "state"]),
        (8, "statestore", ["top", "STATE_DIR"]),
    ]


def test_the_flag_check_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = parser_of("benchmarks.plots", monkeypatch)
    with pytest.raises(AssertionError, match="--no-such-flag"):
        check_flags(parser, ["--no-such-flag"], "here")


def test_the_docs_quote_dev_commands_and_benchmarks() -> None:
    assert len(all_quoted("./dev")) >= 10
    assert len(all_quoted("benchmarks.")) >= 10


@pytest.mark.parametrize(("where", "command"), all_quoted("./dev"), ids=str)
def test_each_quoted_dev_command_exists(
    where: str, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = command[1:]
    if not args:
        return  # `./dev` alone prints its help
    sub, rest = args[0], args[1:]
    assert sub in dev_subcommands(), f"{where}: ./dev has no {sub}"
    if sub == "test" and rest[:1] == ["--tier"]:
        assert len(rest) > 1 and rest[1] in DEV_TIERS | {"fast|slow|kafka|all"}, where
    if sub in DEV_PASSES_TO:
        check_flags(parser_of(DEV_PASSES_TO[sub], monkeypatch), rest, where)


@pytest.mark.parametrize(("where", "command"), all_quoted("benchmarks."), ids=str)
def test_each_quoted_benchmark_command_exists(
    where: str, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = command[0]
    assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), f"{where}: no {module}"
    check_flags(parser_of(module, monkeypatch), command[1:], where)


PATH_IN_DOCS = re.compile(
    r"\b(?:scripts|tests|benchmarks|examples|changelog|statestore|kafka_harness)/"
    r"[A-Za-z0-9_./-]+\.(?:py|java|xml|json|md|sh)\b"
)
# Files the docs name that are the reader's, not the repository's.
READERS_FILES = {"tests/test_counter_crash.py"}  # docs/testing.md: "your" test file


def test_every_file_the_docs_name_exists() -> None:
    missing = [
        f"{page.relative_to(ROOT)}:{number}: {path}"
        for page in PAGES
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for path in PATH_IN_DOCS.findall(line)
        if path not in READERS_FILES and not (ROOT / path).exists()
    ]
    assert not missing, missing


def test_the_quickstart_lists_every_option_of_the_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    options = text[text.index("\nOptions: ") :]
    options = options[: options.index("\n\n")]
    listed = set(re.findall(r"`(--[a-z-]+)", options))
    parser = parser_of("examples.balances.demo", monkeypatch)
    flags = {flag for flag in parser._option_string_actions if flag.startswith("--")}
    assert listed == flags - {"--help"}
