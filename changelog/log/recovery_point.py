"""The recovery point and the flush policy (Kafka's ``flush.messages``, ``flush.ms`` and
``recovery-point-offset-checkpoint``).

Offsets below the recovery point are on disk (fsynced); after a crash the
loader re-validates everything from the segment holding it (pass L8).  It
moves up when the log flushes (A2, ``Log.flush``), to the new base offset when
a roll has flushed the old segment (R4, written to the checkpoint), down on
truncation (T3, written), and to the log end offset at close (C2, written).
Between checkpoints the file holds an older, lower value, which only makes
recovery re-validate more.

Thread-safety: not thread-safe; ``Log`` calls it under ``Log.lock``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from changelog.config import LogConfig
from changelog.fs.checkpoint import RECOVERY_POINT_CHECKPOINT, write_offset_checkpoint

__all__ = ["RecoveryPoint"]

logger = logging.getLogger(__name__)


class RecoveryPoint:
    """The recovery point of one log and what the flush policy has counted since the last flush.

    Invariants: ``offset`` is at most the log end offset; ``unflushed_records``
    counts the records appended since the last flush.

    Thread-safety: not thread-safe (module docstring).
    """

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        offset: int,
        *,
        config: LogConfig,
        clock: Callable[[], int],
        prefix: str,
    ) -> None:
        """Start at ``offset`` (what the loader found), with nothing unflushed."""
        self._path = directory / RECOVERY_POINT_CHECKPOINT
        self._topic = topic
        self._partition = partition
        self._config = config
        self._clock = clock
        self._prefix = prefix
        self.offset = offset
        """Offsets below this have been fsynced."""
        self.unflushed_records = 0
        self._last_flush_ms = clock()

    def appended(self, count: int) -> bool:
        """Count ``count`` appended records; whether the flush policy wants an fsync now (A2)."""
        self.unflushed_records += count
        return (
            self.unflushed_records >= self._config.flush_messages
            or self._clock() - self._last_flush_ms >= self._config.flush_ms
        )

    def flushed(self, log_end_offset: int) -> None:
        """Everything up to ``log_end_offset`` was fsynced."""
        self.unflushed_records = 0
        self._last_flush_ms = self._clock()
        self.offset = log_end_offset

    def flushing(self) -> None:
        """A2 starts: a group-commit leader will fsync every record counted so far."""
        self.unflushed_records = 0
        if self._config.flush_messages > 1:  # with 1, appended() never reads the time
            self._last_flush_ms = self._clock()

    def synced_to(self, offset: int) -> None:
        """A2 done: everything below ``offset`` was fsynced (by a leader, without ``Log.lock``
        while it ran; records appended meanwhile stay counted)."""
        self.offset = max(self.offset, offset)

    def rolled(self, base_offset: int) -> None:
        """R4: the old segment was flushed and a new one starts at ``base_offset``."""
        self.flushed(base_offset)
        self.checkpoint("roll.checkpoint")

    def truncating(self, floor_offset: int) -> None:
        """T0: a truncation will end the log at or above ``floor_offset``; lower the checkpoint
        first, so that it is never above the log end offset, whichever step a crash cuts."""
        if floor_offset < self.offset:
            self.offset = floor_offset
            self.checkpoint("truncate.checkpoint_before")

    def truncated(self, log_end_offset: int) -> None:
        """T3: the log now ends at ``log_end_offset``."""
        self.offset = min(self.offset, log_end_offset)
        self.unflushed_records = 0
        self.checkpoint("truncate.checkpoint")

    def checkpoint(self, step: str) -> None:
        """Write ``offset`` to ``recovery-point-offset-checkpoint`` (atomically)."""
        write_offset_checkpoint(self._path, self._topic, self._partition, self.offset)
        logger.debug("%s%s: recovery point %s", self._prefix, step, self.offset)
