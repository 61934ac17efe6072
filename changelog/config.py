"""Configuration of one log partition (:class:`LogConfig`) and of the cleaner (:class:`CleanerConfig`).

Both are frozen, keyword-only attrs classes.  Names are Kafka's topic and broker
settings with dots turned into underscores and the unit spelled out
(``segment.ms`` -> ``segment_ms``, ``log.cleaner.dedupe.buffer.size`` ->
``dedupe_buffer_size_bytes``).  Defaults are Kafka's, except where a comment
says why a changelog wants another one.  Nonsense is rejected at construction
with :class:`~changelog.errors.InvalidConfigError`.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal

import attrs

from changelog.errors import InvalidConfigError
from changelog.limits import INT32_MAX, INT64_MAX

__all__ = ["CleanerConfig", "CleanupPolicy", "LogConfig"]


CleanupPolicy = Literal["compact", "delete", "compact,delete"]
_POLICIES: Final = frozenset({"compact", "delete", "compact,delete", "delete,compact"})


def _at_least(minimum: int) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfigError(attribute.name, value, "must be an integer")
        if value < minimum:
            raise InvalidConfigError(attribute.name, value, f"must be >= {minimum}")

    return check


def _minus_one_or_at_least(minimum: int) -> Any:
    """Kafka's "-1 means unlimited" settings (``retention.ms``, ``retention.bytes``)."""

    def check(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfigError(attribute.name, value, "must be an integer")
        if value != -1 and value < minimum:
            raise InvalidConfigError(
                attribute.name, value, f"must be -1 (unlimited) or >= {minimum}"
            )

    return check


def _ratio(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidConfigError(attribute.name, value, "must be a number")
    if not 0.0 <= value <= 1.0 or math.isnan(value):
        raise InvalidConfigError(attribute.name, value, "must be between 0.0 and 1.0")


def _policy(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in _POLICIES:
        raise InvalidConfigError(
            attribute.name, value, "must be 'compact', 'delete' or 'compact,delete'"
        )


@attrs.frozen(kw_only=True)
class LogConfig:
    """Settings of one partition log (Kafka's topic-level configuration).

    Durability: with the defaults (``flush_messages=1``) every ``append``
    fsyncs its segment before it returns, so an acknowledged append survives
    ``kill -9`` and power loss.  Raising ``flush_messages`` or setting
    ``flush_ms`` trades that away: after a power loss (not after ``kill -9``,
    which leaves the page cache intact) up to ``flush_messages - 1`` records,
    or the last ``flush_ms`` of appends, may be lost; never a partial batch.
    """

    segment_bytes: int = attrs.field(default=1024 * 1024 * 1024, validator=_at_least(14))
    """``segment.bytes``: roll the active segment when it would grow past this size."""

    segment_ms: int = attrs.field(default=7 * 24 * 3600 * 1000, validator=_at_least(1))
    """``segment.ms``: roll when the active segment's first record is this old."""

    segment_jitter_ms: int = attrs.field(default=0, validator=_at_least(0))
    """``segment.jitter.ms``: random amount subtracted from ``segment_ms`` per segment."""

    index_interval_bytes: int = attrs.field(default=4096, validator=_at_least(0))
    """``index.interval.bytes``: bytes appended between two offset/time index entries."""

    segment_index_bytes: int = attrs.field(default=10 * 1024 * 1024, validator=_at_least(12))
    """``segment.index.bytes``: maximum size of an index file; a full index rolls the segment."""

    max_message_bytes: int = attrs.field(default=1024 * 1024 + 12, validator=_at_least(0))
    """``max.message.bytes``: the largest record batch ``append`` accepts."""

    cleanup_policy: str = attrs.field(default="compact", validator=_policy)
    """``cleanup.policy``: ``compact`` (default here: a changelog is compacted, as
    Kafka Streams configures its changelog topics; Kafka's own default is ``delete``),
    ``delete``, or ``compact,delete``."""

    retention_ms: int = attrs.field(
        default=7 * 24 * 3600 * 1000, validator=_minus_one_or_at_least(0)
    )
    """``retention.ms``: with ``delete`` in the policy, segments whose largest timestamp
    is older than this are deleted (-1: no limit)."""

    retention_bytes: int = attrs.field(default=-1, validator=_minus_one_or_at_least(0))
    """``retention.bytes``: with ``delete`` in the policy, oldest segments are deleted
    while the log is larger than this (-1: no limit)."""

    delete_retention_ms: int = attrs.field(default=24 * 3600 * 1000, validator=_at_least(0))
    """``delete.retention.ms``: how long a tombstone survives after the first clean that kept it."""

    min_cleanable_dirty_ratio: float = attrs.field(default=0.5, validator=_ratio)
    """``min.cleanable.dirty.ratio``: a log is due for cleaning above this dirty ratio."""

    min_compaction_lag_ms: int = attrs.field(default=0, validator=_at_least(0))
    """``min.compaction.lag.ms``: records younger than this are never compacted."""

    max_compaction_lag_ms: int = attrs.field(default=INT64_MAX, validator=_at_least(1))
    """``max.compaction.lag.ms``: a dirty record older than this makes the log due."""

    file_delete_delay_ms: int = attrs.field(default=60_000, validator=_at_least(0))
    """``file.delete.delay.ms``: how long ``.deleted`` files linger before removal."""

    flush_messages: int = attrs.field(default=1, validator=_at_least(1))
    """``flush.messages``: fsync once this many records are unflushed.  The default 1
    (Kafka's is ``Long.MAX_VALUE``) fsyncs every append before it returns."""

    flush_ms: int = attrs.field(default=INT64_MAX, validator=_at_least(0))
    """``flush.ms``: fsync on append when the last fsync is older than this."""

    def __attrs_post_init__(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                "min_compaction_lag_ms",
                self.min_compaction_lag_ms,
                f"must not exceed max_compaction_lag_ms={self.max_compaction_lag_ms}",
            )
        if self.segment_index_bytes > INT32_MAX:
            raise InvalidConfigError(
                "segment_index_bytes", self.segment_index_bytes, "must fit in 31 bits"
            )
        if self.segment_bytes > INT32_MAX:
            raise InvalidConfigError(
                "segment_bytes", self.segment_bytes, "must fit in 31 bits (positions are int32)"
            )

    @property
    def compact(self) -> bool:
        """Whether ``compact`` is part of the cleanup policy."""
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How old the active segment's first record may get before a roll: Kafka's ``maxSegmentMs``.

        ``segment_ms``, or ``max_compaction_lag_ms`` when that is smaller and the
        policy compacts (KIP-354): the cleaner never cleans the active segment, so
        without this roll a dirty record could wait in it for ``segment_ms``
        (7 days by default) whatever ``max_compaction_lag_ms`` says.
        """
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def delete(self) -> bool:
        """Whether ``delete`` is part of the cleanup policy."""
        return "delete" in self.cleanup_policy


@attrs.frozen(kw_only=True)
class CleanerConfig:
    """Settings of the log cleaner (Kafka's ``log.cleaner.*`` broker settings)."""

    dedupe_buffer_size_bytes: int = attrs.field(
        default=128 * 1024 * 1024, validator=_at_least(1024)
    )
    """``log.cleaner.dedupe.buffer.size``: memory for the offset map, over all threads."""

    dedupe_buffer_load_factor: float = attrs.field(default=0.9, validator=_ratio)
    """``log.cleaner.io.buffer.load.factor``: how full the offset map may get."""

    io_buffer_size_bytes: int = attrs.field(default=512 * 1024, validator=_at_least(1024))
    """``log.cleaner.io.buffer.size``: read/write buffer of a cleaning pass."""

    io_max_bytes_per_second: float = attrs.field(default=math.inf)
    """``log.cleaner.io.max.bytes.per.second``: throttle of cleaner I/O (inf: none)."""

    threads: int = attrs.field(default=1, validator=_at_least(1))
    """``log.cleaner.threads``: cleaning workers."""

    backoff_ms: int = attrs.field(default=15_000, validator=_at_least(0))
    """``log.cleaner.backoff.ms``: sleep when no log is due."""

    retention_check_interval_ms: int = attrs.field(default=300_000, validator=_at_least(1))
    """``log.retention.check.interval.ms``: how often retention is applied."""

    retry_backoff_ms: int = attrs.field(default=60_000, validator=_at_least(0))
    """How long a log whose pass failed waits before it is tried again (doubles per failure).

    Named after the clients' ``retry.backoff.ms`` (KIP-580); Kafka's broker has no
    such setting: it keeps a failed log uncleanable until it restarts."""

    retry_backoff_max_ms: int = attrs.field(default=3_600_000, validator=_at_least(0))
    """The longest wait between two tries of a failing log (``retry.backoff.max.ms``)."""

    @io_max_bytes_per_second.validator
    def _check_io(self, attribute: attrs.Attribute[float], value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise InvalidConfigError(attribute.name, value, "must be a positive number (or inf)")
