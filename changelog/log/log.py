"""``Log``: one partition directory of segments, as Kafka's ``LocalLog``/``UnifiedLog`` keep it.

A log is an ordered list of segments; the last one is the *active segment*,
the only one appended to.  Offsets are assigned densely by :meth:`Log.append`
(one record batch per call) and never change; compaction may leave gaps.

Crash protocols (the loader pass that finishes or undoes each step is in
brackets; ``docs/recovery.md`` tells the whole story):

* append: A1 write the batch with one ``write``, into space preallocated by an
  earlier append, or then a second ``write`` of ``preallocate_extent_bytes`` of zeros
  after it (``LogConfig.preallocate``) [L8 cuts a torn tail and the zeros after the
  last batch]; A2 fdatasync the ``.log`` when the flush policy says so, by group commit
  (:mod:`changelog.log.group_commit`): after ``lock`` is released, one fsync by
  a leader covers every batch appended before it started.  A transactional
  batch (:meth:`Log.append_transactional`) is an append like any other; it
  opens its producer's transaction in the producer state [L10 rebuilds it].
* marker (:meth:`Log.append_marker`): M1 write the control batch with one
  ``write`` [L8 cuts a torn tail]; M2 an ABORT of a transaction with data
  appends its entry to the active segment's ``.txnindex`` (not fsynced) [L10
  rebuilds every ``.txnindex`` from the batches]; then A2.
* roll (by size, age, a full index, or ``roll_dirty_ratio``): R1 cut the old active
  segment's preallocated zeros, flush it (``.log`` and indexes);
  R2 create the new segment's files [L7 loads them, empty]; R3 fsync the
  directory; R4 write the recovery-point checkpoint.
* truncate: T0 write the recovery-point checkpoint lowered to the base offset
  of the segment that will end the log (so the checkpoint is never above the
  log end offset, whatever step a crash cuts); T1 delete the later segments,
  newest first (rename to ``.deleted``) [L2, L6], so a crash leaves a prefix of
  the log, never a hole; T2 truncate the active segment and fsync it [L8]; T3
  write the recovery-point checkpoint.
* retention: D1 rename each deleted segment's files to ``.deleted``, oldest
  first [L2, L6]; D2 remove them after ``file_delete_delay_ms`` [L2]; D3 the log
  start offset moves to the first remaining segment [L9].
* replace (Kafka's ``replaceSegments``): S0-S6 [L2-L5], in :mod:`changelog.log.replace`.
* close: C1 cut the active segment's preallocated zeros, flush it; C2 write the recovery-point checkpoint;
  C3 write the log-start-offset checkpoint; C4 remove pending ``.deleted``
  files [L2]; C5 write the clean-shutdown marker [L11 deletes it; its absence
  makes L8 run].

A failed log stays failed: an I/O error (``LogStorageError``: ENOSPC, EIO, a
failed fsync or rename) in any step of append, roll, flush, truncation,
retention, the cleaner's swap (from S2 on: S0-S1b change nothing the log reads,
so a failure there only abandons the pass) or close abandons the log, as Kafka
takes a log directory offline: descriptors and the directory lock are released, nothing
more is written, and every later call raises
:class:`~changelog.errors.LogFailedError` until the log is reopened (which
runs recovery).  So nothing is ever acknowledged on top of a partial write.

Thread-safety: ``Log`` is thread-safe.  ``Log.lock`` (an ``RLock``) guards the
segment list, the active segment, the log start/end offsets, the recovery
point and the flush bookkeeping.  Appends, rolls, truncation, retention and
the cleaner's swap take it; readers take it only to snapshot the segment list
(pinning each segment's descriptor) and then read without it.  The fsync of
an append (A2, :meth:`Log.sync_to`) runs *without* it, through a pinned
descriptor, so other threads append while it runs and share the next one.  The cleaner
reads segments through readers and holds the lock only in
:meth:`Log.replace_segments`.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

from changelog.config import LogConfig
from changelog.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    LogClosedError,
    LogFailedError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from changelog.fs import files
from changelog.fs.checkpoint import LEADER_EPOCH_CHECKPOINT, read_leader_epochs
from changelog.fs.lock import DirectoryLock
from changelog.log.append_info import AppendInfo
from changelog.log.group_commit import GroupCommit
from changelog.log.isolation import (
    READ_COMMITTED,
    IsolationLevel,
    check_isolation,
    committed_batches,
)
from changelog.log.loader import LoadedLog
from changelog.log.log_dir import close_partition_dir, open_partition_dir, parse_topic_partition
from changelog.log.log_reader import (
    LocatedBatch,
    located_batches,
    open_snapshot,
    records_in_range,
)
from changelog.log.log_segments import LogSegments
from changelog.log.producer_state import rebuild_producer_state
from changelog.log.recovery_point import RecoveryPoint
from changelog.log.replace import prepare_replace, replace_segments
from changelog.record.batch import (
    PARTITION_LEADER_EPOCH,
    BatchHeader,
    Headers,
    Pairs,
    Record,
    decode_header,
    encode_append_batch,
)
from changelog.record.compression import compression_for
from changelog.record.control import ControlRecordType, encode_marker_batch, read_marker
from changelog.segment.segment import LogSegment
from changelog.segment.txn_index import AbortedTxn, collect_aborted

__all__ = [
    "AppendInfo",
    "Clock",
    "LocatedBatch",
    "Log",
    "parse_topic_partition",
    "wall_clock_ms",
]

Clock = Callable[[], int]
"""A callable returning the current time in milliseconds."""

_BASE_OFFSET: Final = struct.Struct(">q")  # the first 8 bytes of a batch, outside its CRC
_LEADER_EPOCH: Final = struct.Struct(">i")  # bytes 12-15 of a batch, outside its CRC
_LEADER_EPOCH_POSITION: Final = 12


def _last_leader_epoch(directory: Path, segments: Sequence[LogSegment]) -> int:
    """The partition leader epoch appends continue: the last batch's, or Kafka's checkpoint's.

    The larger of the last batch's epoch and the last entry of a
    ``leader-epoch-checkpoint`` a broker left (so the checkpoint stays true);
    0, a new partition's first epoch, when there is neither.
    """
    epoch = PARTITION_LEADER_EPOCH
    for segment in reversed(segments):
        header = segment.last_batch_header()
        if header is not None:
            epoch = max(epoch, header.partition_leader_epoch)
            break
    checkpointed = read_leader_epochs(directory / LEADER_EPOCH_CHECKPOINT)
    if checkpointed:
        epoch = max(epoch, checkpointed[-1][0])
    return epoch


logger = logging.getLogger(__name__)


def _stamp(clock: Clock, timestamp_ms: int | None, timestamps: Sequence[int] | None) -> int:
    """The batch's max timestamp: ``timestamp_ms``, the clock, or the largest of ``timestamps``."""
    if timestamps is None:
        return clock() if timestamp_ms is None else timestamp_ms
    if timestamp_ms is not None:
        raise InvalidRecordError("give timestamp_ms or timestamps, not both")
    try:
        return max(timestamps)  # each is checked by the encoder
    except (TypeError, ValueError) as exc:
        raise InvalidRecordError(f"timestamps must be integers, one per record: {exc}") from exc


