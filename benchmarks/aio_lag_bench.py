"""How long commits hold up an asyncio event loop: ``statestore.aio`` against an idle loop.

A probe task sleeps 1 ms again and again and records how late each wake-up is (the loop's
lag).  Cases, each run for ``--seconds`` per round, the rounds interleaving the cases (the
first case rotating) so that a change of the machine's load hits every case alike:

==============  ===========================================================================
case            what runs beside the probe
==============  ===========================================================================
idle            nothing: the manager is open, no store work (the same-run baseline: on a
                shared machine the scheduler alone makes wake-ups late)
one_put         16 tasks, each awaiting ``store.put(key, value)`` in a loop: one-put
                transactions, group-committed, every commit fsynced
one_put_slow    the same with every changelog fsync slowed to ``--slow-fsync-ms`` (a slow
                disk, through the changelog's fault hook)
txn_1000        4 tasks, each committing transactions of 1,000 writes
                (``async with store.transaction()``; the body yields every 100 writes)
on_loop         the control: the ``one_put_slow`` commits made with the synchronous API
                on the loop's own thread, which is what a blocking commit does to a loop
==============  ===========================================================================

Reported per case: the lag's p50, p99, p99.9 and worst (ms), the commits made, and the p99
*added* over the idle loop of the same run (case p99 minus idle p99), with a target of at
most 5 ms for the off-loop cases.  The control must show the probe can see a blocked loop
(its p50 is at least the slowed fsync).

``python -m benchmarks.aio_lag_bench [--seconds 2] [--rounds 5] [--json OUT]``.  Prints a
table, then one line of JSON; ``--table JSON`` prints the docs table of a run's JSON
(docs/serving.md quotes docs/bench/aio_lag.json through it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks._harness import Result, Target, emit_json, machine_info, print_table, scratch_dir
from changelog.fs import files
from statestore.aio import AsyncStateManager, AsyncStore
from statestore.config import StateManagerConfig

CASES = ("idle", "one_put", "one_put_slow", "txn_1000", "on_loop")
ADDED_P99_BOUND_MS = 5.0
"""The target: commits made through ``statestore.aio`` add at most this to the loop's p99 lag."""
PROBE_PERIOD_S = 0.001


class _SlowFsync:
    """Fault hook: every changelog segment fsync takes ``delay_s`` longer (a slow disk)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __call__(self, step: str, path: Path) -> None:
        if step == "segment.flush":
            time.sleep(self.delay_s)


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def _probe(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(PROBE_PERIOD_S)
        lags.append(time.perf_counter() - before - PROBE_PERIOD_S)


def _value(i: int) -> dict[str, Any]:
    return {"name": f"user {i}", "visits": i, "tags": ["a", "b"]}


def _workload(case: str, kv: AsyncStore[Any, Any], stop: asyncio.Event) -> list[Awaitable[int]]:
    """The tasks of ``case``; each returns the commits it made."""

    async def one_put(t: int) -> int:
        n = 0
        while not stop.is_set():
            await kv.put(f"t{t}:{n % 100}", _value(n))
            n += 1
        return n

    async def txn_1000(t: int) -> int:
        # The body yields every 100 writes, as a well-behaved handler does: what is left on
        # the loop is statestore's share (serializing the writes, accepting them).
        n = 0
        while not stop.is_set():
            async with kv.transaction() as tx:
                for i in range(1000):
                    tx.put(f"t{t}:{i}", _value(n + i))
                    if i % 100 == 99:
                        await asyncio.sleep(0)
            n += 1
        return n

    async def on_loop(t: int) -> int:
        n = 0
        while not stop.is_set():
            kv.sync.put(f"t{t}:{n % 100}", _value(n))
            kv.sync.commit()
            n += 1
            await asyncio.sleep(0)
        return n

    if case in ("one_put", "one_put_slow"):
        return [one_put(t) for t in range(16)]
    if case == "txn_1000":
        return [txn_1000(t) for t in range(4)]
    if case == "on_loop":
        return [on_loop(t) for t in range(16)]
    return []


async def _run_case(
    manager: AsyncStateManager, case: str, seconds: float
) -> tuple[list[float], int]:
    kv = await manager.store(case)
    stop = asyncio.Event()
    lags: list[float] = []
    probe = asyncio.create_task(_probe(stop, lags))
    tasks = [asyncio.ensure_future(w) for w in _workload(case, kv, stop)]
    await asyncio.sleep(seconds)
    stop.set()
    commits = sum(await asyncio.gather(*tasks))
    await probe
    return lags, commits


def measure(seconds: float, rounds: int, slow_fsync_ms: float) -> dict[str, dict[str, Any]]:
    """Lags (seconds) and commits per case, pooled over ``rounds`` interleaved rounds."""
    out: dict[str, dict[str, Any]] = {c: {"lags": [], "commits": 0, "seconds": 0.0} for c in CASES}
    slow = _SlowFsync(slow_fsync_ms / 1e3)
    config = StateManagerConfig(run_cleaner=False)

    async def main(state_dir: Path) -> None:
        async with await AsyncStateManager.open(state_dir, config=config) as manager:
            for r in range(rounds):
                for case in CASES[r % len(CASES) :] + CASES[: r % len(CASES)]:
                    hook: Callable[[str, Path], None] | None = (
                        slow if case in ("one_put_slow", "on_loop") else None
                    )
                    if hook is None:
                        lags, commits = await _run_case(manager, case, seconds)
                    else:
                        with files.inject_faults(hook):
                            lags, commits = await _run_case(manager, case, seconds)
                    out[case]["lags"].extend(lags)
                    out[case]["commits"] += commits
                    out[case]["seconds"] += seconds

    with scratch_dir("aio-lag") as d:
        asyncio.run(main(d / "state"))
    return out


CASE_TEXT = {
    "idle": "nothing (idle loop)",
    "one_put": "16 tasks awaiting one-put transactions",
    "one_put_slow": "the same, every fsync slowed",
    "txn_1000": "4 tasks committing 1,000 writes a transaction",
    "on_loop": "control: the slowed one-put commits ON the loop",
}


def summarize(measured: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per case: the lag's quantiles in ms, the wake-ups counted, commits/s."""
    out: dict[str, dict[str, float]] = {}
    for case, m in measured.items():
        lags = [x * 1e3 for x in m["lags"]]
        out[case] = {
            "p50_ms": _quantile(lags, 0.5),
            "p99_ms": _quantile(lags, 0.99),
            "p999_ms": _quantile(lags, 0.999),
            "worst_ms": max(lags),
            "wakeups": len(lags),
            "commits_per_s": m["commits"] / m["seconds"],
        }
    return out


