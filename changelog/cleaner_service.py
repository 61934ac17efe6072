"""The background runner of the log cleaner: workers, backoff, retention checks, throttling, shutdown.

The cleaning itself is :func:`changelog.cleaner.clean`, a plain function; this
module only decides when and where it runs (Kafka's ``LogCleaner`` and its
``CleanerThread``s, plus the ``LogManager`` retention task):

- ``threads`` workers each loop: pick the filthiest due log
  (:meth:`CleanerManager.grab_filthiest_log`), clean it with the worker's own
  offset map (``dedupe_buffer_size_bytes / threads`` each, as Kafka), and sleep
  ``backoff_ms`` when nothing is due;
- one retention thread calls ``log.delete_old_segments()`` every
  ``retention_check_interval_ms`` on every log whose policy includes ``delete``
  (so ``compact,delete`` logs get both);
- cleaner I/O is throttled to ``io_max_bytes_per_second`` across all workers
  (one shared throttle for thread workers; an equal share per worker process);
- :meth:`CleanerService.close` (and :meth:`CleanerService.abort_and_pause`,
  for a log about to be truncated) aborts running passes: between batches in
  a thread, by killing the worker process (its ``.cleaned`` files are deleted);
- a pass that fails marks its log uncleanable and logs why; the others go on.

Writers and the cleaner: a pass is CPU-bound Python (decode, hash, encode).
In a thread it holds the GIL, and a writer that released it for an fsync
waits up to ``sys.getswitchinterval()`` to get it back after every append.
Measured with ``benchmarks/cleaner_bench.py --quick`` on the 2-core machine:
appends fsynced one by one kept 7% of their throughput during a pass in a
thread and 77% with the pass in a worker process (unsynced appends: 45%
and 112%).  So by default (``worker="process"``) each pass runs its map and
recopy (:func:`changelog.cleaner.compact`) in a child Python process
(:func:`clean_in_process`); the worker thread only waits for it and does the
brief swap.  A worker process costs an interpreter start per pass (0.3-0.7 s
measured on the loaded 2-core machine) and ~32 MB of RSS while it runs;
``worker="thread"`` avoids both.

Every entry point can also be driven without threads: :meth:`CleanerService.run_once`
and :meth:`CleanerService.check_retention` take an explicit time.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from changelog import files
from changelog.cleaner import (
    CleanerStats,
    Compacted,
    PassInput,
    SourceSegment,
    clean,
    commit,
    compact,
    map_memory_bytes,
    snapshot,
)
from changelog.cleaner_manager import CleanerManager, LogToClean
from changelog.config import CleanerConfig, LogConfig
from changelog.errors import ChangelogError, CleanerAbortedError, CorruptRecordError
from changelog.offset_map import OffsetMap
from changelog.segment import LogSegment
from changelog.segment_reader import SegmentReader

if TYPE_CHECKING:
    from changelog.log import Log

__all__ = ["CleanerService", "Throttler", "WorkerMode", "clean_in_process"]

_log = logging.getLogger(__name__)

WorkerMode = Literal["process", "thread"]
"""Where a pass's CPU work runs: a child process per pass (default) or the worker thread."""

_POLL_S: Final = 0.02


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# ----------------------------------------------------------------- the worker process


def _cleaned_files(directory: Path, base_offset: int) -> list[Path]:
    return [
        directory / (files.segment_file_name(base_offset, kind) + files.CLEANED_SUFFIX)
        for kind in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)
    ]


