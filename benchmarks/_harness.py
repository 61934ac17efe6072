"""Shared mechanics of the benchmark scripts: data, timing, medians, peak RSS, table, JSON.

Every benchmark here compares against a baseline measured *in the same run*, interleaved
repetition by repetition, and reports medians; the ratio is what carries meaning on a noisy
2-core machine, not the absolute number.

A result line is a :class:`Result`: a measured value, an optional baseline value, their
ratio, and an optional :class:`Target` that says whether the ratio (or the value itself)
passes.  Scripts print a table with :func:`print_table` and end with one line of JSON
(:func:`emit_json`), which :mod:`benchmarks.run` folds into its report.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "BenchSizes",
    "PeakRss",
    "Result",
    "Stopwatch",
    "Target",
    "Timing",
    "dir_size_bytes",
    "emit_json",
    "fmt_num",
    "machine_info",
    "make_keys",
    "make_values",
    "median",
    "median_of",
    "print_table",
    "rate_result",
    "rss_bytes",
    "run_reps",
    "scratch_dir",
    "time_result",
    "timed",
    "timed_both",
]

# --------------------------------------------------------------------------- targets


TargetKind = Literal["ratio>=", "ratio<=", "value>=", "value<="]


@dataclass(frozen=True)
class Target:
    """A pass/fail rule: ``ratio>= 0.6`` means measured/baseline must be at least 0.6."""

    kind: TargetKind
    threshold: float

    def check(self, value: float, ratio: float | None) -> bool:
        subject = value if self.kind.startswith("value") else ratio
        if subject is None:
            return False
        if self.kind.endswith(">="):
            return subject >= self.threshold
        return subject <= self.threshold

    def __str__(self) -> str:
        return f"{self.kind} {self.threshold:g}"


@dataclass
class Result:
    """One line of the report.

    ``higher_is_better`` says how to read ``value`` (throughput: yes; seconds, bytes: no).
    ``ratio`` is ``value / baseline`` as printed; for a target on a time, the ratio is
    still time over baseline time, and the target's direction says which way passes.
    """

    name: str
    value: float
    unit: str
    baseline_name: str | None = None
    baseline_value: float | None = None
    target: Target | None = None
    samples: list[float] = field(default_factory=list)
    baseline_samples: list[float] = field(default_factory=list)
    note: str = ""
    group: str = "store"
    cpu_ratio: float | None = None
    """The same ratio computed from process CPU time instead of wall time (all threads of
    the process).  Other processes on the machine barely move it, so it is the cross-check
    for a wall-clock ratio taken on a loaded machine; it leaves out time spent waiting
    (fsync, sleeping), so it is not the verdict."""

    @property
    def ratio(self) -> float | None:
        if self.baseline_value is None or self.baseline_value == 0:
            return None
        return self.value / self.baseline_value

    @property
    def status(self) -> str:
        if self.target is None:
            return "info"
        return "PASS" if self.target.check(self.value, self.ratio) else "FAIL"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["target"] = str(self.target) if self.target else None
        out["ratio"] = self.ratio
        out["status"] = self.status
        return out


# --------------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class BenchSizes:
    """Workload sizes: ``full()`` for the report (~minutes), ``quick()`` for smoke tests."""

    put_records: int
    get_records: int
    range_scans: int
    range_span: int
    restore_keys: int
    quix_restore_keys: int
    incremental_keys: int
    incremental_tail: int
    updates_keys: int
    updates_per_key: int
    compaction_records: int
    compaction_buffer_bytes: int
    concurrent_records: int
    reps: int
    """Repetitions of the cheap cases (put, get, range)."""
    heavy_reps: int
    """Repetitions of the cases that rebuild or replay a large log."""
    commit_every: int = 1000

    @classmethod
    def full(cls) -> BenchSizes:
        return cls(
            put_records=200_000,
            get_records=200_000,
            range_scans=2_000,
            range_span=100,
            restore_keys=1_000_000,
            quix_restore_keys=1_000_000,  # equal to restore_keys: same size both sides
            incremental_keys=1_000_000,
            incremental_tail=100_000,
            updates_keys=100_000,
            updates_per_key=10,
            compaction_records=1_000_000,
            compaction_buffer_bytes=4 * 1024 * 1024,
            concurrent_records=200_000,
            reps=5,
            heavy_reps=3,
        )

    @classmethod
    def quick(cls) -> BenchSizes:
        return cls(
            put_records=5_000,
            get_records=5_000,
            range_scans=100,
            range_span=50,
            restore_keys=10_000,
            quix_restore_keys=10_000,
            incremental_keys=10_000,
            incremental_tail=1_000,
            updates_keys=2_000,
            updates_per_key=10,
            compaction_records=40_000,
            compaction_buffer_bytes=64 * 1024,
            concurrent_records=10_000,
            reps=1,
            heavy_reps=1,
        )

    @classmethod
    def tiny(cls) -> BenchSizes:
        """Smoke-test sizes: exercises every code path in a few seconds."""
        return cls(
            put_records=2_000,
            get_records=1_000,
            range_scans=20,
            range_span=20,
            restore_keys=2_000,
            quix_restore_keys=2_000,
            incremental_keys=2_000,
            incremental_tail=200,
            updates_keys=300,
            updates_per_key=10,
            compaction_records=6_000,
            compaction_buffer_bytes=16 * 1024,
            concurrent_records=2_000,
            reps=1,
            heavy_reps=1,
        )

    @classmethod
    def named(cls, name: str) -> BenchSizes:
        return {"full": cls.full, "quick": cls.quick, "tiny": cls.tiny}[name]()


# --------------------------------------------------------------------------- data


def make_keys(n: int, *, seed: int = 42, prefix: bytes = b"user:") -> list[bytes]:
    """``n`` distinct fixed-width keys in random order (the design brief: random key order)."""
    ids = list(range(n))
    random.Random(seed).shuffle(ids)
    return [b"%s%012d" % (prefix, i) for i in ids]


_REGIONS = ("eu-west-1", "us-east-1", "ap-south-1", "sa-east-1")


def make_values(n: int, *, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` small profile-like dicts whose msgpack encoding is ~100 bytes."""
    rng = random.Random(seed)
    return [
        {
            "id": i,
            "name": f"user-{rng.randrange(10**9):010d}",
            "balance": round(rng.uniform(0, 100_000), 2),
            "currency": "EUR",
            "active": rng.random() < 0.9,
            "tier": rng.randrange(5),
            "region": _REGIONS[i % 4],
            "updated_ms": 1_700_000_000_000 + i,
        }
        for i in range(n)
    ]


