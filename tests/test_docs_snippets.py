"""Every ```python block of README.md and docs/*.md runs as written.

A page's blocks run in page order, in one namespace (a later block may use what an earlier
one made, as a reader does), in a fresh temporary directory, in a subprocess with a timeout.
A failure names the page and the line of the block's opening fence.

A block that cannot run on its own says so where a reader sees it: its first line is a
comment ``# Fragment (not run): <reason>``.  Those are few, each with its reason; the test
checks that a fragment gives one.

A block that needs a Kafka broker says so in its first line, ``# Needs a Kafka broker
(BOOTSTRAP_SERVERS); topics: a, b``: it is left out here and run, on its own, by
tests/kafka/cluster/test_docs_snippets.py against the kafka tier's broker, with those topics
created first and ``BOOTSTRAP_SERVERS`` set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAGMENT = re.compile(r"# Fragment \(not run\): (?P<reason>.*\S)")
BROKER = re.compile(r"# Needs a Kafka broker \(BOOTSTRAP_SERVERS\); topics: (?P<topics>[\w., -]+)")
FENCE = re.compile(r"^```(?P<info>\S*)\s*$")

# Runs one page: reads [(line, code), ...] as JSON on stdin, executes each block in one
# namespace, and on the first exception prints the line of the block that raised it.
DRIVER = r"""
import json, sys, traceback
blocks = json.load(sys.stdin)
namespace = {"__name__": "__main__"}
for line, code in blocks:
    try:
        exec(compile(code, f"<block at line {line}>", "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"FAILED-BLOCK {line}", file=sys.stderr)
        sys.exit(1)
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line of the opening fence, code)`` of every ```python block, in page order."""
    blocks: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group("info") == "python":
            blocks.append((i + 1, "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return blocks


def is_fragment(code: str) -> bool:
    first = code.lstrip().splitlines()[0] if code.strip() else ""
    return first.startswith("# Fragment")


def needs_broker(code: str) -> list[str] | None:
    """The topics a broker block needs, or ``None`` for a block that needs no broker."""
    found = BROKER.match(code.lstrip())
    return None if found is None else [t.strip() for t in found.group("topics").split(",")]


def broker_blocks() -> list[tuple[str, int, str, list[str]]]:
    """``(page, line, code, topics)`` of every block that needs a broker."""
    found = []
    for page in PAGES:
        for line, code in python_blocks(page.read_text(encoding="utf-8")):
            topics = needs_broker(code)
            if topics is not None:
                found.append((str(page.relative_to(ROOT)), line, code, topics))
    return found


# Blocks run by a test of their own, which changes one thing the page cannot: a block that binds
# a fixed port would collide with another run on the machine.  (text in the block, that test)
RUN_ELSEWHERE = {
    "start_http_server(9108": "tests/statestore/metrics/test_docs.py",  # on a free port
}


def run_elsewhere(code: str) -> bool:
    return any(marker in code for marker in RUN_ELSEWHERE)


def runnable_pages() -> list[tuple[str, list[tuple[int, str]]]]:
    """Each page's blocks that run here: neither fragments nor broker blocks."""
    pages = []
    for page in PAGES:
        blocks = [
            b
            for b in python_blocks(page.read_text(encoding="utf-8"))
            if not is_fragment(b[1]) and needs_broker(b[1]) is None and not run_elsewhere(b[1])
        ]
        if blocks:
            pages.append((str(page.relative_to(ROOT)), blocks))
    return pages


def run_page(
    blocks: list[tuple[int, str]], cwd: Path, timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "error", **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps(blocks),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_the_extraction_finds_blocks_and_their_lines() -> None:
    text = "intro\n```python\nx = 1\n```\n```bash\nls\n```\n\n```python\n# Fragment (not run): why\ny\n```\n"
    assert python_blocks(text) == [(2, "x = 1\n"), (9, "# Fragment (not run): why\ny\n")]
    assert is_fragment(python_blocks(text)[1][1])


def test_a_failing_block_is_named_by_its_line(tmp_path: Path) -> None:
    done = run_page([(3, "x = 1\n"), (9, "raise SystemExit(x + 1)\n")], tmp_path, 60)
    assert done.returncode == 1
    assert "FAILED-BLOCK 9" in done.stderr


def test_every_fragment_gives_its_reason() -> None:
    for page in PAGES:
        for line, code in python_blocks(page.read_text(encoding="utf-8")):
            if is_fragment(code):
                first = code.lstrip().splitlines()[0]
                assert FRAGMENT.fullmatch(first), f"{page.name}:{line}: {first!r}"


# Pages whose blocks are benchmark-sized (a profile of a million-key restore): slow tier.
SLOW_PAGES = {"docs/performance.md"}
PAGES_TO_RUN = [
    pytest.param(page, blocks, id=page, marks=[pytest.mark.slow] if page in SLOW_PAGES else [])
    for page, blocks in runnable_pages()
]


@pytest.mark.parametrize(("page", "blocks"), PAGES_TO_RUN)
@pytest.mark.timeout(240)
def test_the_page_s_python_blocks_run_as_written(
    page: str, blocks: list[tuple[int, str]], tmp_path: Path
) -> None:
    done = run_page(blocks, tmp_path, timeout_s=200)
    failed = re.search(r"FAILED-BLOCK (\d+)", done.stderr)
    where = f"{page}:{failed.group(1)}" if failed else page
    assert done.returncode == 0, f"the block at {where} failed:\n{done.stdout}{done.stderr}"


def test_broker_blocks_say_their_topics() -> None:
    code = "# Needs a Kafka broker (BOOTSTRAP_SERVERS); topics: in-a, out.b\nx = 1\n"
    assert needs_broker(code) == ["in-a", "out.b"]
    assert needs_broker("x = 1\n") is None
    assert any(page == "docs/scale-out.md" for page, _line, _code, _topics in broker_blocks())


def test_blocks_run_elsewhere_have_their_test() -> None:
    for marker, test in RUN_ELSEWHERE.items():
        assert (ROOT / test).is_file(), test
        assert any(marker in page.read_text(encoding="utf-8") for page in PAGES), marker
