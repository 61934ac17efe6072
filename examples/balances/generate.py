"""Write random transactions as JSON lines (the balances service's input).

    python -m examples.balances.generate --count 50000 --accounts 1000 --seed 7 > txns.jsonl
    python -m examples.balances.generate --count 50000 --output txns.jsonl

The same ``--seed`` always gives the same file.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from examples.balances.transactions import generate, write_transactions
from statestore.cli.errors import non_negative

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m examples.balances.generate",
        description="Write random transactions (deposits, withdrawals, transfers) as JSON lines.",
    )
    parser.add_argument("--count", type=non_negative, default=50_000, help="transactions (50000)")
    parser.add_argument("--accounts", type=non_negative, default=1_000, help="accounts (1000)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (7)")
    parser.add_argument("--output", "-o", type=Path, help="file to write (default: stdout)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.accounts < 2:
        print("generate: error: --accounts must be at least 2", file=sys.stderr)
        return 2
    transactions = generate(args.count, args.accounts, args.seed)
    try:
        if args.output is None:
            write_transactions(sys.stdout, transactions)
            sys.stdout.flush()
        else:
            with args.output.open("w", encoding="utf-8") as out:
                write_transactions(out, transactions)
    except BrokenPipeError:
        return 0  # the reader stopped early (| head): not an error
    except OSError as exc:
        print(f"generate: error: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
