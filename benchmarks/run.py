"""The benchmark runner: one command, one table, one JSON file.

Usage::

    python -m benchmarks.run [--quick | --tiny] [--only NAME ...] [--json PATH]
    ./dev bench [--quick] ...          # the same, after installing the bench extra

Each benchmark script runs as its own subprocess (``python -m benchmarks.<name>``) so
that one script's heap, page cache habits and peak RSS do not leak into the next; every
script prints its own table and ends with one line of JSON, which the runner folds into
a combined table and ``--json`` file.  Scripts that are not there yet are skipped and
listed as missing.

``--only`` takes a script name (``store``, ``codec``, ``log``, ``cleaner``, ``compactness``, ``txn``, ...) or the name
of one case of the store suite (``put``, ``get``, ``range``, ``restore``,
``incremental``, ``updates``, ``compaction``, ``concurrent``, ``disk``), which runs just
that case of ``store_bench``.  Sizes: the default is the full report (about ten
minutes on a 2-core machine), ``--quick`` takes seconds, ``--tiny`` is the smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import Result, Target, machine_info, print_table

__all__ = ["SCRIPTS", "STORE_CASES", "main"]

ROOT = Path(__file__).resolve().parent.parent

SCRIPTS: dict[str, str] = {
    "store": "benchmarks.store_bench",
    "codec": "benchmarks.codec_bench",
    "log": "benchmarks.log_bench",
    "cleaner": "benchmarks.cleaner_bench",
    "offset_map": "benchmarks.offset_map_bench",
    "kafka_cleaner": "benchmarks.kafka_cleaner_bench",
    "compactness": "benchmarks.compactness_bench",
    "metrics": "benchmarks.metrics_bench",
    "compression": "benchmarks.compression_bench",
    "txn": "benchmarks.txn_bench",
    "commit": "benchmarks.commit_bench",
    "service": "benchmarks.service_bench",
    "aio_lag": "benchmarks.aio_lag_bench",
}
"""Short name -> module.  ``store`` is ours; the others belong to their modules' owners."""

STORE_CASES = (
    "put",
    "get",
    "range",
    "restore",
    "incremental",
    "updates",
    "compaction",
    "concurrent",
    "disk",
)


def _portable(args: list[str]) -> list[str]:
    """``args`` as a reader can re-run them: an absolute path becomes relative to the working
    directory when it lies inside it, else its file name (no machine paths in the JSON)."""
    out = []
    for arg in args:
        path = Path(arg)
        if not path.is_absolute():
            out.append(arg)
        elif path.is_relative_to(Path.cwd()):
            out.append(str(path.relative_to(Path.cwd())))
        else:
            out.append(path.name)
    return out


def _module_exists(module: str) -> bool:
    return (ROOT / (module.replace(".", "/") + ".py")).is_file()


