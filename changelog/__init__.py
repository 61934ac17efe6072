"""A Kafka-format log partition on local disk: segments, indexes, retention and compaction."""

from __future__ import annotations

from changelog.config import CleanerConfig, LogConfig
from changelog.errors import (
    ChangelogError,
    CleanerAbortedError,
    CorruptCheckpointError,
    CorruptDataError,
    CorruptIndexError,
    CorruptRecordError,
    InvalidConfigError,
    InvalidRecordError,
    LogClosedError,
    LogLockedError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnsupportedFormatError,
)

__all__ = [
    "ChangelogError",
    "CleanerAbortedError",
    "CleanerConfig",
    "CorruptCheckpointError",
    "CorruptDataError",
    "CorruptIndexError",
    "CorruptRecordError",
    "InvalidConfigError",
    "InvalidRecordError",
    "LogClosedError",
    "LogConfig",
    "LogLockedError",
    "LogStorageError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "UnsupportedFormatError",
]
