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
  log is retried after ``retry_backoff_ms``, doubling per failure up to ``retry_backoff_max_ms``;
- backpressure (:meth:`CleanerService.pace`, called by a committer after each commit): a
  log whose dirty tail outgrew ``backpressure_dirty_ratio * clean bytes +
  backpressure_min_bytes`` is made due at once and the committer waits for a pass over it,
  so that a writer faster than the cleaner goes at the cleaner's pace instead of growing
  what a restore replays.

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
from changelog.cleaner.manager import CleanerManager, cleanable_offsets, read_cleaner_checkpoint
from changelog.cleaner.offset_map import OffsetMap
from changelog.cleaner.stats import CleanerTotals
from changelog.cleaner.throttle import Throttler
from changelog.cleaner.worker import WORKER_NICENESS, clean_in_process
from changelog.config import CleanerConfig
from changelog.errors import ChangelogError, CleanerAbortedError, CleanerServiceStateError

if TYPE_CHECKING:
    from changelog.log.log import Log

__all__ = [
    "PACE_MAX_WAIT_S",
    "WORKER_NICENESS",
    "CleanerService",
    "Throttler",
    "WorkerMode",
    "clean_in_process",
]
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

PACE_MAX_WAIT_S: Final = 60.0
"""The longest one :meth:`CleanerService.pace` call waits; past it the commit returns with a
warning (a stuck or failing cleaner must not stop writers for good)."""