def _worker_env() -> dict[str, str]:
    """The parent's environment, with this package's root first on ``PYTHONPATH``."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def clean_in_process(
    to_clean: LogToClean,
    *,
    config: CleanerConfig,
    now_ms: int,
    abort: Callable[[], bool] = lambda: False,
) -> CleanerStats:
    """One pass whose CPU work (steps 1-2) runs in a child Python process.

    The parent takes the snapshot under ``log.lock`` (read-only descriptors
    of the source segments, handed to the child), waits for the child while
    checking ``abort()``, then opens the child's ``.cleaned`` segments and
    swaps them in (steps 3-4) itself.  Writers in the parent then compete
    with the pass for CPU, not for the GIL (see docs/operations.md).  On an
    abort the child is killed and its ``.cleaned`` files deleted.  A failure
    in the child is re-raised here (``CorruptRecordError`` keeps its path and
    position).
    """
    started = time.monotonic()
    inputs, segments, sources = snapshot(to_clean)
    inputs = attrs.evolve(inputs, now_ms=now_ms)
    directory = Path(inputs.directory)
    request = {
        "inputs": {**attrs.asdict(inputs), "log_config": attrs.asdict(inputs.log_config)},
        "config": attrs.asdict(config),
        "sources": [
            {
                **attrs.asdict(source, filter=lambda a, _v: a.name != "reader"),
                "path": str(source.reader.path),
            }
            for source in sources
        ],
    }
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "changelog.cleaner_service", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=[source.fd for source in sources],
            text=True,
            env=_worker_env(),
        )
    except BaseException:
        for source in sources:
            source.reader.close()
        raise
    for source in sources:  # the child has its own copies now
        source.reader.close()
    try:
        with proc:  # closes the pipes and reaps the child whatever happens
            reply = _wait(proc, json.dumps(request), abort, inputs.name)
    except Exception:
        for source in sources:
            for path in _cleaned_files(directory, source.base_offset):
                files.delete_file(path, "cleaner.worker.cleanup")
        raise
    cleaned = [
        LogSegment.open(directory, base, config=inputs.log_config, file_suffix=files.CLEANED_SUFFIX)
        for base in reply["cleaned"]
    ]
    stats = CleanerStats(**reply["stats"])
    compacted = Compacted(stats=stats, cleaned=cleaned, replaced=reply["replaced"])
    return commit(to_clean.log, segments, compacted, started)


def _wait(
    proc: subprocess.Popen[str], request: str, abort: Callable[[], bool], name: str
) -> dict[str, Any]:
    """Send the request, wait for the reply while honouring ``abort``; raise what the child raised."""
    pending: str | None = request
    while True:
        try:
            out, _ = proc.communicate(pending, timeout=_POLL_S)
            break
        except subprocess.TimeoutExpired:
            pending = None  # already handed over; communicate() keeps feeding it
            if abort():
                proc.kill()
                proc.wait()
                raise CleanerAbortedError(
                    f"[{name}] cleaning aborted (worker process killed)"
                ) from None
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    try:
        reply: dict[str, Any] = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except ValueError:
        reply = {}
    if proc.returncode == 0 and "stats" in reply:
        return reply
    error = reply.get("error") or {}
    if error.get("type") == "CorruptRecordError":
        raise CorruptRecordError(
            error["path"],
            error["position"],
            error["reason"],
            expected=error.get("expected"),
            actual=error.get("actual"),
        )
    if error.get("type") == "CleanerAbortedError":
        raise CleanerAbortedError(error.get("message", "aborted"))
    raise ChangelogError(
        f"[{name}] cleaner worker process failed (exit code {proc.returncode}): "
        f"{error.get('type', 'no reply')}: {error.get('message', '')}"
    )


def _worker_main() -> int:
    """Entry point of the child: read the request from stdin, compact, reply on stdout."""
    request = json.loads(sys.stdin.read())
    inputs_raw = dict(request["inputs"])
    inputs_raw["log_config"] = LogConfig(**inputs_raw["log_config"])
    inputs = PassInput(**inputs_raw)
    config = CleanerConfig(**request["config"])
    sources = [
        SourceSegment(
            base_offset=raw["base_offset"],
            next_base_offset=raw["next_base_offset"],
            size_bytes=raw["size_bytes"],
            offset_index_bytes=raw["offset_index_bytes"],
            time_index_bytes=raw["time_index_bytes"],
            fd=raw["fd"],
            reader=SegmentReader(
                raw["fd"],
                Path(raw["path"]),
                raw["base_offset"],
                raw["size_bytes"],
                functools.partial(os.close, raw["fd"]),
            ),
        )
        for raw in request["sources"]
    ]
    throttler = Throttler(config.io_max_bytes_per_second / config.threads)
    try:
        compacted = compact(inputs, sources, config=config, throttle=throttler.maybe_throttle)
    except CorruptRecordError as exc:
        reply: dict[str, Any] = {
            "error": {
                "type": "CorruptRecordError",
                "path": str(exc.path),
                "position": exc.position,
                "reason": exc.reason,
                "expected": repr(exc.expected) if exc.expected is not None else None,
                "actual": repr(exc.actual) if exc.actual is not None else None,
            }
        }
        print(json.dumps(reply), flush=True)
        return 1
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        print(json.dumps({"error": {"type": type(exc).__name__, "message": str(exc)}}), flush=True)
        return 1
    for segment in compacted.cleaned:
        segment.close()
    reply = {
        "stats": attrs.asdict(compacted.stats),
        "cleaned": [segment.base_offset for segment in compacted.cleaned],
        "replaced": compacted.replaced,
    }
    print(json.dumps(reply), flush=True)
    return 0


class Throttler:
    """Keeps a byte rate under ``bytes_per_second`` by sleeping (Kafka's ``Throttler``).

    Callers report bytes with :meth:`maybe_throttle`; once per ``check_interval_s``
    (or sooner, once a whole interval's budget of bytes has been seen) the
    observed rate is compared with the target and the caller sleeps long
    enough to bring it back.  ``math.inf`` disables it.

    Invariants: ``_observed`` counts the bytes since ``_period_start``; a
    period never ends before ``check_interval_s`` or its byte budget.

    Thread-safety: thread-safe; ``_lock`` guards the period's start and byte count
    (the sleep happens outside it).
    """

    def __init__(
        self,
        bytes_per_second: float,
        *,
        check_interval_s: float = 0.1,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bytes_per_second = bytes_per_second
        self._check_interval_s = check_interval_s
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = monotonic()
        self._observed = 0

    def maybe_throttle(self, nbytes: int) -> None:
        """Count ``nbytes`` of I/O and sleep if the rate is above the target."""
        if math.isinf(self.bytes_per_second):
            return
        with self._lock:
            self._observed += nbytes
            now = self._monotonic()
            elapsed = now - self._period_start
            budget = self.bytes_per_second * self._check_interval_s
            if elapsed < self._check_interval_s and self._observed < budget:
                return
            wanted = self._observed / self.bytes_per_second
            pause = wanted - elapsed
            self._period_start = now + max(pause, 0.0)
            self._observed = 0
        if pause > 0:
            self._sleep(pause)


class CleanerService:
    """Cleans many logs in the background (see the module docstring).

    ``logs`` is a collection of logs or a callable returning the current ones
    (a state directory's stores come and go).  ``clock`` returns milliseconds
    (default: wall clock); it is the "now" of compaction lags and delete horizons.

    Lifecycle: created -> started (:meth:`start`) -> closed (:meth:`close`,
    idempotent).  :meth:`run_once` and :meth:`check_retention` work in any
    state except closed, for tests and for callers with their own scheduler.

    Invariants: ``_state`` only moves forward (created -> started -> closed);
    a log is cleaned by at most one worker at a time (the manager's in-progress
    set); a log in ``_aborting`` is paused in the manager until :meth:`resume`.

    Thread-safety: thread-safe.  ``_lock`` guards ``_threads``, ``_state``,
    ``_aborting`` and ``_history``; the :class:`CleanerManager` has its own lock.
    """

    def __init__(
        self,
        logs: Iterable[Log] | Callable[[], Iterable[Log]],
        config: CleanerConfig | None = None,
        clock: Callable[[], int] | None = None,
        *,
        worker: WorkerMode = "process",
    ) -> None:
        self.config = config or CleanerConfig()
        self.worker: WorkerMode = worker
        self.manager = CleanerManager()
        self._logs = logs
        self._clock = clock or _wall_clock_ms
        self._throttler = Throttler(self.config.io_max_bytes_per_second)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._state = "created"
        self._aborting: set[Path] = set()
        self._history: list[CleanerStats] = []
        self._last_retention_ms: int | None = None

    # ----------------------------------------------------------------- inputs

    def _current_logs(self) -> Sequence[Any]:
        logs = self._logs() if callable(self._logs) else self._logs
        return [log for log in logs if not getattr(log, "closed", False)]

    def now_ms(self) -> int:
        """The service's clock."""
        return int(self._clock())

    @property
    def history(self) -> list[CleanerStats]:
        """Stats of the passes completed so far (oldest first)."""
        with self._lock:
            return list(self._history)

    # ----------------------------------------------------------------- one step, no threads

    def run_once(
        self, now_ms: int | None = None, *, offset_map: OffsetMap | None = None
    ) -> CleanerStats | None:
        """Clean the filthiest due log once; ``None`` when no log is due.

        A failure other than an abort marks the log uncleanable (logged with
        its traceback) and returns ``None``; it does not propagate.
        """
        if self._state == "closed":
            raise ChangelogError("cleaner service is closed")
        now = self.now_ms() if now_ms is None else now_ms
        to_clean = self.manager.grab_filthiest_log(self._current_logs(), now)
        if to_clean is None:
            return None
        log = to_clean.log
        key = Path(log.dir)
        if offset_map is None and self.worker == "thread":
            offset_map = OffsetMap(
                map_memory_bytes(self.config), load_factor=self.config.dedupe_buffer_load_factor
            )

        def aborted() -> bool:
            return self._stop.is_set() or key in self._aborting

        try:
            if self.worker == "process":
                stats = clean_in_process(to_clean, config=self.config, now_ms=now, abort=aborted)
            else:
                stats = clean(
                    to_clean,
                    config=self.config,
                    now_ms=now,
                    abort=aborted,
                    offset_map=offset_map,
                    throttle=self._throttler.maybe_throttle,
                )
        except CleanerAbortedError as exc:
            _log.info("[%s-%s] cleaning aborted: %s", log.topic, log.partition, exc)
            self.manager.done(log)
            return None
        except Exception as exc:  # noqa: BLE001 - per-log failure isolation: mark it, go on
            self.manager.mark_uncleanable(log, f"{type(exc).__name__}: {exc}")
            _log.exception(
                "[%s-%s] cleaning failed; the log is marked uncleanable", log.topic, log.partition
            )
            return None
        self.manager.done(log)
        with self._lock:
            self._history.append(stats)
            del self._history[:-1000]
        return stats

    def check_retention(self, now_ms: int | None = None) -> int:
        """Apply retention to every log whose policy includes ``delete``; segments deleted.

        A log whose retention fails is logged and skipped.
        """
        if self._state == "closed":
            raise ChangelogError("cleaner service is closed")
        deleted = 0
        for log in self._current_logs():
            if not log.config.delete:
                continue
            try:
                deleted += int(log.delete_old_segments() or 0)
            except Exception:  # noqa: BLE001 - one log's failure must not stop the others
                _log.exception("[%s-%s] retention check failed", log.topic, log.partition)
        self._last_retention_ms = self.now_ms() if now_ms is None else now_ms
        return deleted

    # ----------------------------------------------------------------- aborting one log

    def abort_and_pause(self, log: Log, timeout_s: float = 30.0) -> None:
        """Abort a running pass over ``log`` and keep the log paused (before truncating it).

        Returns once no pass over ``log`` runs (or raises ``TimeoutError``).
        """
        key = Path(log.dir)
        self.manager.pause(log)
        with self._lock:
            self._aborting.add(key)
        deadline = time.monotonic() + timeout_s
        while self.manager.in_progress(log):
            if time.monotonic() > deadline:
                raise TimeoutError(f"cleaning of {key} did not stop within {timeout_s}s")
            time.sleep(0.005)

    def resume(self, log: Log) -> None:
        """Undo :meth:`abort_and_pause`."""
        with self._lock:
            self._aborting.discard(Path(log.dir))
        self.manager.resume(log)

    # ----------------------------------------------------------------- threads

    def start(self) -> None:
        """Start ``threads`` cleaner workers and the retention thread."""
        with self._lock:
            if self._state != "created":
                raise ChangelogError(f"cleaner service cannot start: it is {self._state}")
            self._state = "started"
            for index in range(self.config.threads):
                thread = threading.Thread(
                    target=self._work, name=f"log-cleaner-{index}", daemon=True
                )
                self._threads.append(thread)
            self._threads.append(
                threading.Thread(target=self._retain, name="log-retention", daemon=True)
            )
            threads = list(self._threads)
        for thread in threads:
            thread.start()

    def close(self, timeout_s: float = 30.0) -> None:
        """Abort running passes, stop the threads and wait for them; idempotent."""
        with self._lock:
            if self._state == "closed":
                return
            self._state = "closed"
            threads = list(self._threads)
        self._stop.set()
        for thread in threads:
            thread.join(timeout_s)

    def __enter__(self) -> CleanerService:
        """Start on entry."""
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        """Close on exit."""
        self.close()

    def _work(self) -> None:
        offset_map = OffsetMap(
            map_memory_bytes(self.config), load_factor=self.config.dedupe_buffer_load_factor
        )
        backoff_s = self.config.backoff_ms / 1000
        while not self._stop.is_set():
            try:
                stats = self.run_once(offset_map=offset_map)
            except ChangelogError:
                if self._stop.is_set():
                    return
                raise
            except Exception:  # noqa: BLE001 - a worker must survive to clean other logs
                _log.exception("log cleaner worker: unexpected error; backing off")
                stats = None
            if stats is None:
                self._stop.wait(backoff_s)

    def _retain(self) -> None:
        interval_s = self.config.retention_check_interval_ms / 1000
        while not self._stop.wait(interval_s):
            try:
                self.check_retention()
            except ChangelogError:
                if self._stop.is_set():
                    return
                raise


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        raise SystemExit(_worker_main())
    raise SystemExit("usage: python -m changelog.cleaner_service --worker  (internal)")
