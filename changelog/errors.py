"""Errors raised by :mod:`changelog`.

The tree::

    ChangelogError
    ├── InvalidConfigError          a LogConfig/CleanerConfig setting is nonsense (also ValueError)
    ├── InvalidRecordError          bad key/value types handed to append (also TypeError)
    ├── InvalidCheckpointEntryError a checkpoint entry that cannot be written (also ValueError)
    ├── IndexOperationError         an index asked to break its invariants: a caller bug (also ValueError)
    ├── SegmentOperationError       a segment asked to break its invariants: a caller bug (also ValueError)
    ├── SegmentChangedError         a segment file changed between the loader's plan and its recovery
    ├── RecordTooLargeError         a batch exceeds max_message_bytes
    ├── LogLockedError              another owner holds the partition directory lock
    ├── LogClosedError              the log (or its segment) was used after close()
    │   └── LogFailedError          the log failed an I/O step and refuses every call until reopened
    ├── OffsetOutOfRangeError       a read or truncation outside [log start, log end]
    ├── InvalidProducerEpochError   a transactional append with an epoch older than the producer's
    ├── CorruptDataError            something on disk is not what was written
    │   ├── CorruptRecordError      a record batch fails its CRC / length / framing checks
    │   ├── CorruptIndexError       an offset or time index fails its sanity check
    │   ├── LogInconsistencyError   the files disagree: a hole or overlap between segments,
    │   │                           a segment file missing
    │   └── CorruptCheckpointError  a checkpoint file cannot be parsed
    │       └── CheckpointMismatchError  a checkpoint that parses but disagrees with the segments
    ├── UnsupportedFormatError      valid Kafka data we do not read (old magic, compression)
    ├── LogStorageError             an OS-level failure (disk full, EIO) wrapping the OSError
    ├── RepairRefusedError          an operator remedy (changelog.repair) that would do harm or nothing
    ├── CleanerAbortedError         a cleaning pass was aborted (close, truncation)
    ├── CleanerServiceStateError    the cleaner service was used in a state that does not allow it
    └── CleanerWorkerError          a cleaner worker process failed or died

Every error carries structured fields (``path``, ``position``, ``expected``,
``actual``, ``offset`` where they apply) besides its message, so operators and tests can
act on them without parsing text.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ChangelogError",
    "CheckpointMismatchError",
    "CleanerAbortedError",
    "CleanerServiceStateError",
    "CleanerWorkerError",
    "CorruptCheckpointError",
    "CorruptDataError",
    "CorruptIndexError",
    "CorruptRecordError",
    "IndexOperationError",
    "InvalidCheckpointEntryError",
    "InvalidConfigError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "LogClosedError",
    "LogFailedError",
    "LogInconsistencyError",
    "LogLockedError",
    "LogStorageError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "RepairRefusedError",
    "SegmentChangedError",
    "SegmentOperationError",
    "UnsupportedFormatError",
]


class ChangelogError(Exception):
    """Base class of every error raised by :mod:`changelog`."""


class InvalidConfigError(ChangelogError, ValueError):
    """A configuration value is rejected at construction.

    ``setting`` names the offending setting (Kafka's name, with underscores) and
    ``value`` is what was given.
    """

    def __init__(self, setting: str, value: object, reason: str) -> None:
        super().__init__(f"invalid {setting}={value!r}: {reason}")
        self.setting = setting
        self.value = value
        self.reason = reason


class InvalidRecordError(ChangelogError, TypeError):
    """A record handed to ``append`` is malformed (key/value not bytes or None)."""


class RecordTooLargeError(ChangelogError):
    """A batch is larger than ``max_message_bytes``; nothing was written."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"record batch of {size} bytes exceeds max_message_bytes={limit}; nothing was written"
        )
        self.size = size
        self.limit = limit


class LogLockedError(ChangelogError):
    """The partition (or state) directory is locked by another owner."""

    def __init__(self, path: Path, holder: str | None = None) -> None:
        who = f" (held by {holder})" if holder else ""
        super().__init__(f"{path} is locked by another owner{who}")
        self.path = path
        self.holder = holder


class LogClosedError(ChangelogError):
    """A closed log, segment or index was used."""


class LogFailedError(LogClosedError):
    """The log failed an I/O step (write, fsync, rename, truncate) and was abandoned.

    Nothing is acknowledged on top of a partial write: every later call raises
    this error until the log is reopened, which runs recovery.  ``cause`` is
    the :class:`LogStorageError` that failed it (also the ``__cause__``).
    """

    def __init__(self, message: str, cause: LogStorageError) -> None:
        super().__init__(message)
        self.cause = cause


