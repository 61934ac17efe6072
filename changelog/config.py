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

__all__ = [
    "COMPRESSION_TYPES",
    "GZIP_LEVELS",
    "LZ4_LEVELS",
    "ZSTD_LEVELS",
    "CleanerConfig",
    "CleanupPolicy",
    "LogConfig",
]

COMPRESSION_TYPES: Final = ("producer", "none", "gzip", "snappy", "lz4", "zstd")
"""The values of Kafka's topic setting ``compression.type``."""
GZIP_LEVELS: Final = (-1, range(1, 10))
"""``compression.gzip.level``: Kafka's default (-1, zlib's 6), and the range (``Deflater``)."""
LZ4_LEVELS: Final = (9, range(1, 18))
"""``compression.lz4.level``: Kafka's default and range (lz4-java's)."""
ZSTD_LEVELS: Final = (3, range(-131072, 23))
"""``compression.zstd.level``: Kafka's default and range (zstd's)."""


def _compression_type(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in COMPRESSION_TYPES:
        raise InvalidConfigError(
            attribute.name, value, f"must be one of {', '.join(COMPRESSION_TYPES)}"
        )


def _level(levels: tuple[int, range]) -> Any:
    default, allowed = levels

    def check(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfigError(attribute.name, value, "must be an integer")
        if value != default and value not in allowed:
            raise InvalidConfigError(
                attribute.name,
                value,
                f"must be in [{allowed.start}, {allowed.stop - 1}] or {default}",
            )

    return check


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


def _boolean(_instance: object, attribute: attrs.Attribute[bool], value: bool) -> None:
    if not isinstance(value, bool):
        raise InvalidConfigError(attribute.name, value, "must be True or False")


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

    roll_dirty_ratio: float = attrs.field(default=0.0, validator=_ratio)
    """Beyond Kafka: roll the active segment (all of it dirty: the cleaner never reads
    it) once it would grow past ``max(roll_dirty_min_bytes, roll_dirty_ratio * the
    other segments' bytes)``, so that what a restore replays beyond the cleaned part
    stays a fraction of it, whatever the write rate (0: off, Kafka's behaviour)."""

    roll_dirty_min_bytes: int = attrs.field(default=1024 * 1024, validator=_at_least(0))
    """With ``roll_dirty_ratio``: the active segment never rolls by that rule below this
    size (the fixed allowance of a small log)."""

    backpressure_dirty_ratio: float = attrs.field(default=0.0, validator=_ratio)
    """Beyond Kafka: with a background cleaner, a commit waits (after it is durable, before
    it returns) while the log's dirty tail (from the first dirty offset to the log end
    offset) is larger than
    ``backpressure_dirty_ratio * clean bytes + backpressure_min_bytes`` and the cleaner
    can shrink it (rolled dirty segments below the cleaning barrier), so that a writer
    faster than the cleaner is held to the cleaner's pace instead of growing what a
    restore replays; a log whose last pass kept most of what it read (distinct keys) does
    not wait (0: off, Kafka's behaviour; :meth:`changelog.CleanerService.pace`)."""

    backpressure_min_bytes: int = attrs.field(default=4 * 1024 * 1024, validator=_at_least(0))
    """With ``backpressure_dirty_ratio``: the dirty tail a log may always have (the fixed
    allowance of a small log)."""

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

    record_ttl_ms: int = attrs.field(default=0, validator=_at_least(0))
    """Beyond Kafka: a data record whose timestamp is at or before ``now - record_ttl_ms``
    is expired, and the cleaner removes it as it removes a shadowed record (below the
    cleaning barrier only; a tombstone keeps its own rule).  It judges a batch by its
    max timestamp, so a batch goes once its newest record has expired.  For logs whose
    record timestamp is the value's age (a key-value store with a TTL); 0: off."""

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

    preallocate: bool = attrs.field(default=True, validator=_boolean)
    """``preallocate``: the active segment's ``.log`` is allocated ahead of its data,
    zero-filled, so an append overwrites allocated blocks and its flush is an
    ``fdatasync`` that changes no file metadata (a growing file's flush commits its new
    size and blocks through the file system's journal: measured in
    ``docs/performance.md``, "Serving: a one-put commit").  Unlike Kafka, which sizes the file at
    ``segment.bytes`` when it creates the segment, the space grows by
    ``preallocate_extent_bytes`` at a time (zero-filled, so a 64 MiB segment that rolls
    at 64 KiB does not write 64 MiB of zeros).  The file is trimmed to its batches when
    the segment rolls or the log closes cleanly; after a crash the loader cuts the zero
    tail (``docs/recovery.md``).  Kafka's default is ``false``; ours is ``True``."""

    preallocate_extent_bytes: int = attrs.field(default=1024 * 1024, validator=_at_least(1))
    """Beyond Kafka: with ``preallocate``, how far past an append's end the ``.log`` is
    zero-filled when the append does not fit in the space already allocated (capped at
    ``segment_bytes``; an append of 64 KiB or more grows the file without zeros after it:
    ``changelog.segment.segment.LARGE_APPEND_BYTES``).  No room for the zeros (``ENOSPC``, ``EFBIG``, ``EDQUOT``) does not
    fail the append: that segment goes on without preallocation."""

    compression_type: str = attrs.field(default="none", validator=_compression_type)
    """``compression.type``: the codec appends compress with (``none``, ``gzip``,
    ``snappy``, ``lz4``, ``zstd``), or ``producer``: keep what the producer sent, which
    for our own appends is uncompressed.  Kafka's default is ``producer``; ours is
    ``none`` (see ``docs/performance.md``, "Compression").  Reading never depends on
    it: every codec is read, mixed in one partition too, and the cleaner rewrites a
    batch in its own codec."""

    compression_gzip_level: int = attrs.field(default=GZIP_LEVELS[0], validator=_level(GZIP_LEVELS))
    """``compression.gzip.level``: 1-9, or -1 (zlib's default, 6)."""

    compression_lz4_level: int = attrs.field(default=LZ4_LEVELS[0], validator=_level(LZ4_LEVELS))
    """``compression.lz4.level``: 1-17; 9 (the default), 1 and 2 are LZ4's fast compressor."""

    compression_zstd_level: int = attrs.field(default=ZSTD_LEVELS[0], validator=_level(ZSTD_LEVELS))
    """``compression.zstd.level``: -131072 to 22."""

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
