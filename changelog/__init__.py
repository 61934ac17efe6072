"""A Kafka-format log partition on local disk: segments, indexes, retention and compaction."""

from __future__ import annotations

from changelog.cleaner.clean import CleanerStats, clean_log
from changelog.cleaner.service import CleanerService
from changelog.config import CleanerConfig, LogConfig
from changelog.errors import (
    ChangelogError,
    CheckpointMismatchError,
    CleanerAbortedError,
    CleanerServiceStateError,
    CleanerWorkerError,
    CorruptCheckpointError,
    CorruptDataError,
    CorruptIndexError,
    CorruptRecordError,
    IndexOperationError,
    InvalidCheckpointEntryError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidRecordError,
    LogClosedError,
    LogFailedError,
    LogInconsistencyError,
    LogLockedError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RepairRefusedError,
    SegmentChangedError,
    SegmentOperationError,
    UnsupportedFormatError,
)
from changelog.log.log import AppendInfo, Log
from changelog.record.batch import BatchHeader, Record

__all__ = [
    "AppendInfo",
    "BatchHeader",
    "ChangelogError",
    "CheckpointMismatchError",
    "CleanerAbortedError",
    "CleanerConfig",
    "CleanerService",
    "CleanerServiceStateError",
    "CleanerStats",
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
    "SegmentChangedError",
    "SegmentOperationError",
    "UnsupportedFormatError",
    "clean_log",
]