# --------------------------------------------------------------------------- timing


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


@contextmanager
def timed(out: list[float]) -> Iterator[None]:
    """Append the elapsed wall-clock seconds of the block to ``out``.

    The garbage collector is collected before and left as the application would have it
    (on): stores must be fast with the GC on.
    """
    gc.collect()
    t0 = time.perf_counter()
    try:
        yield
    finally:
        out.append(time.perf_counter() - t0)


@dataclass(frozen=True)
class Timing:
    """Wall-clock and process-CPU seconds of one measured section."""

    wall: float
    cpu: float


class Stopwatch:
    """``start()`` then ``stop() -> Timing``: wall clock and process CPU time together."""

    def __init__(self) -> None:
        self._wall = 0.0
        self._cpu = 0.0

    def start(self) -> Stopwatch:
        gc.collect()  # every measured section starts from a collected heap (the GC stays on)
        self._wall = time.perf_counter()
        self._cpu = time.process_time()
        return self

    def stop(self) -> Timing:
        return Timing(time.perf_counter() - self._wall, time.process_time() - self._cpu)


# --------------------------------------------------------------------------- result lines


def median_of(ts: Sequence[Timing], attr: str = "wall") -> float:
    """The median ``attr`` (``wall`` or ``cpu`` seconds) of ``ts``."""
    return median([getattr(t, attr) for t in ts])


def rate_result(
    name: str,
    n: int,
    unit: str,
    measured: Sequence[Timing],
    baseline_name: str | None = None,
    baseline: Sequence[Timing] = (),
    target: Target | None = None,
    note: str = "",
    group: str = "store",
) -> Result:
    """A throughput line: ``n`` operations per median second (higher is better)."""
    cpu_ratio = median_of(baseline, "cpu") / median_of(measured, "cpu") if baseline else None
    return Result(
        name=name,
        value=n / median_of(measured),
        unit=unit,
        baseline_name=baseline_name,
        baseline_value=n / median_of(baseline) if baseline else None,
        target=target,
        samples=[n / t.wall for t in measured],
        baseline_samples=[n / t.wall for t in baseline],
        note=note,
        group=group,
        cpu_ratio=cpu_ratio,
    )


