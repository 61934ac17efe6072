"""The README's main job: the balances service, killed with SIGKILL midway, verified.

    python -m examples.balances.demo                  # or: ./dev demo
    python -m examples.balances.demo --count 200000 --kill-seed 3 --keep

Steps:

1. generate ``--count`` random transactions into a JSON-lines file;
2. run the service (``python -m examples.balances``) as a child process and
   ``kill -9`` it at a random moment after some of its commits were
   acknowledged;
3. restart it on the same state directory: it restores its store from the
   changelog, resumes after the last committed transaction, and finishes;
4. compare every final balance with an independent sum of the input file.

Prints ``VERIFIED`` and exits 0, or ``MISMATCH`` (with the first differences)
and exits 1.  The state lives in a temporary directory unless ``--state-dir``
is given; ``--keep`` leaves it there for ``statestore inspect``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from examples.balances.processor import balances_of, open_balances, read_position
from examples.balances.transactions import expected_balances, generate, write_transactions

__all__ = ["DemoError", "main"]

PROG = "python -m examples.balances.demo"


class DemoError(Exception):
    """The demo could not run as planned (not a verification failure)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Generate transactions, process them with the balances service, kill -9 it midway, "
            "restart it, and verify the final balances against an independent sum."
        ),
    )
    parser.add_argument("--count", type=int, default=50_000, help="transactions (50000)")
    parser.add_argument("--accounts", type=int, default=1_000, help="accounts (1000)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the transactions (7)")
    parser.add_argument(
        "--kill-seed", type=int, help="seed of the kill moment (default: random, printed)"
    )
    parser.add_argument(
        "--commit-every", type=int, default=500, help="transactions per commit (500)"
    )
    parser.add_argument(
        "--state-dir", type=Path, help="state directory (must be empty; default: a temp dir)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary directory for inspection"
    )
    return parser


def _fmt(number: int) -> str:
    return f"{number:,}"


def _say(label: str, text: str) -> None:
    print(f"  {label:<11} {text}", flush=True)


class _Child:
    """One run of the service as a child process, reporting JSON-line events."""

    def __init__(self, state_dir: Path, input_path: Path, commit_every: int) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "examples.balances",
                "--state-dir",
                str(state_dir),
                "--input",
                str(input_path),
                "--commit-every",
                str(commit_every),
                "--events",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert self.process.stdout is not None
        self._stdout: IO[str] = self.process.stdout

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, *_exc: object) -> None:
        """Kill the child if it is still running, reap it and close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def events(self) -> Iterator[dict[str, Any]]:
        """The child's events, until its stdout closes."""
        for line in self._stdout:
            yield json.loads(line)

    def failure(self) -> DemoError:
        """An error naming the child's exit status and the end of its stderr."""
        self.process.wait()
        assert self.process.stderr is not None
        tail = self.process.stderr.read().strip().splitlines()[-5:]
        detail = "\n    ".join(tail) if tail else "(no output)"
        return DemoError(f"the service exited with status {self.process.returncode}:\n    {detail}")


def _run_and_kill(
    state_dir: Path, input_path: Path, commit_every: int, kill_commit: int, delay_s: float
) -> tuple[dict[str, Any], int, dict[str, Any] | None]:
    """Run the service, SIGKILL it ``delay_s`` after commit number ``kill_commit``.

    Returns the ``restored`` event, the number of acknowledged commits, and the
    last acknowledged commit event (``None`` if it died before any).
    """
    restored: dict[str, Any] | None = None
    last_ack: dict[str, Any] | None = None
    acks = 0
    killed = False
    with _Child(state_dir, input_path, commit_every) as child:
        for event in child.events():
            if event["event"] == "restored":
                restored = event
            elif event["event"] == "commit":
                acks += 1
                last_ack = event
                if acks == kill_commit:
                    time.sleep(delay_s)
                    os.kill(child.process.pid, signal.SIGKILL)
                    killed = True
                    # Keep reading: commits acknowledged before the kill landed are
                    # still in the pipe, and they count as acknowledged.
            elif event["event"] == "done" and not killed:
                raise DemoError("the service finished before the kill; use a larger --count")
        child.process.wait()
        if child.process.returncode != -signal.SIGKILL:
            raise child.failure()
    if restored is None:
        raise DemoError("the service was killed before it reported its restore")
    return restored, acks, last_ack