WorkerMode = Literal["process", "thread"]
"""Where a pass's CPU work runs: a child process per pass (default) or the worker thread."""


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _kept_share(log: Log, clean_before: int, stats: CleanerStats) -> float | None:
    """The share of the dirty bytes a pass kept: the growth of the clean part over the dirty
    bytes it indexed, within 0 and 1 (``None`` when it indexed nothing)."""
    if stats.map_bytes_read <= 0:
        return None
    with log.lock:
        clean_after = sum(
            segment.size_bytes
            for segment in log.segments
            if segment.base_offset < stats.end_offset and segment is not log.active_segment
        )
    return min(1.0, max(0.0, (clean_after - clean_before) / stats.map_bytes_read))


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
    ``_aborting``, ``_history``, ``_totals``, ``_last_stats``, ``_first_dirty``, ``_urgent``
    and ``_passes``; ``_passed`` (a condition on ``_lock``) is notified after every pass; the
    :class:`CleanerManager` has its own lock.
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
        self._passed = threading.Condition(self._lock)
        self._passes: dict[Path, int] = {}
        """Passes that ended (cleaned, failed or aborted) per log directory."""
        self._first_dirty: dict[Path, int] = {}
        """Each log's first dirty offset as its last pass left it (read from the checkpoint
        file the first time :meth:`pace` measures a log)."""
        self._kept: dict[Path, tuple[float, int]] = {}
        """Per log, the share of the dirty bytes its last pass kept (0 to 1) and the dirty
        bytes it indexed: how much of a dirty tail is live, as far as the last pass could
        tell, and over how many bytes it looked (see :meth:`pace`)."""
        self._urgent: set[Path] = set()
        """Logs a committer waits for: due at once, whatever their dirty ratio."""
        self._wake = threading.Event()
        """Set by :meth:`pace` and :meth:`close`: a backing-off worker looks again at once."""
        self.pace_waits = 0
        """Commits that waited in :meth:`pace` (a metric; read from any thread)."""
        self.pace_wait_s = 0.0
        """Seconds commits spent waiting in :meth:`pace`."""

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
        with self._lock:
            urgent = frozenset(self._urgent)
        to_clean = self.manager.grab_filthiest_log(self._current_logs(), now, urgent=urgent)
        if to_clean is None:
            return None
        log = to_clean.log
        key = Path(log.dir)
        try:
            return self._run_pass(to_clean, now, offset_map)
        finally:
            with self._passed:
                self._passes[key] = self._passes.get(key, 0) + 1
                self._passed.notify_all()

    def _run_pass(
        self, to_clean: Any, now: int, offset_map: OffsetMap | None
    ) -> CleanerStats | None:
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
        kept = _kept_share(log, to_clean.clean_bytes, stats)
        with self._lock:
            self._first_dirty[key] = stats.end_offset
            if kept is not None:
                self._kept[key] = (kept, stats.map_bytes_read)
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

    # ----------------------------------------------------------------- backpressure

    def pace(self, logs: Iterable[Log]) -> float:
        """Wait while any of ``logs`` has a dirty tail over its bound that a pass can shrink.

        For a committer, after its commit is durable: the bound of a log is
        ``backpressure_dirty_ratio * clean bytes + backpressure_min_bytes`` (its
        :class:`~changelog.config.LogConfig`; ratio 0: never waits), the dirty
        tail everything from the first dirty offset to the log end.  A log
        whose last pass kept at least ``1 / (1 + ratio)`` of the dirty bytes it
        indexed (mostly distinct keys: a pass cannot shrink it, and what a
        restore replays is within ``(1 + ratio)`` times the live data anyway)
        does not wait while its tail is within ``(1 + ratio)`` times what that
        pass indexed (beyond it the estimate is stale and the tail counts in
        full).  While the
        tail is over the bound and rolled dirty segments below the first uncleanable
        offset (cleaning barrier, compaction lag, open transactions) exist, the log
        is due at once (whatever its dirty ratio) and the caller waits for the
        next pass over it, then measures again.  It never waits when the
        service is not running, for a log that is paused or whose last pass
        failed, nor more than :data:`PACE_MAX_WAIT_S` in all (then it logs a
        warning and returns).  Returns the seconds waited.

        Thread-safety: thread-safe; any number of committers may wait at once.
        The caller holds no lock a cleaning pass needs (no commit lock).
        """
        waited = 0.0
        for log in logs:
            if log.config.backpressure_dirty_ratio > 0 and log.config.compact:
                waited += self._pace_one(log)
        return waited

    def _over_bound(self, log: Log) -> bool:
        """Whether ``log``'s dirty tail is over its bound and a pass could shrink it."""
        key = Path(log.dir)
        config = log.config
        with self._lock:
            checkpoint = self._first_dirty.get(key)
        if checkpoint is None:
            checkpoint = read_cleaner_checkpoint(log)
            with self._lock:
                self._first_dirty.setdefault(key, checkpoint if checkpoint is not None else -1)
        elif checkpoint < 0:
            checkpoint = None
        with log.lock:
            first_dirty, first_uncleanable, _reset = cleanable_offsets(
                log, checkpoint, self.now_ms()
            )
            if first_uncleanable <= first_dirty:
                return False  # nothing a pass may clean: waiting would not help
            clean = tail = 0
            for segment in log.segments:
                if segment.base_offset < first_dirty and segment is not log.active_segment:
                    clean += segment.size_bytes
                else:
                    tail += segment.size_bytes
        ratio = config.backpressure_dirty_ratio
        with self._lock:
            kept, indexed = self._kept.get(key, (0.0, 0))
        if kept * (1.0 + ratio) >= 1.0 and tail <= (1.0 + ratio) * indexed:
            return False  # mostly live: replayed <= (1 + ratio) x live already
        return tail > ratio * clean + config.backpressure_min_bytes

    def _pace_one(self, log: Log) -> float:
        if log.size_bytes <= log.config.backpressure_min_bytes:
            return 0.0  # the quick path: a tail within the fixed allowance
        key = Path(log.dir)
        started = time.monotonic()
        deadline = started + PACE_MAX_WAIT_S
        registered = False
        try:
            while True:
                with self._lock:
                    if self._state != "started" or self._stop.is_set():
                        return 0.0
                    seen = self._passes.get(key, 0)
                if (
                    log.closed
                    or self.manager.is_paused_or_failing(log)
                    or not self._over_bound(log)
                ):
                    break
                with self._passed:
                    if not registered:
                        registered = True
                        self._urgent.add(key)
                        self.pace_waits += 1
                        self._wake.set()
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        _log.warning(
                            "[%s-%s] a commit waited %.0f s for the cleaner to shrink the "
                            "dirty tail and goes on (backpressure_dirty_ratio)",
                            log.topic,
                            log.partition,
                            PACE_MAX_WAIT_S,
                        )
                        break
                    if self._passes.get(key, 0) == seen and not self._stop.is_set():
                        self._passed.wait(timeout=min(remaining, ROLL_POLL_S * 5))
        finally:
            waited = time.monotonic() - started if registered else 0.0
            if registered:
                with self._lock:
                    self._urgent.discard(key)
                    self.pace_wait_s += waited
        return waited

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
            self._first_dirty.pop(Path(log.dir), None)  # the log may have been truncated
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
        self._wake.set()
        with self._passed:
            self._passed.notify_all()
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
        while not self._stop.is_set():
            if self._wake.wait(min(ROLL_POLL_S, max(0.0, deadline - time.monotonic()))):
                self._wake.clear()  # a committer waits (or the service closes): look now
                return
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
