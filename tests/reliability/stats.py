"""Counters behind the reliability report: what was injected, checked and lost.

Tests call :func:`record` *before* they assert, so a failing run still reports
honest figures.  ``tests/reliability/conftest.py`` prints one parseable line per
kind at the end of the session::

    statestore-reliability kind=kill9.log.append trials=8 faults=16 acked=1234 lost=0 wrong=0

and, when ``STATESTORE_RELIABILITY_REPORT`` names a file, writes the same
figures there as JSON (``docs/reliability.md`` is written from such a run).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

FIELDS = ("trials", "faults", "acked", "lost", "wrong")

_counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(FIELDS, 0))
_extra: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))


def record(
    kind: str,
    *,
    trials: int = 0,
    faults: int = 0,
    acked: int = 0,
    lost: int = 0,
    wrong: int = 0,
) -> None:
    """Add to the figures of ``kind``.

    ``faults``: crashes, kills, corruptions or errors injected; ``acked``:
    acknowledged commits checked afterwards; ``lost``: acknowledged commits
    missing after recovery; ``wrong``: recoveries whose state was not exactly
    the model at a commit boundary (or returned wrong data).
    """
    row = _counts[kind]
    row["trials"] += trials
    row["faults"] += faults
    row["acked"] += acked
    row["lost"] += lost
    row["wrong"] += wrong


def note(kind: str, name: str, amount: int = 1) -> None:
    """Count a detail of ``kind`` (e.g. how many kills left a ``.swap`` file behind)."""
    _extra[kind][name] += amount


def lines() -> list[str]:
    """The parseable summary lines, sorted by kind."""
    out = []
    for kind in sorted(_counts):
        row = _counts[kind]
        fields = " ".join(f"{name}={row[name]}" for name in FIELDS)
        extra = " ".join(f"{k}={v}" for k, v in sorted(_extra.get(kind, {}).items()))
        out.append(f"statestore-reliability kind={kind} {fields}{' ' + extra if extra else ''}")
    return out


def write_report() -> None:
    """Write the figures as JSON to ``$STATESTORE_RELIABILITY_REPORT`` (if set)."""
    target = os.environ.get("STATESTORE_RELIABILITY_REPORT")
    if not target or not _counts:
        return
    data = {kind: {**_counts[kind], **dict(_extra.get(kind, {}))} for kind in sorted(_counts)}
    Path(target).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def dump() -> dict[str, dict[str, dict[str, int]]]:
    """This process's figures, for a pytest-xdist worker to hand to the controller."""
    return {
        "counts": {kind: dict(row) for kind, row in _counts.items()},
        "extra": {kind: dict(row) for kind, row in _extra.items()},
    }


def merge(data: dict[str, dict[str, dict[str, int]]]) -> None:
    """Add a worker's :func:`dump` to this process's figures (the xdist controller's)."""
    for kind, row in data["counts"].items():
        record(kind, **row)
    for kind, row in data["extra"].items():
        for name, amount in row.items():
            note(kind, name, amount)
