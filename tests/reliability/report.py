"""Turn a reliability JSON report into the Markdown tables of ``docs/reliability.md``.

STATESTORE_RELIABILITY_REPORT=/tmp/rel.json .venv/bin/python -m pytest tests/reliability
.venv/bin/python -m tests.reliability.report /tmp/rel.json

Prints the table of every kind, then (when the run has them) the corruption
fuzz as a file kind x damage matrix and the I/O errors per fault point.
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


FUZZ_CELL = "corruption-fuzz-cell."
IO_POINT = "io-error-point."


def fuzz_matrix(data: dict[str, dict[str, int]]) -> str:
    """File kind x damage: trials and outcomes of each cell of the corruption fuzz."""
    cells = {
        kind[len(FUZZ_CELL) :]: row for kind, row in data.items() if kind.startswith(FUZZ_CELL)
    }
    files = sorted({name.rsplit(".", 1)[0] for name in cells})
    damages = sorted({name.rsplit(".", 1)[1] for name in cells})
    lines = [
        "| file kind | " + " | ".join(damages) + " |",
        "|---|" + "---|" * len(damages),
    ]
    for file_kind in files:
        row = []
        for damage in damages:
            cell = cells.get(f"{file_kind}.{damage}", {})
            outcomes = ", ".join(f"{k} {v}" for k, v in sorted(cell.items()) if k not in FIELDS)
            row.append(f"{cell.get('trials', 0)}: {outcomes}" if cell else "")
        lines.append(f"| {file_kind} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print the tables of the report file given as the only argument."""
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    data = json.loads(Path(argv[1]).read_text())
    main_rows = {k: v for k, v in data.items() if not k.startswith((FUZZ_CELL, IO_POINT))}
    print(table(main_rows))
    if any(k.startswith(FUZZ_CELL) for k in data):
        print("\n" + fuzz_matrix(data))
    points = {k[len(IO_POINT) :]: v for k, v in data.items() if k.startswith(IO_POINT)}
    if points:
        print("\n" + table(points))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