def wall_clock_ms() -> int:
    """The default clock: wall-clock time in milliseconds."""
    return time.time_ns() // 1_000_000


class Log:
    """One partition log in one directory: append, read, roll, flush, truncate, retention, replace.

    Open with :meth:`Log.open` (which locks the directory and runs recovery)
    and close with :meth:`close` (or use it as a context manager).

    Invariants: ``segments`` is non-empty and sorted by base offset with
    distinct base offsets; the last one is the active segment;
    ``log_start_offset <= log_end_offset``; ``recovery_point <= log_end_offset``;
    the log end offset only moves back through :meth:`truncate_to`; the active
    segment is never deleted by retention nor replaced by the cleaner.

    Thread-safety: thread-safe; see the module docstring for what ``lock`` guards.
    """

    def __init__(
        self,
        directory: Path,
        *,
        config: LogConfig,
        clock: Clock,
        topic: str,
        partition: int,
        dir_lock: DirectoryLock,
        loaded: LoadedLog,
        append_observer: Callable[[AppendInfo], None] | None = None,
        flush_observer: Callable[[float], None] | None = None,
    ) -> None:
        """Assemble an opened log; use :meth:`Log.open`."""
        self._dir = directory
        self._config = config
        self._clock = clock
        self._topic = topic
        self._partition = partition
        self._dir_lock = dir_lock
        self.lock = threading.RLock()
        """Guards the segment list, the active segment, the offsets and flush bookkeeping."""
        self._segments = LogSegments(directory, loaded.segments, config=config, clock=clock)
        self._producers = loaded.producer_state
        self._log_start_offset = loaded.log_start_offset
        self._log_end_offset = loaded.log_end_offset
        self._leader_epoch = _last_leader_epoch(directory, loaded.segments)
        self._compression = compression_for(config)
        self._closed = False
        self._failure: LogStorageError | None = None
        self.cleaning_barrier_offset: int | None = None
        """Set by the store: the cleaner must not clean at or above this offset (``None``: no limit)."""
        self._append_observer = append_observer
        self._flush_observer = flush_observer
        self._prefix = f"[Log partition={topic}-{partition}, dir={directory}] "
        self._rp = RecoveryPoint(
            directory,
            topic,
            partition,
            loaded.recovery_point,
            config=config,
            clock=clock,
            prefix=self._prefix,
        )
        self._truncations = 0  # bumped by truncate_to: a flush that raced one claims nothing
        self._roll_guard: tuple[LogSegment, int, int, int, int] | None = None
        """The active segment's :meth:`LogSegment.roll_headroom` (segment, size, size, offset and
        timestamp bounds), and in ``_roll_appends`` how many appends it still covers: an append
        inside it needs no :meth:`LogSegment.should_roll` (``_append_locked``)."""
        self._roll_appends = 0
        self._require_keys = config.compact
        """``config.compact`` (a property of the config) read once: every append asks."""
        self._group = GroupCommit(
            durable_offset=self._durable_offset,
            flush=self._flush_for_group,
            check=self._check_sync,
            label=self._prefix,
        )

    # ----------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        directory: Path | str,
        config: LogConfig | None = None,
        clock: Clock | None = None,
        *,
        append_observer: Callable[[AppendInfo], None] | None = None,
        flush_observer: Callable[[float], None] | None = None,
    ) -> Log:
        """Open (creating if needed) the partition directory ``<topic>-<partition>``.

        Locks it (a second owner gets :class:`~changelog.errors.LogLockedError`),
        runs the loader's recovery passes and returns the ready log.
        ``append_observer`` (a store's metrics) is called with every append's
        :class:`~changelog.AppendInfo`, on the appending thread;
        ``flush_observer`` with the seconds each :meth:`sync_to` waited for
        durability (a transaction's T2 fsync: such appends are not flushed).
        """
        directory = Path(directory)
        config = config if config is not None else LogConfig()
        clock = clock if clock is not None else wall_clock_ms
        topic, partition, dir_lock, loaded = open_partition_dir(
            directory, config=config, now_ms=clock()
        )
        return cls(
            directory,
            config=config,
            clock=clock,
            topic=topic,
            partition=partition,
            dir_lock=dir_lock,
            loaded=loaded,
            append_observer=append_observer,
            flush_observer=flush_observer,
        )

    def __enter__(self) -> Log:
        """Use the log as a context manager; it is closed cleanly on exit."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the log (cleanly, unless a simulated crash is unwinding)."""
        if exc_type is not None and issubclass(exc_type, files.SimulatedCrash):
            self.abandon()
        else:
            self.close()

    # ----------------------------------------------------------------- properties

    @property
    def dir(self) -> Path:
        """The partition directory."""
        return self._dir

    @property
    def config(self) -> LogConfig:
        """The log's configuration."""
        return self._config

    @property
    def clock(self) -> Clock:
        """The clock (milliseconds) used for timestamps, rolling and retention."""
        return self._clock

    @property
    def append_observer(self) -> Callable[[AppendInfo], None] | None:
        """What :meth:`open` was given to call with every append's result (``None``: nothing)."""
        return self._append_observer

    @property
    def topic(self) -> str:
        """Topic name (the directory name before the last ``-``)."""
        return self._topic

    @property
    def partition(self) -> int:
        """Partition number (the directory name after the last ``-``)."""
        return self._partition

    @property
    def segments(self) -> list[LogSegment]:
        """A snapshot of the segments in offset order (the active one last)."""
        with self.lock:
            return list(self._segments.items)

    @property
    def active_segment(self) -> LogSegment:
        """The segment appends go to."""
        with self.lock:
            return self._segments.active

    @property
    def log_start_offset(self) -> int:
        """The first offset that may be read."""
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Offsets below this have been fsynced."""
        return self._rp.offset

    @property
    def closed(self) -> bool:
        """Whether the log was closed (or abandoned)."""
        return self._closed

    @property
    def size_bytes(self) -> int:
        """Total size of the segments' ``.log`` files."""
        with self.lock:
            return sum(segment.size_bytes for segment in self._segments)

    @property
    def failed(self) -> LogStorageError | None:
        """The I/O error that failed the log (it is then abandoned), or ``None``."""
        return self._failure

    def check_open(self) -> None:
        """Raise :class:`~changelog.errors.LogFailedError` or :class:`~changelog.errors.LogClosedError`
        unless the log is open: what work on the log's directory checks before it starts
        (the cleaner's pass, so that nothing is written beside a closed log)."""
        self._check_open()

    def _check_open(self) -> None:
        if self._failure is not None:
            raise LogFailedError(
                f"{self._prefix}the log failed ({self._failure}); reopen it to recover",
                self._failure,
            ) from self._failure
        if self._closed:
            raise LogClosedError(f"{self._prefix}the log is closed")

    def _check_in_range(self, offset: int) -> None:
        self._check_open()
        if not self._log_start_offset <= offset <= self._log_end_offset:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, self._log_end_offset)

    @contextlib.contextmanager
    def _fatal_on_storage_error(self) -> Iterator[None]:
        """Any I/O error fails the log (module docstring): a failed write may have left part
        of a batch, a failed fsync leaves the page cache in an unknown state (what was
        written may never reach the disk, and a retry may report success), a failed rename
        leaves a protocol half done.  Abandon the log; reopening runs recovery."""
        try:
            yield
        except LogStorageError as exc:
            self._fail_storage(exc)
            raise

    def _fail_storage(self, exc: LogStorageError) -> None:
        """What :meth:`_fatal_on_storage_error` does with the error (the caller re-raises it)."""
        logger.error("%s%s: the log failed and is abandoned", self._prefix, exc)
        self._failure = exc
        self.abandon()

    def __repr__(self) -> str:
        """Directory and offsets, for logs."""
        return (
            f"Log({str(self._dir)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._log_end_offset}, segments={len(self._segments)})"
        )

    # ----------------------------------------------------------------- appending, rolling, flushing

    def append(
        self,
        records: Pairs,
        timestamp_ms: int | None = None,
        *,
        headers: Sequence[Headers] | None = None,
        defer_flush: bool = False,
        timestamps: Sequence[int] | None = None,
    ) -> AppendInfo:
        """Append ``records`` (``(key, value)`` pairs, or a mapping of key to value; ``None`` value = tombstone) as one batch.

        Every record gets ``timestamp_ms`` (default: the clock) as its
        CreateTime, or with ``timestamps`` (one per record, in record order;
        ``timestamp_ms`` must then be ``None``) its own; the batch's max
        timestamp then stamps the segment and time index.  ``headers``, if given, holds one tuple of Kafka record
        headers (``(str, bytes | None)`` pairs) per record; they come back in
        :attr:`Record.headers <changelog.record.body.Record.headers>`.  The
        batch is compressed with ``config.compression_type`` and stamped with
        the log's partition leader epoch (that of its last batch, so appends
        to a log a broker wrote continue its epoch; 0 for a new log).  Bad
        records raise :class:`~changelog.errors.InvalidRecordError`
        and a batch over ``max_message_bytes`` raises
        :class:`~changelog.errors.RecordTooLargeError`; in both cases nothing is
        written.  Rolls first if the active segment is due.  With the default
        flush policy the batch is fsynced before this returns (by group
        commit: the fsync may be another thread's, :meth:`sync_to`).  With
        ``defer_flush`` it returns without waiting; ``AppendInfo.flush_due``
        then says whether the policy wants it fsynced, which the caller does
        with :meth:`sync_to` before acknowledging (a transaction's data round
        syncs its logs together, :func:`~changelog.log.group_commit.sync_logs`),
        or else the next append (or flush) of this log does.
        """
        if timestamp_ms is None and timestamps is None:  # every store commit: the clock
            stamp = self._clock()
        else:
            stamp = _stamp(self._clock, timestamp_ms, timestamps)
        batch = self._encode(records, stamp, headers, timestamps=timestamps)
        count = len(records)
        with self.lock:
            if self._failure is not None or self._closed:
                self._check_open()  # raises, naming why
            placed = self._append_locked(batch, count, stamp)
        return self._finish_append(placed, count, stamp, len(batch), defer_flush=defer_flush)

    def append_transactional(
        self,
        records: Pairs,
        *,
        producer_id: int,
        producer_epoch: int,
        timestamp_ms: int | None = None,
        headers: Sequence[Headers] | None = None,
        defer_flush: bool = False,
        timestamps: Sequence[int] | None = None,
    ) -> AppendInfo:
        """Append ``records`` as one transactional batch of ``producer_id`` (attribute bit 4).

        The first such batch of a producer opens its transaction at the
        batch's base offset; the transaction stays open (its data invisible to
        ``read_committed`` readers, the last stable offset held at its first
        offset) until :meth:`append_marker`.  The base sequence is the
        producer's next one in this partition, as a broker would validate it.
        An epoch below the producer's latest raises
        :class:`~changelog.errors.InvalidProducerEpochError`; otherwise as :meth:`append`.
        """
        self._check_open()
        stamp = _stamp(self._clock, timestamp_ms, timestamps)
        with self.lock:
            self._check_open()
            self._check_epoch(producer_id, producer_epoch)
            sequence = self._producers.next_sequence(producer_id, producer_epoch)
            batch = self._encode(
                records,
                stamp,
                headers,
                (producer_id, producer_epoch, sequence),
                timestamps=timestamps,
            )
            placed = self._append_locked(batch, len(records), stamp, producer_state=True)
        return self._finish_append(placed, len(records), stamp, len(batch), defer_flush=defer_flush)

    def append_marker(
        self,
        marker_type: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int = 0,
        timestamp_ms: int | None = None,
        defer_flush: bool = False,
    ) -> AppendInfo:
        """Append a COMMIT or ABORT marker ending ``producer_id``'s transaction (steps M1-M2).

        A marker for a producer with no open transaction is written all the
        same (an empty transaction, as Kafka's coordinator may write one).  An
        epoch below the producer's latest raises
        :class:`~changelog.errors.InvalidProducerEpochError`.  Durable under the
        flush policy like any append (``defer_flush`` as in :meth:`append`: a
        coordinator whose decision is durable elsewhere can redo a lost marker).
        """
        self._check_open()
        stamp = self._clock() if timestamp_ms is None else timestamp_ms
        with self.lock:
            self._check_open()
            self._check_epoch(producer_id, producer_epoch)
            batch = bytearray(
                encode_marker_batch(
                    marker_type,
                    base_offset=0,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    coordinator_epoch=coordinator_epoch,
                    timestamp_ms=stamp,
                )
            )
            placed = self._append_locked(batch, 1, stamp, producer_state=True)
        return self._finish_append(placed, 1, stamp, len(batch), defer_flush=defer_flush)

    def producer_epoch(self, producer_id: int) -> int | None:
        """The latest epoch of ``producer_id`` in this partition (``None``: never seen)."""
        with self.lock:
            entry = self._producers.entry(producer_id)
            return None if entry is None else entry.epoch

    def _finish_append(
        self,
        placed: tuple[int, int, bool],
        count: int,
        stamp: int,
        size: int,
        *,
        defer_flush: bool,
    ) -> AppendInfo:
        """A2 outside ``lock``: wait for the group commit when the policy wants it.

        ``placed`` is :meth:`_append_locked`'s ``(first offset, segment base offset,
        flush due)``; the :class:`AppendInfo` is built once, after the fsync.
        """
        first, segment_base, flush_due = placed
        last = first + count - 1
        if flush_due and not defer_flush:
            started = time.perf_counter()
            self._group.sync_to(last + 1)
            # positional, in field order: first, last, timestamp, size, segment, flushed, ...
            info = AppendInfo(
                first, last, stamp, size, segment_base, True, time.perf_counter() - started, True
            )
        else:
            info = AppendInfo(first, last, stamp, size, segment_base, False, 0.0, flush_due)
        observer = self._append_observer
        if observer is not None:
            observer(info)
        return info

    def _encode(
        self,
        records: Pairs,
        stamp: int,
        headers: Sequence[Headers] | None,
        producer: tuple[int, int, int] | None = None,
        *,
        timestamps: Sequence[int] | None = None,
    ) -> bytearray:
        """One append's batch at base offset 0 (offset and leader epoch patched by the caller:
        neither is under the CRC).  A record without a key in a compacted log is refused by
        the encoder (``require_keys``); a batch over ``max_message_bytes`` here."""
        batch = encode_append_batch(
            records,
            timestamp_ms=stamp,
            headers=headers,
            compression=self._compression,
            require_keys=self._require_keys,
            producer=producer,
            timestamps=timestamps,
        )
        if len(batch) > self._config.max_message_bytes:
            raise RecordTooLargeError(len(batch), self._config.max_message_bytes)
        return batch

    def _check_epoch(self, producer_id: int, producer_epoch: int) -> None:
        entry = self._producers.entry(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(producer_id, producer_epoch, entry.epoch)

    def _append_locked(
        self, batch: bytearray, count: int, stamp: int, *, producer_state: bool = False
    ) -> tuple[int, int, bool]:
        """A1-A2 (and M1-M2 for a marker) under ``lock``; ``batch`` is encoded at base offset 0.

        Returns ``(first offset, segment base offset, whether the flush policy wants an
        fsync)``; A2 follows in :meth:`_finish_append`, unlocked.
        """
        size = len(batch)
        first = self._log_end_offset
        last = first + count - 1
        _BASE_OFFSET.pack_into(batch, 0, first)
        _LEADER_EPOCH.pack_into(batch, _LEADER_EPOCH_POSITION, self._leader_epoch)
        segment = self._segments.active
        try:  # _fatal_on_storage_error, spelled out: this is the hot path
            guard = self._roll_guard
            if (
                guard is not None
                and self._roll_appends > 0
                and guard[0] is segment
                and guard[1] <= segment.size_bytes <= guard[2] - size
                and last <= guard[3]
                and stamp <= guard[4]
                and (
                    segment.size_bytes + size <= self._config.roll_dirty_min_bytes
                    or not self._dirty_roll_due(segment, size)
                )
            ):
                self._roll_appends -= 1  # inside the headroom: should_roll would say False
            else:
                if segment.should_roll(
                    messages_size=size,
                    max_timestamp_ms=stamp,
                    max_offset=last,
                    now_ms=self._clock(),
                ) or self._dirty_roll_due(segment, size):
                    segment = self._roll_locked()
                headroom = segment.roll_headroom()
                self._roll_guard = None if headroom is None else (segment, *headroom[:4])
                self._roll_appends = 0 if headroom is None else headroom[4] - 1
            segment.append(
                batch,
                largest_offset=last,
                largest_timestamp_ms=stamp,
                preallocate=self._config.preallocate,
            )  # A1 / M1
            self._log_end_offset = last + 1
            if producer_state:
                self._update_producer_state(segment, bytes(batch))
        except LogStorageError as exc:
            self._fail_storage(exc)
            raise
        return first, segment.base_offset, self._rp.appended(count)

    def _dirty_roll_due(self, segment: LogSegment, size: int) -> bool:
        """``roll_dirty_ratio``: the active segment would pass ``max(roll_dirty_min_bytes,
        roll_dirty_ratio * the other segments' bytes)`` (it is all dirty: the cleaner
        never reads it, so a restore replays it whole).  Never for an empty segment."""
        ratio = self._config.roll_dirty_ratio
        grown = segment.size_bytes + size
        if ratio <= 0 or segment.size_bytes == 0 or grown <= self._config.roll_dirty_min_bytes:
            return False
        return grown > ratio * self._segments.inactive_bytes()

    def _update_producer_state(self, segment: LogSegment, batch: bytes) -> None:
        header = decode_header(batch, 0, path=segment.log_path, end=len(batch), validate=False)
        if not header.is_control:
            self._producers.on_data_batch(header)
            return
        marker = read_marker(header, batch, path=segment.log_path, position=-1)
        entry = self._producers.on_marker(header, marker)
        if entry is not None:
            segment.txn_index.append(entry)  # M2 (inside the caller's _fatal_on_storage_error)

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self.lock:
            self._check_open()
            with self._fatal_on_storage_error():
                return self._roll_locked()

    def _roll_locked(self) -> LogSegment:
        """Steps R1-R4; the caller holds ``Log.lock`` inside ``_fatal_on_storage_error``."""
        active = self._segments.active
        if active.size_bytes == 0 and active.base_offset == self._log_end_offset:
            return active
        active.on_become_inactive()
        active.flush()  # R1
        active.release_descriptors()  # opened again while it is read
        segment = self._segments.roll(self._log_end_offset)  # R2, R3
        self._rp.rolled(segment.base_offset)  # R4
        logger.info("%srolled new segment at offset %s", self._prefix, segment.base_offset)
        self._segments.delete_expired()
        return segment

    def flush(self) -> None:
        """fsync the active segment (``.log`` and indexes); the recovery point becomes the end."""
        with self.lock:
            self._check_open()
            with self._fatal_on_storage_error():
                self._segments.active.flush()
                self._rp.flushed(self._log_end_offset)

    def sync_to(self, offset: int) -> bool:
        """Return once every offset below ``offset`` is fsynced (A2 by group commit).

        Whatever the flush policy says: an explicit request.  Threads share
        the fsync (:class:`~changelog.log.group_commit.GroupCommit`): a caller
        already covered returns at once, one covered by a flush in progress
        waits for it, and otherwise it fsyncs the ``.log`` (without ``lock``)
        for itself and every batch appended so far.  Returns whether this
        call ran the fsync.  An offset above the log end offset raises
        :class:`~changelog.errors.OffsetOutOfRangeError`; a failed fsync
        fails the log (its leader gets the ``LogStorageError``, everybody
        else :class:`~changelog.errors.LogFailedError`) and acknowledges
        nobody.  Thread-safe.
        """
        observer = self._flush_observer
        if observer is None:
            return self._group.sync_to(offset)
        started = time.perf_counter()
        ran = self._group.sync_to(offset)
        observer(time.perf_counter() - started)
        return ran

    @property
    def group_commit(self) -> GroupCommit:
        """The log's group commit (its counters show how many fsyncs were shared)."""
        return self._group

    def _durable_offset(self) -> int:
        return self._rp.offset

    def _check_sync(self, offset: int) -> None:
        if self._failure is not None or self._closed:
            self._check_open()  # raises, naming why
        if offset > self._log_end_offset:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, self._log_end_offset)

    def _flush_for_group(self, force: bool) -> None:
        """The leader's fsync (A2): pin the active ``.log`` under ``lock``, fsync it without.

        Everything below the active segment's base offset was fsynced by its
        roll (R1); so one fsync of the active ``.log`` covers the log end
        offset read here.  A truncation meanwhile (``_truncations``) or a
        failure of the log (another step failed it) claims nothing.
        """
        with self.lock:
            if self._failure is not None or self._closed:
                self._check_open()  # raises, naming why
            end = self._log_end_offset
            if self._rp.offset >= end and not force:
                return
            segment = self._segments.active
            fd = segment.pin_log()
            truncations = self._truncations
            self._rp.flushing()
        try:  # _fatal_on_storage_error, spelled out: this is the hot path
            segment.flush_pinned(fd)  # A2
        except LogStorageError as exc:
            self._fail_storage(exc)
            raise
        with self.lock:
            if self._failure is not None or self._closed:
                self._check_open()  # raises, naming why
            if truncations == self._truncations:
                self._rp.synced_to(min(end, self._log_end_offset))

    # ----------------------------------------------------------------- reading

    @property
    def last_stable_offset(self) -> int:
        """The LSO: first offset of the earliest open transaction, else the log end offset.

        A ``read_committed`` reader reads below it only (Kafka's last stable offset).
        """
        with self.lock:
            return self._producers.last_stable_offset(self._log_end_offset)

    def open_transactions(self) -> dict[int, int]:
        """``{producer id: first offset}`` of the transactions with no marker yet, earliest first."""
        with self.lock:
            return self._producers.open_transactions()

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_bound_offset)``, from the
        ``.txnindex`` of the segments from the one holding ``start_offset`` (Kafka's
        ``collectAbortedTransactions``)."""
        with self.lock:
            chosen = self._segments.items[self._segments.floor(start_offset) :]
            return collect_aborted(
                (segment.txn_index.entries for segment in chosen), start_offset, upper_bound_offset
            )

    def read_batches(
        self,
        start_offset: int = 0,
        *,
        max_offset: int | None = None,
        isolation: IsolationLevel = READ_COMMITTED,
    ) -> Iterator[tuple[BatchHeader, bytes]]:
        """Yield ``(header, batch bytes)`` of every batch holding offsets ``>= start_offset``.

        Stops before the first batch whose base offset is ``>= max_offset``.
        CRC-checked; the first batch may start before ``start_offset`` (batches
        are never split).  Reads a snapshot (:mod:`changelog.log.log_reader`),
        unaffected by later appends, swaps or deletions, whose descriptors stay
        open until the iterator is exhausted or closed.  The bulk path of
        restore and dump: no per-record work.

        ``read_committed`` (the default) yields data batches only, below the
        last stable offset, without aborted transactions
        (:mod:`changelog.log.isolation`); ``read_uncommitted`` yields every batch,
        control batches included.
        """
        located = self._located_batches(start_offset, max_offset, check_isolation(isolation))
        for _path, _position, header, data in located:
            yield header, data

    def read_located_batches(
        self,
        start_offset: int = 0,
        *,
        max_offset: int | None = None,
        isolation: IsolationLevel = READ_COMMITTED,
    ) -> Iterator[LocatedBatch]:
        """:meth:`read_batches` with each batch's ``.log`` file and byte position in it:
        ``(path, position, header, batch bytes)``.  For readers that decode the records
        (restore): a batch whose records do not decode is then reported at its file and
        position, as a CRC failure is."""
        yield from self._located_batches(start_offset, max_offset, check_isolation(isolation))

    def _located_batches(
        self, start_offset: int, max_offset: int | None, isolation: IsolationLevel
    ) -> Iterator[LocatedBatch]:
        """:meth:`read_batches` with each batch's file and position (for error messages)."""
        with self.lock:
            self._check_in_range(start_offset)
            aborted: list[AbortedTxn] = []
            if isolation == READ_COMMITTED:
                lso = self._producers.last_stable_offset(self._log_end_offset)
                max_offset = lso if max_offset is None else min(max_offset, lso)
                if start_offset < max_offset:
                    aborted = self.aborted_transactions(start_offset, max_offset)
            readers, start_position = open_snapshot(self._segments, start_offset)
        located = located_batches(readers, start_position, start_offset, max_offset)
        if isolation == READ_COMMITTED:
            yield from committed_batches(located, aborted)
        else:
            yield from located

    def read(
        self,
        start_offset: int = 0,
        *,
        max_offset: int | None = None,
        isolation: IsolationLevel = READ_COMMITTED,
    ) -> Iterator[Record]:
        """Yield the records with offsets in ``[start_offset, max_offset)`` in offset order.

        From inside a gap left by compaction it yields the next record.  Raises
        :class:`~changelog.errors.OffsetOutOfRangeError` outside
        ``[log_start_offset, log_end_offset]`` and
        :class:`~changelog.errors.CorruptRecordError` (path and position) for
        a batch that fails its CRC or framing.  Control batches are skipped.
        ``read_committed`` (the default) reads below the last stable offset
        and skips aborted transactions; ``read_uncommitted`` reads every data
        record (Kafka's consumer default; :mod:`changelog.log.isolation`).
        """
        located = self._located_batches(start_offset, max_offset, check_isolation(isolation))
        yield from records_in_range(located, start_offset, max_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Offset of the first record with a timestamp ``>= timestamp_ms``, or ``None``.

        Kafka's ``fetchOffsetByTimestamp`` (ListOffsets): the first segment whose
        largest timestamp reaches the target, then that segment's time index.
        """
        with self.lock:
            self._check_open()
            found = self._segments.offset_for_timestamp(timestamp_ms)
            return None if found is None else max(found, self._log_start_offset)

    # ----------------------------------------------------------------- truncation, retention, cleaning

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset ``>= offset``; returns the new log end offset.

        Batches are never split: if ``offset`` falls inside one, the whole
        batch goes and the log ends at its base offset.  Raises
        :class:`~changelog.errors.OffsetOutOfRangeError` outside
        ``[log_start_offset, log_end_offset]``.
        """
        with self.lock:
            self._check_in_range(offset)
            if offset == self._log_end_offset:
                return offset
            with self._fatal_on_storage_error():
                floor = self._segments.bases[self._segments.floor(offset)]
                self._truncations += 1
                self._rp.truncating(floor)  # T0
                self._log_end_offset = self._segments.truncate_to(offset)  # T1, T2
                self._rp.truncated(self._log_end_offset)  # T3
                # Kafka's truncateAndReload: the producer state of what is left, read again.
                self._producers = rebuild_producer_state(self._segments.items, self._prefix)
            logger.info(
                "%struncated to offset %s (log end offset now %s)",
                self._prefix,
                offset,
                self._log_end_offset,
            )
            return self._log_end_offset

    def delete_old_segments(self) -> int:
        """Apply retention (see :mod:`changelog.log.retention`); returns the number of segments deleted."""
        with self.lock:
            self._check_open()
            with self._fatal_on_storage_error():
                count = self._segments.apply_retention(self._log_start_offset)  # D1 (oldest first)
                if count:
                    self._log_start_offset = max(self._log_start_offset, self._segments.bases[0])
                    logger.info(  # D3
                        "%sretention deleted %s segment(s); log start offset now %s",
                        self._prefix,
                        count,
                        self._log_start_offset,
                    )
                self._segments.delete_expired()  # D2
            return count

    def replace_segments(
        self,
        new_segments: Sequence[LogSegment],
        old_segments: Sequence[LogSegment],
        *,
        before_swap: Callable[[], None] | None = None,
    ) -> None:
        """Swap ``new_segments`` (files suffixed ``.cleaned``) in for ``old_segments``.

        Kafka's ``LocalLog.replaceSegments``, steps S0-S6 (:mod:`changelog.log.replace`):
        a crash at any step leaves either the old or the new segments after
        the loader has run.  ``before_swap`` is step S1b, called under
        ``Log.lock`` once the new segments are flushed and before any of them
        can replace an old one: the cleaner makes its swap checkpoint durable
        there.  Raises :class:`~changelog.errors.CleanerAbortedError` (having
        deleted ``new_segments``) if an old segment is no longer in the log or
        is the active segment; nothing else has changed then.  A failure in S1
        or S1b deletes ``new_segments`` and leaves the log usable; one from S2
        on fails the log.
        """
        with self.lock:
            self._check_open()
            prepare_replace(
                self._segments.items,
                new_segments,
                old_segments,
                before_swap=before_swap,
                log_prefix=self._prefix,
            )  # S0, S1, S1b
            with self._fatal_on_storage_error():
                replace_segments(
                    self._segments.items,
                    new_segments,
                    old_segments,
                    directory=self._dir,
                    install=self._segments.install,
                    schedule_delete=self._segments.schedule_delete,
                    log_prefix=self._prefix,
                )  # S2-S6

    # ----------------------------------------------------------------- closing

    def close(self) -> None:
        """Flush, write both checkpoints and the clean-shutdown marker, release the lock.

        Idempotent.  Steps C1-C5 (module docstring); the marker is written
        last, so a crash before it makes the next open run recovery.
        """
        with self.lock:
            if self._closed:
                return
            active = self._segments.active
            with self._fatal_on_storage_error():  # a failed close still releases the lock
                active.on_become_inactive()
                active.flush()  # C1
                self._rp.flushed(self._log_end_offset)
                self._rp.checkpoint("close.checkpoint")  # C2
                close_partition_dir(
                    self._dir,
                    topic=self._topic,
                    partition=self._partition,
                    log_start_offset=self._log_start_offset,
                    segments=self._segments,
                )  # C3-C5
            self._release()
            logger.info("%sclosed at log end offset %s", self._prefix, self._log_end_offset)

    def abandon(self) -> None:
        """Drop the log as a crash would: close descriptors and the lock, write nothing.

        A public hook with two callers: the log itself after a failed fsync,
        and :meth:`statestore.StateManager.crash` (``statestore.testing``'s
        in-process crash).  Idempotent; thread-safe (takes ``Log.lock``).

        For tests that simulate ``kill -9`` in-process: whatever was not
        fsynced stays in the page cache (the next open sees it, as after a
        process crash), no checkpoint or marker is written, so the next open
        recovers.  Pending ``.deleted`` files stay for the loader (pass L2).
        """
        with self.lock:
            if self._closed:
                return
            self._release(keep_pending_files=True)

    def _release(self, *, keep_pending_files: bool = False) -> None:
        self._closed = True
        try:
            self._segments.close(keep_pending_files=keep_pending_files)
        finally:
            self._dir_lock.release()
