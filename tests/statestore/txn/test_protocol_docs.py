"""The coordinator's numbered steps are the same in its docstring, docs/recovery.md and the hook."""

from __future__ import annotations

import re
from pathlib import Path

import statestore.txn.coordinator as coordinator
from statestore.txn.coordinator import COMMIT_STEPS, RECOVERY_STEPS

ROOT = Path(__file__).resolve().parents[3]


def _steps(names: tuple[str, ...]) -> set[str]:
    return {name.split(".")[0] for name in names}


def test_every_hook_step_is_documented_in_recovery_md_and_the_module() -> None:
    recovery = (ROOT / "docs" / "recovery.md").read_text(encoding="utf-8")
    section = recovery.split("## Transactions: the local coordinator", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^- \*\*([TOR]\d)\*\*", section, re.MULTILINE))
    assert documented == _steps(COMMIT_STEPS) | _steps(RECOVERY_STEPS) | {"T6"}
    module = coordinator.__doc__ or ""
    for step in documented:
        assert re.search(rf"\b{step}\b", module), f"{step} is not in the coordinator's docstring"
