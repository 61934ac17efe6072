"""Which logs are due for cleaning, how much of each is cleanable, and the cleaner checkpoint.

The vocabulary is Kafka's (``LogCleanerManager``, ``LogToClean``):

- the **clean section** is ``[log start offset, first dirty offset)``: it has
  been through the cleaner and holds at most one record per key;
- the **first dirty offset** is the offset saved in the partition's
  ``cleaner-offset-checkpoint`` file after the last pass, clamped to the log:
  below the log start offset (retention or truncation removed the head) or
  above the log end offset (the tail was truncated) it is reset to the log
  start offset and the whole log is treated as dirty;
- the **first uncleanable offset** is the smallest of: the active segment's
  base offset (the active segment is never cleaned); the base offset of the
  first dirty segment whose newest record is younger than
  ``min_compaction_lag_ms``; and the base offset of the segment holding the
  log's ``cleaning_barrier_offset`` (a store that restores incrementally from
  an applied offset must still see every tombstone above it);
- the **dirty ratio** is ``dirty bytes / (clean bytes + dirty bytes)``, the
  dirty bytes being the segments in ``[first dirty, first uncleanable)``.

A log is **due** when, in this order of precedence:

1. a dirty record is older than ``max_compaction_lag_ms`` (KIP-354),
2. a tombstone or a transaction marker kept by an earlier pass has passed its delete
   horizon, or a marker whose transaction has no data left waits for its stamp
   (beyond Kafka: there, a quiet topic keeps such tombstones for ever), or
3. its dirty ratio exceeds ``min_cleanable_dirty_ratio``.

The earliest pending delete horizon of a log is remembered in memory after
each pass; for a log not yet cleaned by this process it is found once by
scanning the batch headers of the clean section (:mod:`changelog.cleaner.horizon`,
whose functions are re-exported here).

Thread-safety: the functions are pure except the pending-horizon memo (see
:mod:`changelog.cleaner.horizon`).  :class:`CleanerManager` is thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, Final

import attrs

from changelog.cleaner.horizon import (
    forget_pending_delete_horizon,
    pending_delete_horizon,
    record_pending_delete_horizon,
    scan_pending_delete_horizon,
)
from changelog.cleaner.views import CleanableLog, CleanableSegment
from changelog.fs.checkpoint import (
    CLEANER_CHECKPOINT,
    CLEANER_SWAP_CHECKPOINT,
    read_checkpoint,
    write_checkpoint,
)

__all__ = [
    "CleanableLog",
    "CleanableSegment",
    "CleanerManager",
    "LogToClean",
    "advance_swap_checkpoint",
    "cleanable_offsets",
    "forget_pending_delete_horizon",
    "log_to_clean",
    "pending_delete_horizon",
    "read_cleaner_checkpoint",
    "record_pending_delete_horizon",
    "scan_pending_delete_horizon",
    "write_cleaner_checkpoint",
]

_log = logging.getLogger(__name__)


DUE_MAX_COMPACTION_LAG: Final = "max compaction lag"
DUE_DELETE_HORIZON: Final = "delete horizon"
DUE_DIRTY_RATIO: Final = "dirty ratio"
DUE_FORCED: Final = "forced"


def _prefix(log: CleanableLog) -> str:
    return f"[{log.topic}-{log.partition}]"


# ---------------------------------------------------------------- checkpoint


def read_cleaner_checkpoint(log: CleanableLog) -> int | None:
    """The offset saved by the last pass (the first dirty offset), or ``None`` if never cleaned.

    A corrupt checkpoint raises :class:`~changelog.errors.CorruptCheckpointError`
    (with path and position); it is never silently treated as absent.
    """
    path = log.dir / CLEANER_CHECKPOINT
    if not path.exists():
        return None
    entries = read_checkpoint(path)
    return entries.get((log.topic, log.partition))


def write_cleaner_checkpoint(log: CleanableLog, offset: int) -> None:
    """Save ``offset`` as the first dirty offset (atomically: temp file, fsync, rename)."""
    write_checkpoint(log.dir / CLEANER_CHECKPOINT, {(log.topic, log.partition): offset})


def advance_swap_checkpoint(log: CleanableLog, offset: int) -> None:
    """Raise ``cleaner-swap-offset-checkpoint`` to ``offset`` (never lower it); atomic, fsynced.

    Step S1b of :mod:`changelog.log.replace`: the pass calls it, under
    ``log.lock``, before its cleaned segments can replace old ones, with its
    end offset (above the base offset of every group it rewrote).  A file that
    cannot be read raises :class:`~changelog.errors.CorruptCheckpointError`
    (the pass fails and is retried; nothing is swapped).
    """
    path = log.dir / CLEANER_SWAP_CHECKPOINT
    current = max(read_checkpoint(path).values(), default=-1)
    if offset > current:
        write_checkpoint(path, {(log.topic, log.partition): offset})


# ---------------------------------------------------------------- cleanable range


def _segments_from(log: CleanableLog, offset: int) -> list[Any]:
    """Non-active segments that may hold offsets ``>= offset`` (the one containing it first)."""
    segments = list(log.segments)
    out = []
    for index, segment in enumerate(segments[:-1]):
        next_base = segments[index + 1].base_offset
        if next_base > offset:
            out.append(segment)
    return out


def _segment_base_containing(log: CleanableLog, offset: int) -> int:
    """Base offset of the segment that holds ``offset`` (or the active segment's base)."""
    base = int(log.segments[0].base_offset)
    for segment in log.segments:
        if segment.base_offset <= offset:
            base = int(segment.base_offset)
        else:
            break
    return base


def cleanable_offsets(
    log: CleanableLog, checkpoint_offset: int | None, now_ms: int
) -> tuple[int, int, bool]:
    """``(first dirty offset, first uncleanable offset, checkpoint was reset)``.

    Both offsets are segment boundaries except the first dirty offset, which
    is wherever the last pass stopped.  ``first uncleanable >= first dirty``.
    """
    log_start = log.log_start_offset
    reset = False
    if checkpoint_offset is None:
        first_dirty = log_start
    elif checkpoint_offset < log_start:
        if not (log.config.compact and log.config.delete):
            _log.info(
                "%s resetting first dirty offset to log start offset %s: checkpointed offset %s is below it",
                _prefix(log),
                log_start,
                checkpoint_offset,
            )
        first_dirty, reset = log_start, True
    elif checkpoint_offset > log.log_end_offset:
        _log.warning(
            "%s checkpointed first dirty offset %s is above the log end offset %s; "
            "resetting to the log start offset %s",
            _prefix(log),
            checkpoint_offset,
            log.log_end_offset,
            log_start,
        )
        first_dirty, reset = log_start, True
    else:
        first_dirty = checkpoint_offset

    candidates = [log.active_segment.base_offset]
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for segment in _segments_from(log, first_dirty):
            if segment.largest_timestamp_ms > now_ms - lag:
                candidates.append(segment.base_offset)
                break
    barrier = log.cleaning_barrier_offset
    if barrier is not None:
        candidates.append(_segment_base_containing(log, barrier))
    lso = log.last_stable_offset
    if lso < log.log_end_offset:  # Kafka: never clean past the first unstable offset
        candidates.append(_segment_base_containing(log, lso))
    first_uncleanable = max(first_dirty, min(candidates))
    return first_dirty, first_uncleanable, reset


def max_compaction_delay_ms(log: CleanableLog, first_dirty_offset: int, now_ms: int) -> int:
    """How long past ``max_compaction_lag_ms`` the oldest dirty record is (0: not overdue).

    Like Kafka, the age of a dirty segment is the max timestamp of its first batch.
    """
    lag = log.config.max_compaction_lag_ms
    clean_until = now_ms - lag
    earliest: int | None = None
    for segment in _segments_from(log, first_dirty_offset):
        timestamp = segment.first_batch_timestamp_ms()
        if timestamp is not None and timestamp > 0 and (earliest is None or timestamp < earliest):
            earliest = timestamp
    if earliest is not None and earliest < clean_until:
        return clean_until - earliest
    return 0


# ---------------------------------------------------------------- one log's cleaning state


@attrs.frozen(kw_only=True)
class LogToClean:
    """A snapshot of one log's cleanable range and why (or whether) it is due.

    Invariants: ``first_dirty_offset <= first_uncleanable_offset``;
    ``clean_bytes, dirty_bytes >= 0``; ``due_reason`` is ``None`` exactly
    when the log is not due.  Immutable and thread-safe.
    """

    log: Any = attrs.field(eq=False, repr=False)
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    checkpoint_reset: bool
    max_compaction_delay_ms: int
    pending_delete_horizon_ms: int | None
    due_reason: str | None

    @property
    def total_bytes(self) -> int:
        """Clean plus dirty bytes."""
        return self.clean_bytes + self.dirty_bytes

    @property
    def dirty_ratio(self) -> float:
        """``dirty bytes / (clean bytes + dirty bytes)`` (0.0 for an empty range)."""
        total = self.total_bytes
        return self.dirty_bytes / total if total else 0.0


def log_to_clean(
    log: CleanableLog,
    *,
    now_ms: int,
    force: bool = False,
    checkpoint_offset: int | None = None,
    read_checkpoint_file: bool = True,
) -> LogToClean:
    """Measure ``log`` at ``now_ms`` and decide whether it is due.

    ``force`` makes a log with any dirty bytes due whatever its dirty ratio
    (it does not override the compaction lags or the cleaning barrier).
    """
    if read_checkpoint_file and checkpoint_offset is None:
        checkpoint_offset = read_cleaner_checkpoint(log)
    with log.lock:  # a consistent view of the segments; only a few header reads happen here
        first_dirty, first_uncleanable, reset = cleanable_offsets(log, checkpoint_offset, now_ms)
        clean_bytes = 0
        dirty_bytes = 0
        segments = list(log.segments)
        for index, segment in enumerate(segments[:-1]):
            next_base = segments[index + 1].base_offset
            if next_base <= first_dirty:
                clean_bytes += segment.size_bytes
            elif first_dirty < first_uncleanable and segment.base_offset < first_uncleanable:
                dirty_bytes += segment.size_bytes
        delay = max_compaction_delay_ms(log, first_dirty, now_ms) if dirty_bytes else 0
    horizon = pending_delete_horizon(log, first_dirty)
    reason: str | None = None
    if delay > 0:
        reason = DUE_MAX_COMPACTION_LAG
    elif horizon is not None and horizon <= now_ms:
        reason = DUE_DELETE_HORIZON
    elif dirty_bytes > 0 and force:
        reason = DUE_FORCED
    elif (
        dirty_bytes > 0
        and dirty_bytes / (clean_bytes + dirty_bytes) > log.config.min_cleanable_dirty_ratio
    ):
        reason = DUE_DIRTY_RATIO
    return LogToClean(
        log=log,
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=first_uncleanable,
        clean_bytes=clean_bytes,
        dirty_bytes=dirty_bytes,
        checkpoint_reset=reset,
        max_compaction_delay_ms=delay,
        pending_delete_horizon_ms=horizon,
        due_reason=reason,
    )


# ---------------------------------------------------------------- many logs


@attrs.frozen
class _Failure:
    """The last failure of a log's passes: why, how many in a row, when to retry."""

    reason: str
    failures: int
    retry_at_ms: int


class CleanerManager:
    """Chooses the next log to clean among many, and tracks passes in progress and failures.

    Logs are identified by their directory.  A log is skipped while a pass over
    it is in progress and while it is paused.  A log whose pass (or due
    measurement) failed is marked uncleanable and retried after a backoff that
    doubles with each consecutive failure, from ``retry_backoff_ms`` up to
    ``retry_backoff_max_ms`` (Kafka's broker keeps such a log uncleanable until
    it restarts; we have no restart to wait for: a full disk that was freed, a
    killed worker process, are transient).  It stays counted as uncleanable
    until a pass over it succeeds (:meth:`done` with ``cleaned=True``) or
    :meth:`reset_uncleanable` is called.

    Invariants: a retry is never due before ``retry_backoff_ms`` has passed since
    the last failure; only the worker that grabbed a log releases it.

    Thread-safety: thread-safe.  ``_lock`` guards ``_in_progress``,
    ``_uncleanable`` and ``_paused``; it is never held while a log is read or cleaned
    except for the cheap due measurement in :meth:`grab_filthiest_log`.
    """

    def __init__(
        self, *, retry_backoff_ms: int = 60_000, retry_backoff_max_ms: int = 3_600_000
    ) -> None:
        self._lock = threading.Lock()
        self._in_progress: set[Path] = set()
        self._paused: set[Path] = set()
        self._uncleanable: dict[Path, _Failure] = {}
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = retry_backoff_max_ms
        # Kafka's PreCleanStats of the last grab_filthiest_log, read by metrics (any thread).
        self.dirtiest_log_cleanable_ratio = 0.0
        """Highest dirty ratio among the logs measured by the last :meth:`grab_filthiest_log`."""
        self.max_compaction_delay_ms = 0
        """Largest ``max_compaction_delay_ms`` among those logs (0: none overdue)."""
        self.time_of_last_run_ms: int | None = None
        """``now_ms`` of the last :meth:`grab_filthiest_log` (``None``: never ran)."""

    @staticmethod
    def _key(log: CleanableLog) -> Path:
        return Path(log.dir)

    def grab_filthiest_log(
        self, logs: Iterable[CleanableLog], now_ms: int, *, urgent: Collection[Path] = ()
    ) -> LogToClean | None:
        """Pick the due log to clean next and mark it in progress (``None``: nothing is due).

        Logs overdue by ``max_compaction_lag_ms`` or holding expired tombstones
        qualify whatever their ratio, and so do the logs whose directory is in
        ``urgent`` (a committer waits for them: backpressure) if they have any
        dirty bytes; among all that qualify the filthiest (highest dirty ratio)
        wins, ties going to the longest overdue.
        A log whose measurement fails is marked uncleanable and skipped.
        """
        with self._lock:
            self.time_of_last_run_ms = now_ms
            candidates: list[LogToClean] = []
            dirtiest, max_delay = 0.0, 0
            for log in logs:
                key = self._key(log)
                if not log.config.compact or key in self._in_progress or key in self._paused:
                    continue
                failure = self._uncleanable.get(key)
                if failure is not None and now_ms < failure.retry_at_ms:
                    continue
                try:
                    measured = log_to_clean(log, now_ms=now_ms, force=key in urgent)
                except Exception as exc:  # noqa: BLE001 - one broken log must not stop the others
                    self._record_failure(key, f"{type(exc).__name__}: {exc}", now_ms)
                    _log.error("%s marked uncleanable while measuring: %s", _prefix(log), exc)
                    continue
                if measured.total_bytes > 0:
                    dirtiest = max(dirtiest, measured.dirty_ratio)
                    max_delay = max(max_delay, measured.max_compaction_delay_ms)
                if measured.due_reason is not None:
                    candidates.append(measured)
            self.dirtiest_log_cleanable_ratio, self.max_compaction_delay_ms = dirtiest, max_delay
            if not candidates:
                return None
            chosen = max(candidates, key=lambda c: (c.dirty_ratio, c.max_compaction_delay_ms))
            self._in_progress.add(self._key(chosen.log))
            return chosen

    def begin(self, log: CleanableLog) -> bool:
        """Mark ``log`` in progress (for a pass started outside :meth:`grab_filthiest_log`)."""
        key = self._key(log)
        with self._lock:
            if key in self._in_progress or key in self._uncleanable:
                return False
            self._in_progress.add(key)
            return True

    def done(self, log: CleanableLog, *, cleaned: bool = False) -> None:
        """Release ``log`` after its pass ended; ``cleaned``: the pass succeeded (clears a failure)."""
        with self._lock:
            key = self._key(log)
            self._in_progress.discard(key)
            if cleaned and self._uncleanable.pop(key, None) is not None:
                _log.info("%sa retried pass succeeded; the log is cleanable again", _prefix(log))

    def in_progress(self, log: CleanableLog) -> bool:
        """Whether a pass over ``log`` is running."""
        with self._lock:
            return self._key(log) in self._in_progress

    def pause(self, log: CleanableLog) -> None:
        """Stop choosing ``log`` (a running pass is not interrupted: abort it separately)."""
        with self._lock:
            self._paused.add(self._key(log))

    def resume(self, log: CleanableLog) -> None:
        """Undo :meth:`pause`."""
        with self._lock:
            self._paused.discard(self._key(log))

    def is_paused_or_failing(self, log: CleanableLog) -> bool:
        """Whether ``log`` is paused or its last pass failed (nothing to wait for)."""
        with self._lock:
            key = self._key(log)
            return key in self._paused or key in self._uncleanable

    def mark_uncleanable(self, log: CleanableLog, reason: str, *, now_ms: int = 0) -> int:
        """Record a failed pass over ``log`` (logged by the caller) and release it; the others go on.

        Returns the time (ms, the clock of ``now_ms``) from which a retry is due.
        """
        with self._lock:
            key = self._key(log)
            self._in_progress.discard(key)
            return self._record_failure(key, reason, now_ms)

    def _record_failure(self, key: Path, reason: str, now_ms: int) -> int:
        """Caller holds ``_lock``.  Count one more consecutive failure and set its retry time."""
        previous = self._uncleanable.get(key)
        failures = 1 if previous is None else previous.failures + 1
        backoff = min(self._retry_backoff_max_ms, self._retry_backoff_ms << min(failures - 1, 40))
        failure = _Failure(reason=reason, failures=failures, retry_at_ms=now_ms + backoff)
        self._uncleanable[key] = failure
        return failure.retry_at_ms

    def retry_at_ms(self, log: CleanableLog) -> int | None:
        """When a pass over an uncleanable ``log`` is next tried (``None``: it is not uncleanable)."""
        with self._lock:
            failure = self._uncleanable.get(self._key(log))
            return None if failure is None else failure.retry_at_ms

    def reset_uncleanable(self, log: CleanableLog) -> None:
        """Allow ``log`` to be cleaned again (after an operator fixed it)."""
        with self._lock:
            self._uncleanable.pop(self._key(log), None)

    def uncleanable(self) -> dict[Path, str]:
        """Directories marked uncleanable, with the reason of the last failure."""
        with self._lock:
            return {key: failure.reason for key, failure in self._uncleanable.items()}
