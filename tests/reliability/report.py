"""Turn a reliability JSON report into the Markdown table of ``docs/reliability.md``.

STATESTORE_RELIABILITY_REPORT=/tmp/rel.json .venv/bin/python -m pytest tests/reliability
.venv/bin/python -m tests.reliability.report /tmp/rel.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.reliability.stats import FIELDS


def table(data: dict[str, dict[str, int]]) -> str:
    """One row per kind, the standard fields, then the details."""
    lines = [
        "| kind | " + " | ".join(FIELDS) + " | details |",
        "|---|" + "---:|" * len(FIELDS) + "---|",
    ]
    totals = dict.fromkeys(FIELDS, 0)
    for kind in sorted(data):
        row = data[kind]
        details = ", ".join(f"{k}={v}" for k, v in sorted(row.items()) if k not in FIELDS)
        lines.append(
            f"| {kind} | " + " | ".join(str(row.get(f, 0)) for f in FIELDS) + f" | {details} |"
        )
        for field in FIELDS:
            totals[field] += row.get(field, 0)
    lines.append("| **total** | " + " | ".join(f"**{totals[f]}**" for f in FIELDS) + " | |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print the table of the report file given as the only argument."""
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(table(json.loads(Path(argv[1]).read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
