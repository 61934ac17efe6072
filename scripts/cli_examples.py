"""Print the outputs docs/cli.md shows, from a real ``./dev demo`` state directory.

Usage (from the repository root, with the package installed)::

    python scripts/cli_examples.py WORK_DIR

It runs ``python -m examples.balances.demo --state-dir WORK_DIR/state --kill-seed 42``,
then, from ``WORK_DIR``, each ``statestore`` command of the general sections of
docs/cli.md (``inspect``, ``top``, ``dump``, ``verify``, ``compact``, ``restore``,
``get``, ``scan``, ``metadata``), and prints each as ``$ command`` followed by its output,
ready to paste.  ``verify`` and ``repair salvage`` on a damaged copy (a byte flipped in a closed
segment) run on ``WORK_DIR/damaged``.  The figures change from run
to run (the kill moment is a wall-clock race); the shapes do not, and
``tests/cli/test_cli_examples.py`` holds docs/cli.md to them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

COMMANDS = (
    "inspect state",
    "top state --count 1",
    "dump state/balances-changelog-0/{first_log}",
    "dump state/balances-changelog-0/{first_index} state/balances-changelog-0/{first_timeindex}",
    "verify state",
    "compact state --roll",
    "restore state",
    "get state balances acct-042",
    "get state balances acct-xyz",
    "get state __metadata balances-input-position",
    "scan state balances --prefix acct-00 --limit 4",
    "scan state balances --from acct-010 --to acct-012 --json",
    "metadata state --store balances",
    "metadata state --store balances --set segment_bytes=268435456",
)


def run(args: list[str], cwd: Path) -> tuple[int, str]:
    """``statestore ARGS`` in ``cwd``: exit status and stdout + stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "statestore", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def damage(state: Path) -> None:
    """One byte flipped inside the batch in the middle of ``balances-changelog-0``'s first segment.

    The byte is 70 bytes into that batch, under its CRC-32C whatever the batch holds (a
    data batch or a 78-byte marker), so the damage is always a CRC failure at the batch's
    position.
    """
    closed = sorted((state / "balances-changelog-0").glob("*.log"))[0]
    data = bytearray(closed.read_bytes())
    position = 0
    while True:
        size = int.from_bytes(data[position + 8 : position + 12], "big") + 12
        if position + size > len(data) // 2:
            break
        position += size
    data[position + 70] ^= 0xFF
    closed.write_bytes(bytes(data))


def main(argv: list[str]) -> int:
    """Run the demo and every command; print them as docs/cli.md shows them."""
    work = Path(argv[0]).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    demo = [sys.executable, "-m", "examples.balances.demo", "--state-dir", str(work / "state")]
    subprocess.run([*demo, "--kill-seed", "42"], check=True, timeout=600)
    partition = work / "state" / "balances-changelog-0"
    first = sorted(partition.glob("*.log"))[0].stem
    names = {
        "first_log": f"{first}.log",
        "first_index": f"{first}.index",
        "first_timeindex": f"{first}.timeindex",
    }
    shutil.copytree(work / "state", work / "damaged")
    damage(work / "damaged")
    for args in (["verify", "damaged"], ["repair", "salvage", "damaged/balances-changelog-0"]):
        status, out = run(args, work)
        print(f"$ statestore {' '.join(args)}  (exit {status})\n{out}")
    for command in COMMANDS:
        args = command.format(**names).split()
        status, out = run(args, work)
        lines = out.splitlines()
        if args[0] == "dump":
            lines = lines[:6]
        print(f"$ statestore {' '.join(args)}  (exit {status})")
        print("\n".join(lines))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
