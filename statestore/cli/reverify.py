"""The re-verify every ``statestore repair`` remedy ends with: ``verify``'s check of one partition."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from statestore.cli.progress import Progress
from statestore.cli.verify import verify_partition

__all__ = ["reverify"]


def reverify(partition: Path, out: TextIO) -> tuple[bool, dict[str, Any]]:
    """``statestore verify`` on ``partition``: print its findings; ``(ok, json document)``."""
    with Progress("verify", enabled=False) as progress:
        report = verify_partition(partition, progress)
    for problem in report.problems:
        out.write(problem.render() + "\n")
    ok = report.errors == 0
    out.write(
        f"verify: {'OK' if ok else 'FAILED'}: {report.errors} errors, {report.warnings} warnings\n"
    )
    doc = {
        "ok": ok,
        "errors": report.errors,
        "warnings": report.warnings,
        "problems": [p.doc() for p in report.problems],
    }
    return ok, doc