class OffsetOutOfRangeError(ChangelogError):
    """An offset outside ``[log_start_offset, log_end_offset]`` was requested."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class InvalidProducerEpochError(ChangelogError):
    """A transactional append or marker carries an epoch below the producer's latest in this
    partition (Kafka's ``INVALID_PRODUCER_EPOCH``): a newer instance of the producer exists.

    Nothing was written.  ``producer_id``, ``producer_epoch`` (given) and
    ``current_epoch`` (the partition's) say which.
    """

    def __init__(self, producer_id: int, producer_epoch: int, current_epoch: int) -> None:
        super().__init__(
            f"producer {producer_id} epoch {producer_epoch} is fenced: the partition has seen"
            f" epoch {current_epoch}; nothing was written"
        )
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.current_epoch = current_epoch


class CorruptDataError(ChangelogError):
    """Data on disk is not what was written.

    ``path`` is the file and ``position`` the byte position of the first bad
    byte (or of the start of the bad unit: batch, index entry, line);
    ``offset``, when known, the first offset the damage affects.
    """

    def __init__(
        self,
        path: Path | str,
        position: int | None,
        reason: str,
        *,
        expected: object = None,
        actual: object = None,
        offset: int | None = None,
    ) -> None:
        where = f"{path}" if position is None else f"{path} at position {position}"
        detail = ""
        if expected is not None or actual is not None:
            detail = f" (expected {expected!r}, found {actual!r})"
        super().__init__(f"{where}: {reason}{detail}")
        self.path = Path(path)
        self.position = position
        self.reason = reason
        self.expected = expected
        self.actual = actual
        self.offset = offset


class CorruptRecordError(CorruptDataError):
    """A record batch fails its CRC-32C, length or framing checks."""


class CorruptIndexError(CorruptDataError):
    """An offset or time index fails its sanity check (it is rebuilt, never trusted)."""


class CorruptCheckpointError(CorruptDataError):
    """A checkpoint file is truncated or not in Kafka's text format."""


class CheckpointMismatchError(CorruptCheckpointError):
    """A checkpoint file parses but cannot be right for the segments beside it.

    For example a log start offset above the first segment's base offset, or
    a recovery point above the log end offset.  The open is refused and
    nothing is changed; ``expected`` and ``actual`` say what would have been
    plausible and what the file holds.
    """


class LogInconsistencyError(CorruptDataError):
    """The files of a partition directory disagree with each other: a hole or an overlap
    between two segments, a segment file missing between others.  ``offset`` is the first
    offset affected; the open is refused and nothing is changed."""


class UnsupportedFormatError(ChangelogError):
    """Valid Kafka data that this library does not read (old magic, compressed batches)."""

    def __init__(self, path: Path | str, position: int | None, reason: str) -> None:
        where = f"{path}" if position is None else f"{path} at position {position}"
        super().__init__(f"{where}: {reason}")
        self.path = Path(path)
        self.position = position
        self.reason = reason


class LogStorageError(ChangelogError):
    """An operating-system failure (disk full, I/O error) while writing or syncing.

    The original :class:`OSError` is the ``__cause__``; ``path`` names the file.
    What was acknowledged before the failure is intact.
    """

    def __init__(self, path: Path | str, operation: str, cause: OSError) -> None:
        super().__init__(f"{operation} failed on {path}: {cause.strerror or cause}")
        self.path = Path(path)
        self.operation = operation
        self.errno = cause.errno


class IndexOperationError(ChangelogError, ValueError):
    """An index was asked to break its invariants: append to a full index, append an
    offset or timestamp that goes backwards, store an offset that does not fit
    relative to the base offset, or read an entry that does not exist.

    These are bugs of the caller (the segment rolls before an index is full),
    never disk contents; nothing is written.  ``path`` names the index file.
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason


class InvalidCheckpointEntryError(ChangelogError, ValueError):
    """An entry handed to :func:`write_checkpoint` cannot be written (nothing was written).

    ``entry`` is the offending ``((topic, partition), offset)``.
    """

    def __init__(self, entry: object, reason: str) -> None:
        super().__init__(f"checkpoint entry {entry!r}: {reason}")
        self.entry = entry
        self.reason = reason


class CleanerAbortedError(ChangelogError):
    """A cleaning pass was aborted before its swap (close, truncation, shutdown)."""


class RepairRefusedError(ChangelogError):
    """An operator remedy (:mod:`changelog.repair`) refuses, having changed nothing.

    ``path`` names the file or directory, ``offset`` the offset concerned (if
    any) and ``reason`` says why and what to do instead (for example the offset
    a truncation could use).
    """

    def __init__(self, path: Path, reason: str, *, offset: int | None = None) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.offset = offset


class SegmentOperationError(ChangelogError, ValueError):
    """A segment was asked to break its invariants: create it over a file that holds data,
    store an offset too far from its base offset, rename it from a suffix it does not have,
    append bytes that are not whole batches ending at the stated offset.

    Bugs of the caller, never disk contents; nothing is written.  ``path``
    names the segment's ``.log`` file (or the buffer's intended one).
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason


class SegmentChangedError(ChangelogError):
    """A segment's ``.log`` file changed between the loader's read-only plan and its recovery:
    the plan expected ``expected`` valid bytes, recovery found ``actual``.  Nothing was cut."""

    def __init__(self, path: Path | str, *, expected: int, actual: int) -> None:
        super().__init__(
            f"{path}: recovery found {actual} valid bytes, the plan {expected}: the file "
            "changed during open; nothing was cut"
        )
        self.path = Path(path)
        self.expected = expected
        self.actual = actual


class CleanerServiceStateError(ChangelogError):
    """The cleaner service was asked to ``operation`` while ``state`` (closed, or started twice)."""

    def __init__(self, state: str, operation: str) -> None:
        super().__init__(f"cleaner service is {state}: cannot {operation}")
        self.state = state
        self.operation = operation


class CleanerWorkerError(ChangelogError):
    """A cleaner worker process failed: ``exit_code`` (``None``: still running or unknown),
    and the ``error_type`` and ``reason`` it reported (``"no reply"`` if it died silently)."""

    def __init__(self, worker: str, *, exit_code: int | None, error_type: str, reason: str) -> None:
        super().__init__(
            f"[{worker}] cleaner worker process failed (exit code {exit_code}): "
            f"{error_type}: {reason}"
        )
        self.worker = worker
        self.exit_code = exit_code
        self.error_type = error_type
        self.reason = reason