def time_result(
    name: str,
    measured: Sequence[Timing],
    baseline_name: str | None = None,
    baseline: Sequence[Timing] = (),
    target: Target | None = None,
    note: str = "",
) -> Result:
    """A duration line: median seconds (lower is better)."""
    cpu_ratio = median_of(measured, "cpu") / median_of(baseline, "cpu") if baseline else None
    return Result(
        name=name,
        value=median_of(measured),
        unit="s",
        baseline_name=baseline_name,
        baseline_value=median_of(baseline) if baseline else None,
        target=target,
        samples=[t.wall for t in measured],
        baseline_samples=[t.wall for t in baseline],
        note=note,
        cpu_ratio=cpu_ratio,
    )


@contextmanager
def timed_both(out: list[Timing]) -> Iterator[None]:
    """Like :func:`timed`, appending a :class:`Timing` (wall and process CPU seconds)."""
    sw = Stopwatch().start()
    try:
        yield
    finally:
        out.append(sw.stop())


# --------------------------------------------------------------------------- memory


def rss_bytes() -> int:
    """Current resident set size of this process (psutil if present, else /proc)."""
    try:
        import psutil  # noqa: PLC0415 - optional bench dependency

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        with Path("/proc/self/statm").open() as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """Samples this process's RSS every ``interval_s`` in a thread; ``peak`` is the maximum.

    Thread-safe to read ``peak`` after ``stop()``.  Sampling holds the GIL for a few
    microseconds per sample, which is noise next to the work being measured.
    """

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.start_rss = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakRss:
        self.start_rss = self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, rss_bytes())


# --------------------------------------------------------------------------- files


@contextmanager
def scratch_dir(label: str) -> Iterator[Path]:
    """A fresh directory on the same disk as the project (``STATESTORE_BENCH_DIR`` or /tmp)."""
    base = os.environ.get("STATESTORE_BENCH_DIR")
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"bench-{label}-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def dir_size_bytes(path: Path, *, suffixes: tuple[str, ...] = ()) -> int:
    total = 0
    for p in path.rglob("*"):
        if p.is_file() and (not suffixes or p.name.endswith(suffixes)):
            total += p.stat().st_size
    return total


# --------------------------------------------------------------------------- output


def fmt_num(x: float | None) -> str:
    if x is None:
        return "-"
    if x != x:  # NaN
        return "nan"
    ax = abs(x)
    if ax >= 1e6:
        return f"{x / 1e6:.2f}M"
    if ax >= 1e4:
        return f"{x / 1e3:.1f}k"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def print_table(results: Sequence[Result], *, title: str = "", file: Any = None) -> None:
    out = file or sys.stdout
    head = (
        "benchmark",
        "value",
        "unit",
        "baseline",
        "base value",
        "ratio",
        "cpu ratio",
        "target",
        "status",
    )
    rows = [
        (
            r.name,
            fmt_num(r.value),
            r.unit,
            r.baseline_name or "-",
            fmt_num(r.baseline_value),
            "-" if r.ratio is None else f"{r.ratio:.2f}x",
            "-" if r.cpu_ratio is None else f"{r.cpu_ratio:.2f}x",
            str(r.target) if r.target else "-",
            r.status,
        )
        for r in results
    ]
    widths = [
        max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)
    ]
    if title:
        print(f"\n{title}", file=out)
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
    print(line, file=out)
    print("-" * len(line), file=out)
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)), file=out)
    notes = [r for r in results if r.note]
    for r in notes:
        print(f"  * {r.name}: {r.note}", file=out)
    out.flush()


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    versions: dict[str, str] = {}
    for mod in ("rocksdict", "msgpack", "aiokafka", "quixstreams", "psutil"):
        try:
            from importlib.metadata import version  # noqa: PLC0415

            versions[mod] = version(mod)
        except Exception:  # noqa: BLE001 - a missing optional package is just reported absent
            versions[mod] = "absent"
    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {
        "loadavg_1_5_15": load,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "mem_bytes": mem,
        "versions": versions,
    }


def emit_json(name: str, results: Sequence[Result], *, extra: dict[str, Any] | None = None) -> str:
    """Print the final JSON line of a benchmark script and return it."""
    payload: dict[str, Any] = {
        "bench": name,
        "results": [r.to_dict() for r in results],
    }
    if extra:
        payload.update(extra)
    line = json.dumps(payload, sort_keys=True, default=str)
    print(line, flush=True)
    return line


def run_reps(reps: int, fns: Sequence[Callable[[], float]]) -> list[list[float]]:
    """Run each function once per repetition, interleaved; each returns a measurement."""
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            out[i].append(fn())
    return out
