"""The 20-line example of docs/quickstart.md runs as printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_quickstart_example_runs_and_prints_what_its_comments_say(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(code.splitlines()) <= 20
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "{'name': 'Alice', 'visits': 2}",
        "[('alice', {'name': 'Alice', 'visits': 2})]",
    ]
    assert (tmp_path / "state" / "users-changelog-0").is_dir()


def demo_shape(line: str) -> str:
    """``line`` with what moves from run to run made constant: durations, the temporary
    directory, and the count of records the restore replayed and whether the cleaner had
    compacted before the kill (the cleaner's timing)."""
    line = re.sub(r"\S*statestore-demo-\w+/", "<temporary directory>/", line)
    line = re.sub(r"\b\d+(\.\d+)?(ms|s)\b", "T", line)
    line = re.sub(r"from [\d,]+ changelog records", "from R changelog records", line)
    # whether the cleaner's first pass ran before the kill follows the same timing as the
    # count above: both verdicts are explained on the page
    return re.sub(
        r"before the kill: (the cleaner compacted the rest|not compacted yet)$",
        "before the kill: VERDICT",
        line,
    )


def test_the_quickstart_shows_what_the_demo_prints() -> None:
    """``./dev demo``'s program with the page's kill seed prints the page's lines: the same
    counts (transactions, the commit killed, acknowledged lines, offsets, total), only the
    timings, the directory and the restore's record count (the cleaner's timing) may move."""
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    shown = text[text.index("statestore demo: ") :]
    shown = shown[: shown.index("```")].splitlines()
    seed = re.search(r"\(kill seed (\d+)\)", shown[3])
    assert seed is not None
    result = subprocess.run(
        [sys.executable, "-m", "examples.balances.demo", "--kill-seed", seed.group(1)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    printed = result.stdout.splitlines()
    assert [demo_shape(line) for line in printed] == [demo_shape(line) for line in shown]
    restored = re.search(r"from ([\d,]+) changelog records", result.stdout)
    written = re.search(r"of ([\d,]+) offsets written", result.stdout)
    assert restored is not None and written is not None
    assert int(restored.group(1).replace(",", "")) < int(written.group(1).replace(",", ""))