def _run_to_end(
    state_dir: Path, input_path: Path, commit_every: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the service to the end of its input; returns its ``restored`` and ``done`` events."""
    restored: dict[str, Any] | None = None
    done: dict[str, Any] | None = None
    with _Child(state_dir, input_path, commit_every) as child:
        for event in child.events():
            if event["event"] == "restored":
                restored = event
            elif event["event"] == "done":
                done = event
        child.process.wait()
        if child.process.returncode != 0 or restored is None or done is None:
            raise child.failure()
    return restored, done


def _read_state(state_dir: Path) -> tuple[dict[str, int], int]:
    """Final balances and committed input line, read back through a fresh StateManager."""
    from statestore import StateManager  # noqa: PLC0415 - keep --help fast

    with StateManager(state_dir) as manager:
        store = open_balances(manager)
        return balances_of(iter(store.items())), read_position(manager.metadata).line


def _compare(expected: dict[str, int], actual: dict[str, int]) -> list[str]:
    problems: list[str] = []
    for account in sorted(expected.keys() | actual.keys()):
        want, got = expected.get(account), actual.get(account)
        if want != got:
            problems.append(f"{account}: expected {want}, found {got}")
    return problems


def _compaction_note(replayed: int, written: int) -> str:
    """What the restore replayed next to what the changelogs were given (records and
    markers: every offset), so that the demo says whether the cleaner had compacted."""
    if replayed < written // 2:
        return f"of {_fmt(written)} offsets written before the kill: the cleaner compacted the rest"
    return f"of {_fmt(written)} offsets written before the kill: not compacted yet"


def demo(args: argparse.Namespace, workdir: Path) -> bool:
    """Run the four steps in ``workdir``; returns whether the balances verified."""
    state_dir: Path = args.state_dir or workdir / "state"
    input_path = workdir / "transactions.jsonl"
    kill_seed = args.kill_seed if args.kill_seed is not None else random.randrange(10**6)  # noqa: S311 - a demo's kill moment
    rng = random.Random(kill_seed)  # noqa: S311 - reproducible, not secret
    total_commits = -(-args.count // args.commit_every)
    kill_commit = rng.randint(max(1, total_commits // 5), max(1, total_commits * 3 // 5))
    delay_s = rng.uniform(0.0, 0.02)

    print("statestore demo: account balances, exactly once across a kill -9")
    _say("state dir", str(state_dir))

    started = time.perf_counter()
    with input_path.open("w", encoding="utf-8") as out:
        write_transactions(out, generate(args.count, args.accounts, args.seed))
    _say(
        "1 generate",
        f"{_fmt(args.count)} transactions over {_fmt(args.accounts)} accounts "
        f"(seed {args.seed}) in {time.perf_counter() - started:.1f}s",
    )

    started = time.perf_counter()
    _, acks, last_ack = _run_and_kill(
        state_dir, input_path, args.commit_every, kill_commit, delay_s
    )
    acked_line = last_ack["line"] if last_ack else 0
    _say(
        "2 process",
        f"killed with SIGKILL after {time.perf_counter() - started:.1f}s, "
        f"{delay_s * 1000:.0f} ms after commit {acks} of ~{total_commits} "
        f"(kill seed {kill_seed})",
    )
    _say("", f"acknowledged: input lines 1..{_fmt(acked_line)} of {_fmt(args.count)}")

    started = time.perf_counter()
    restored, done = _run_to_end(state_dir, input_path, args.commit_every)
    _say(
        "3 restart",
        f"restored {_fmt(restored['keys'])} accounts from {_fmt(restored['records_replayed'])} "
        f"changelog records in {restored['seconds']:.2f}s",
    )
    _say("", _compaction_note(restored["records_replayed"], restored["offsets_written"]))
    if restored["line"] < acked_line:
        print(
            f"MISMATCH: restored position {restored['line']} is before the last "
            f"acknowledged commit (line {acked_line}): an acknowledged commit was lost"
        )
        return False
    if restored["line"] > acked_line + args.commit_every:
        print(
            f"MISMATCH: restored position {restored['line']} is more than one commit past the "
            f"last acknowledged (line {acked_line}): only the commit in flight may be unreported"
        )
        return False
    in_flight = (
        "= the last acknowledged commit"
        if restored["line"] == acked_line
        else "> the last acknowledged: the commit in flight at the kill had become durable"
    )
    _say("", f"input position: line {_fmt(restored['line'])} ({in_flight})")
    _say(
        "",
        f"resumed at line {_fmt(restored['line'] + 1)}: applied {_fmt(done['transactions'])} "
        f"more transactions in {done['commits']} commits, {time.perf_counter() - started:.1f}s",
    )

    expected, count = expected_balances(input_path)
    actual, line = _read_state(state_dir)
    problems = _compare(expected, actual)
    if line != args.count:
        problems.insert(0, f"input position: expected line {args.count}, found {line}")
    if problems:
        _say("4 verify", f"{len(problems)} differences from the independent sum:")
        for problem in problems[:10]:
            _say("", problem)
        print("MISMATCH")
        return False
    total = sum(actual.values())
    _say(
        "4 verify",
        f"{_fmt(len(actual))} balances equal an independent sum of {_fmt(count)} "
        f"transactions (total {total / 100:,.2f})",
    )
    print("VERIFIED: nothing acknowledged was lost and no transaction was applied twice")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns 0 when verified, 1 on a mismatch or failure, 2 on usage errors."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.count < 2 * args.commit_every:
        parser.error(f"--count must be at least twice --commit-every ({2 * args.commit_every})")
    if args.accounts < 2:
        parser.error("--accounts must be at least 2")
    if args.commit_every < 1:
        parser.error("--commit-every must be at least 1")
    if args.state_dir is not None and args.state_dir.exists() and any(args.state_dir.iterdir()):
        parser.error(f"--state-dir {args.state_dir} is not empty (the demo needs fresh state)")

    workdir = Path(tempfile.mkdtemp(prefix="statestore-demo-"))
    try:
        verified = demo(args, workdir)
    except DemoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if args.keep:
            print(
                f"  kept        {workdir} (try: statestore inspect {args.state_dir or workdir / 'state'})"
            )
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0 if verified else 1


if __name__ == "__main__":
    raise SystemExit(main())
