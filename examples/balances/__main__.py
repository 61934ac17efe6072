"""``python -m examples.balances``: run the account-balance service over an input.

    python -m examples.balances --state-dir state/ --input txns.jsonl
    python -m examples.balances --state-dir state/ < txns.jsonl
    python -m examples.balances --state-dir state/ --metrics-port 9108 < txns.jsonl

Run it again on the same state directory and input after a crash (or a
``kill -9``): it resumes after the last committed transaction.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from examples.balances.processor import open_balances, run
from examples.balances.transactions import InputError

__all__ = ["main"]

PROG = "python -m examples.balances"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Apply transactions (JSON lines) to account balances kept in a statestore store, "
            "committing the input position atomically with the balances."
        ),
    )
    parser.add_argument("--state-dir", type=Path, required=True, help="the state directory")
    parser.add_argument(
        "--input", type=Path, help="JSON-lines file of transactions (default: stdin)"
    )
    parser.add_argument(
        "--commit-every", type=int, default=500, help="transactions per commit (500)"
    )
    parser.add_argument(
        "--segment-bytes",
        type=int,
        default=None,
        help="changelog segment.bytes (default: the store's own changelog settings)",
    )
    parser.add_argument(
        "--events", action="store_true", help="report progress as JSON lines on stdout"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics while running (0: any free port)",
    )
    parser.add_argument("--show", action="store_true", help="print the balances after processing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.commit_every < 1:
        parser.error("--commit-every must be at least 1")
    if args.segment_bytes is not None and args.segment_bytes < 1024:
        parser.error("--segment-bytes must be at least 1024")
    if args.input is not None and not args.input.is_file():
        parser.error(f"--input {args.input}: no such file")
    from statestore import StateStoreError  # noqa: PLC0415 - keep --help fast

    started = time.perf_counter()
    try:
        summary = run(
            args.state_dir,
            args.input,
            commit_every=args.commit_every,
            events=args.events,
            segment_bytes=args.segment_bytes,
            metrics_port=args.metrics_port,
        )
    except InputError as exc:
        print(f"{PROG}: error: {exc} (everything before it is committed)", file=sys.stderr)
        return 1
    except StateStoreError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    if not args.events:
        elapsed = time.perf_counter() - started
        if summary.end == summary.start:
            print(
                f"nothing new to apply: the input position is already line {summary.end.line}",
                file=sys.stderr,
            )
        else:
            verb = "stopped" if summary.stopped else "done"
            print(
                f"{verb}: applied {summary.transactions} transactions in {summary.commits} "
                f"commits (input lines {summary.start.line + 1}..{summary.end.line}) "
                f"in {elapsed:.2f}s",
                file=sys.stderr,
            )
    if args.show:
        try:
            _show(args.state_dir)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _show(state_dir: Path) -> None:
    from statestore import StateManager  # noqa: PLC0415

    with StateManager(state_dir) as manager:
        for account, balance in open_balances(manager).items():
            print(f"{account}\t{balance}")


if __name__ == "__main__":
    raise SystemExit(main())
