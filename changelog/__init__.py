"""A Kafka-format log partition on local disk: segments, indexes, retention and compaction."""

from __future__ import annotations

from changelog.cleaner.clean import CleanerStats, clean_log
from changelog.cleaner.service import CleanerService
from changelog.config import CleanerConfig, LogConfig
from changelog.errors import (
    ChangelogError,
    CheckpointMismatchError,
    CleanerAbortedError,
    CorruptCheckpointError,
    CorruptDataError,
    CorruptIndexError,
    CorruptRecordError,
    IndexOperationError,
    InvalidCheckpointEntryError,
    InvalidConfigError,
    InvalidRecordError,
    LogClosedError,
    LogFailedError,
    LogInconsistencyError,
    LogLockedError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RepairRefusedError,
    UnsupportedFormatError,
)
from changelog.log import AppendInfo, Log
from changelog.record.batch import BatchHeader, Record

__all__ = [
    "AppendInfo",
    "BatchHeader",
    "ChangelogError",
    "CheckpointMismatchError",
    "CleanerAbortedError",
    "CleanerConfig",
    "CleanerService",
    "CleanerStats",
    "CorruptCheckpointError",
    "CorruptDataError",
    "CorruptIndexError",
    "CorruptRecordError",
    "IndexOperationError",
    "InvalidCheckpointEntryError",
    "InvalidConfigError",
    "InvalidRecordError",
    "Log",
    "LogClosedError",
    "LogConfig",
    "LogFailedError",
    "LogInconsistencyError",
    "LogLockedError",
    "LogStorageError",
    "OffsetOutOfRangeError",
    "Record",
    "RecordTooLargeError",
    "RepairRefusedError",
    "UnsupportedFormatError",
    "clean_log",
]