def results(cases: dict[str, dict[str, float]], slow_fsync_ms: float) -> list[Result]:
    """The report's rows: the p99 each off-loop case adds over the idle loop, and the control."""
    idle_p99 = cases["idle"]["p99_ms"]
    rows = [Result("loop lag p99, idle loop", idle_p99, "ms", group="aio")]
    for case in ("one_put", "one_put_slow", "txn_1000"):
        c = cases[case]
        rows.append(
            Result(
                f"loop lag p99 added, {case}",
                c["p99_ms"] - idle_p99,
                "ms",
                baseline_name="idle loop, same run (p99)",
                baseline_value=idle_p99,
                target=Target("value<=", ADDED_P99_BOUND_MS),
                note=f"p99 {c['p99_ms']:.2f} ms; {c['commits_per_s']:,.0f} commits/s",
                group="aio",
            )
        )
    rows.append(
        Result(
            "loop lag p50, commits on the loop (control)",
            cases["on_loop"]["p50_ms"],
            "ms",
            target=Target("value>=", slow_fsync_ms),
            note=f"fsync +{slow_fsync_ms:g} ms: the probe must see a blocked loop",
            group="aio",
        )
    )
    return rows


TABLE_BEGIN = "<!-- aio_lag_bench: table (python -m benchmarks.aio_lag_bench --table JSON) -->"
TABLE_END = "<!-- aio_lag_bench: end table -->"


def markdown_table(payload: dict[str, Any]) -> str:
    """The docs table of one run's JSON: a row per case, with the verdict of its result row."""
    verdicts = {
        row["name"].rsplit(" ", 1)[-1]: f"{row['status']} ({row['target']} ms)"
        for row in payload["results"]
        if row["target"]
    }
    verdicts["on_loop"] = verdicts.pop("(control)")
    idle_p99 = payload["cases"]["idle"]["p99_ms"]
    lines = [
        "| beside the probe | lag p50 / p99 / p99.9 / worst (ms) | p99 added | commits/s | verdict |",
        "|---|---|---|---|---|",
    ]
    for case in CASES:
        c = payload["cases"][case]
        quantiles = " / ".join(f"{c[q]:.1f}" for q in ("p50_ms", "p99_ms", "p999_ms", "worst_ms"))
        added = "-" if case in ("idle", "on_loop") else f"{c['p99_ms'] - idle_p99:.1f} ms"
        verdict = verdicts.get(case, "the baseline")
        lines.append(
            f"| {CASE_TEXT[case]} | {quantiles} | {added} | {c['commits_per_s']:,.0f} | {verdict} |"
        )
    load = ", ".join(f"{x:.1f}" for x in payload["machine"]["loadavg_1_5_15"])
    lines += [
        "",
        f"{payload['rounds']} rounds of {payload['seconds']:g} s a case; fsyncs slowed by "
        f"{payload['slow_fsync_ms']:g} ms where said; load average after the run {load}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per case and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slow-fsync-ms", type=float, default=20.0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="print the docs table of JSON")
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=None,
        help="sys.setswitchinterval for the run (default: Python's own, 5 ms)",
    )
    args = parser.parse_args()
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)
    if args.table is not None:
        print(markdown_table(json.loads(args.table.read_text())))
        return
    cases = summarize(measure(args.seconds, args.rounds, args.slow_fsync_ms))
    rows = results(cases, args.slow_fsync_ms)
    print_table(rows, title=f"aio_lag_bench ({args.rounds} rounds x {args.seconds:g} s a case)")
    line = emit_json(
        "aio_lag",
        rows,
        extra={
            "machine": machine_info(),
            "seconds": args.seconds,
            "rounds": args.rounds,
            "slow_fsync_ms": args.slow_fsync_ms,
            "switch_interval_ms": sys.getswitchinterval() * 1e3,
            "cases": cases,
        },
    )
    if args.json is not None:
        args.json.write_text(line + "\n")


if __name__ == "__main__":
    main()