def _last_json_line(text: str) -> dict[str, Any] | None:
    for raw in reversed(text.splitlines()):
        line = raw.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def _run_script(module: str, args: list[str], timeout_s: float) -> dict[str, Any]:
    """Run one script, echo its output live, return its final JSON line (or an error)."""
    cmd = [sys.executable, "-m", module, *args]
    print(f"\n=== {' '.join(cmd[1:])}", flush=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # Third-party deprecation chatter (quixstreams' optional deps) is not ours to fix.
    env.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    t0 = time.perf_counter()
    lines: list[str] = []
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=None,
        text=True,
        bufsize=1,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            # The JSON line is for the runner; everything else is for people.
            if not line.lstrip().startswith('{"'):
                sys.stdout.write(line)
                sys.stdout.flush()
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = -9
    elapsed = time.perf_counter() - t0
    payload = _last_json_line("".join(lines))
    if payload is None:
        payload = {"bench": module, "error": f"no JSON line (exit code {rc})"}
    payload["exit_code"] = rc
    payload["elapsed_s"] = round(elapsed, 2)
    return payload


def _results_from(payload: dict[str, Any], group: str) -> list[Result]:
    """Turn a script's JSON back into table rows; tolerate other scripts' shapes."""
    out: list[Result] = []
    for item in payload.get("results", []) or []:
        if not isinstance(item, dict) or "name" not in item or "value" not in item:
            continue
        target = None
        raw_target = item.get("target")
        if isinstance(raw_target, str) and " " in raw_target:
            kind, _, thr = raw_target.partition(" ")
            if kind in ("ratio>=", "ratio<=", "value>=", "value<="):
                target = Target(kind, float(thr))  # type: ignore[arg-type]
        try:
            value = float(item["value"])
        except (TypeError, ValueError):
            continue
        base = item.get("baseline_value")
        cpu = item.get("cpu_ratio")
        res = Result(
            name=str(item["name"]),
            value=value,
            unit=str(item.get("unit", "")),
            baseline_name=item.get("baseline_name"),
            baseline_value=None if base is None else float(base),
            target=target,
            note=str(item.get("note", "")),
            group=group,
            cpu_ratio=None if cpu is None else float(cpu),
        )
        # A script may judge its own target in a shape we do not parse: keep its verdict.
        if target is None and item.get("status") in ("PASS", "FAIL"):
            res.note = (res.note + " " if res.note else "") + f"[{item['status']} by {group}]"
        out.append(res)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__.split("\n")[0]
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes (seconds): smoke test")
    size.add_argument("--tiny", action="store_true", help="smallest sizes (tests use this)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"a script ({', '.join(SCRIPTS)}) or a store case ({', '.join(STORE_CASES)}); repeatable",
    )
    parser.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="write the report here"
    )
    parser.add_argument(
        "--reps", type=int, default=None, help="repetitions (default: 3 full, 1 quick)"
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds allowed per script (default 1800)"
    )
    args = parser.parse_args(argv)

    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    scripts = [s for s in args.only if s in SCRIPTS]
    cases = [c for c in args.only if c in STORE_CASES]
    unknown = [x for x in args.only if x not in SCRIPTS and x not in STORE_CASES]
    if unknown:
        parser.error(f"unknown --only name(s): {', '.join(unknown)}")
    if cases and "store" not in scripts:
        scripts.append("store")
    if not scripts:
        scripts = list(SCRIPTS)

    started = time.time()
    report: dict[str, Any] = {
        "mode": mode,
        "command": " ".join(
            [Path(sys.executable).name, "-m", "benchmarks.run", *_portable(argv or sys.argv[1:])]
        ),
        "started_unix": started,
        "machine": machine_info(),
        "scripts": {},
        "missing": [],
    }
    rows: list[Result] = []
    for short in scripts:
        module = SCRIPTS[short]
        if not _module_exists(module):
            report["missing"].append(module)
            print(f"\n=== {module}: not present, skipped", flush=True)
            continue
        script_args: list[str] = []
        if short == "store":
            script_args += ["--size", mode]
            for c in cases:
                script_args += ["--only", c]
            if args.reps is not None:
                script_args += ["--reps", str(args.reps)]
        elif short == "txn":
            script_args += ["--size", mode]
            if args.reps is not None:
                script_args += ["--reps", str(args.reps)]
        elif short == "commit":
            script_args += ["--size", mode]
        elif short == "service":
            script_args += ["--seconds", "3" if mode == "full" else "0.3"]
        elif mode != "full":
            script_args.append("--quick")
        payload = _run_script(module, script_args, args.timeout)
        report["scripts"][short] = payload
        rows.extend(_results_from(payload, short))

    report["elapsed_s"] = round(time.time() - started, 1)
    print_table(rows, title=f"=== summary ({mode}, {report['elapsed_s']}s)")
    if report["missing"]:
        print(f"  missing scripts (skipped): {', '.join(report['missing'])}")
    failed = [r.name for r in rows if r.status == "FAIL"]
    errors = [k for k, v in report["scripts"].items() if v.get("exit_code") != 0 or "error" in v]
    report["failed_targets"] = failed
    report["script_errors"] = errors

    json_path = args.json or ROOT / "bench-results" / f"bench-{mode}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    print(f"JSON report: {json_path}")
    if errors:
        print(f"script errors: {', '.join(errors)}", file=sys.stderr)
        return 1
    # Missed targets are reported, not turned into a failing exit: they are findings.
    return 0


if __name__ == "__main__":
    sys.exit(main())
