"""The background runner of the log cleaner: workers, backoff, retention checks, throttling, shutdown.

The cleaning itself is :func:`changelog.cleaner.clean.clean`, a plain function; this
module only decides when and where it runs (Kafka's ``LogCleaner`` and its
``CleanerThread``s, plus the ``LogManager`` retention task):

- ``threads`` workers each loop: pick the filthiest due log
  (:meth:`CleanerManager.grab_filthiest_log`), clean it with the worker's own
  offset map (``dedupe_buffer_size_bytes / threads`` each, as Kafka), and sleep
  ``backoff_ms`` when nothing is due, waking early when a log rolls (a roll is what
  makes dirty data cleanable);
- one retention thread calls ``log.delete_old_segments()`` every
  ``retention_check_interval_ms`` on every log whose policy includes ``delete``
  (so ``compact,delete`` logs get both);
- cleaner I/O is throttled to ``io_max_bytes_per_second`` across all workers
  (one shared throttle for thread workers; an equal share per worker process);
- :meth:`CleanerService.close` (and :meth:`CleanerService.abort_and_pause`,
  for a log about to be truncated) aborts running passes: between batches in
  a thread, by killing the worker process (its ``.cleaned`` files are deleted);
- a pass that fails marks its log uncleanable and logs why; the others go on, and the
  log is retried after ``retry_backoff_ms``, doubling per failure up to ``retry_backoff_max_ms``.

Writers and the cleaner: a pass is CPU-bound Python (decode, hash, encode).
In a thread it holds the GIL, and a writer that released it for an fsync
waits up to ``sys.getswitchinterval()`` to get it back after every append.
Measured with ``benchmarks/cleaner_bench.py --quick`` on the 2-core machine:
appends fsynced one by one kept 7% of their throughput during a pass in a
thread and 77% with the pass in a worker process (unsynced appends: 45%
and 112%).  So by default (``worker="process"``) each pass runs its map and
recopy (:func:`changelog.cleaner.clean.compact`) in a child Python process
(:func:`changelog.cleaner.worker.clean_in_process`), niced by
:data:`~changelog.cleaner.worker.WORKER_NICENESS` so that writers win the
cores when they contend; the worker thread only waits for it and does the
brief swap.  A worker process costs an interpreter start per pass (0.3-0.7 s
measured on the loaded 2-core machine) and ~32 MB of RSS while it runs;
``worker="thread"`` avoids both; a pass over a log of at most
:data:`IN_THREAD_MAX_BYTES` runs in the worker thread either way.  Throttling is :mod:`changelog.cleaner.throttle`.

Every entry point can also be driven without threads: :meth:`CleanerService.run_once`
and :meth:`CleanerService.check_retention` take an explicit time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from changelog.cleaner.clean import CleanerStats, clean, map_memory_bytes
from changelog.cleaner.manager import CleanerManager
from changelog.cleaner.offset_map import OffsetMap
from changelog.cleaner.stats import CleanerTotals
from changelog.cleaner.throttle import Throttler
from changelog.cleaner.worker import WORKER_NICENESS, clean_in_process
from changelog.config import CleanerConfig
from changelog.errors import ChangelogError, CleanerAbortedError, CleanerServiceStateError

if TYPE_CHECKING:
    from changelog.log.log import Log

__all__ = ["WORKER_NICENESS", "CleanerService", "Throttler", "WorkerMode", "clean_in_process"]
# Throttler, clean_in_process and WORKER_NICENESS live in cleaner_throttle / cleaner_worker;
# they are re-exported here, where callers have always found them.

_log = logging.getLogger(__name__)

IN_THREAD_MAX_BYTES: Final = 1024 * 1024
"""With ``worker="process"``, a pass over a log of at most this many bytes (clean plus
dirty) still runs in the worker thread: starting an interpreter (0.3-0.7 s of CPU on
the 2-core machine) costs more than such a pass, and holding the GIL for it stalls
writers for milliseconds.  Small logs rolled by ``roll_dirty_ratio`` are cleaned
often; this keeps that cheap."""

ROLL_POLL_S: Final = 0.2
"""How often a backing-off worker looks for a rolled log (a few attribute reads per log)."""

WorkerMode = Literal["process", "thread"]
"""Where a pass's CPU work runs: a child process per pass (default) or the worker thread."""


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


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
    ``_aborting``, ``_history``, ``_totals`` and ``_last_stats``; the :class:`CleanerManager` has its own lock.
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
        self.manager = CleanerManager(
            retry_backoff_ms=self.config.retry_backoff_ms,
            retry_backoff_max_ms=self.config.retry_backoff_max_ms,
        )
        self._logs = logs
        self._clock = clock or _wall_clock_ms
        self._throttler = Throttler(self.config.io_max_bytes_per_second)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._state = "created"
        self._aborting: set[Path] = set()
        self._history: list[CleanerStats] = []
        self._totals = CleanerTotals()
        self._last_stats: dict[str, CleanerStats] = {}
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

    @property
    def totals(self) -> CleanerTotals:
        """Sums over every pass completed since the service was created (a copy)."""
        with self._lock:
            return attrs.evolve(self._totals)

    def last_stats(self) -> list[CleanerStats]:
        """The last completed pass of each thread that ran passes (Kafka's ``cleaner.lastStats``)."""
        with self._lock:
            return list(self._last_stats.values())

    @property
    def dead_thread_count(self) -> int:
        """Cleaner threads that died while the service runs (Kafka's ``DeadThreadCount``)."""
        with self._lock:
            if self._state != "started":
                return 0
            return sum(1 for thread in self._threads if not thread.is_alive())

    # ----------------------------------------------------------------- one step, no threads

    def run_once(
        self, now_ms: int | None = None, *, offset_map: OffsetMap | None = None
    ) -> CleanerStats | None:
        """Clean the filthiest due log once; ``None`` when no log is due.

        A failure other than an abort marks the log uncleanable (logged with
        its traceback) and returns ``None``; it does not propagate.
        """
        if self._state == "closed":
            raise CleanerServiceStateError("closed", "run a pass")
        now = self.now_ms() if now_ms is None else now_ms
        to_clean = self.manager.grab_filthiest_log(self._current_logs(), now)
        if to_clean is None:
            return None
        log = to_clean.log
        key = Path(log.dir)
        in_process = self.worker == "process" and to_clean.total_bytes > IN_THREAD_MAX_BYTES
        if offset_map is None and not in_process:
            offset_map = OffsetMap(
                map_memory_bytes(self.config), load_factor=self.config.dedupe_buffer_load_factor
            )

        def aborted() -> bool:
            return self._stop.is_set() or key in self._aborting

        try:
            if in_process:
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
            retry_at = self.manager.mark_uncleanable(
                log, f"{type(exc).__name__}: {exc}", now_ms=now
            )
            _log.exception(
                "[%s-%s] cleaning failed; the log is uncleanable, retried in %s ms",
                log.topic,
                log.partition,
                retry_at - now,
            )
            return None
        self.manager.done(log, cleaned=True)
        with self._lock:
            self._history.append(stats)
            del self._history[:-1000]
            self._totals.add(stats, self.now_ms())
            self._last_stats[threading.current_thread().name] = stats
        return stats

    def check_retention(self, now_ms: int | None = None) -> int:
        """Apply retention to every log whose policy includes ``delete``; segments deleted.

        A log whose retention fails is logged and skipped.
        """
        if self._state == "closed":
            raise CleanerServiceStateError("closed", "apply retention")
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
                raise CleanerServiceStateError(self._state, "start")
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
                _log.exception(
                    "[%s] unexpected error; backing off", threading.current_thread().name
                )
                stats = None
            if stats is None:
                self._back_off(backoff_s)

    def _back_off(self, backoff_s: float) -> None:
        """Sleep ``backoff_s`` (nothing was due), but wake as soon as a log rolled: a roll is
        what makes dirty data cleanable (a roll by ``roll_dirty_ratio`` is meant to be
        cleaned at once, so that a restore never replays much more than the live data)."""
        rolled_at = self._active_bases()
        deadline = time.monotonic() + backoff_s
        while not self._stop.wait(min(ROLL_POLL_S, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline or self._active_bases() != rolled_at:
                return

    def _active_bases(self) -> dict[Path, int]:
        bases: dict[Path, int] = {}
        for log in self._current_logs():
            try:
                bases[log.dir] = log.active_segment.base_offset
            except (ChangelogError, IndexError):  # closing meanwhile
                continue
        return bases

    def _retain(self) -> None:
        interval_s = self.config.retention_check_interval_ms / 1000
        while not self._stop.wait(interval_s):
            try:
                self.check_retention()
            except ChangelogError:
                if self._stop.is_set():
                    return
                raise
