"""Configuration of stores (:class:`StoreConfig`), their RocksDB (:class:`RocksDBConfig`)
and the state manager (:class:`StateManagerConfig`).

All are frozen, keyword-only attrs classes with the unit in every name.
Nonsense is rejected at construction with
:class:`~statestore.errors.InvalidStoreConfigError`.  The changelog's own
settings are :class:`changelog.LogConfig` and :class:`changelog.CleanerConfig`;
docs/configuration.md lists every setting with its Kafka equivalent.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import attrs

from changelog.config import CleanerConfig, LogConfig
from statestore.errors import InvalidStoreConfigError

__all__ = [
    "STORE_LOG_CONFIG",
    "Compression",
    "RecordingLevel",
    "RestoreMode",
    "RocksDBConfig",
    "StateManagerConfig",
    "StoreConfig",
]

STORE_LOG_CONFIG: Final = LogConfig(
    segment_bytes=64 * 1024 * 1024,
    max_compaction_lag_ms=3600 * 1000,
    roll_dirty_ratio=0.25,
    roll_dirty_min_bytes=64 * 1024,
    backpressure_dirty_ratio=1.0,
    backpressure_min_bytes=2 * 1024 * 1024,
)
"""The changelog settings of a store that passes none: Kafka's topic defaults, except six.

A store's changelog is replayed at every start, so it must stay compact even when
it is small and long-lived.  Kafka's defaults (1 GiB segments, a 7-day roll,
``max.compaction.lag.ms`` unbounded) keep everything in the active segment, which
the cleaner never touches: 17,464 records for 51 live keys were replayed at every
start.  With ``max_compaction_lag_ms`` at one hour the active segment rolls once
its first record is an hour old (KIP-354) and the log is due for cleaning then, so a
restore replays about the live keys plus the last hour or so of updates; 64 MiB
segments let a busy store roll by size and clean by dirty ratio long before that.
Measured by ``python -m benchmarks.compactness_bench`` (docs/performance.md).

``roll_dirty_ratio=0.25`` and ``roll_dirty_min_bytes=64 KiB`` bound the active segment,
which the cleaner never reads, by the rest of the log: it rolls once it passes a quarter
of the other segments (never below 64 KiB), and the cleaner, woken by the roll, cleans
it.  So a restore replays about the live records plus a small tail whatever the write
rate, as long as the cleaner keeps up.  ``backpressure_dirty_ratio=1.0`` and
``backpressure_min_bytes=2 MiB`` make it keep up: a commit waits while the dirty tail is
larger than the cleaned part plus 2 MiB and the cleaner can clean it, so a restore replays
at most about twice the live records plus that allowance whatever the write rate
(``python -m benchmarks.restore_bound_bench``, docs/operations.md "Restore bounded by live
data").
"""

RestoreMode = Literal["full", "incremental"]
RecordingLevel = Literal["OFF", "INFO", "DEBUG"]
Compression = Literal["none", "snappy", "lz4", "zstd"]

_RESTORE_MODES: Final = frozenset({"full", "incremental"})
_COMPRESSIONS: Final = frozenset({"none", "snappy", "lz4", "zstd"})
_RECORDING_LEVELS: Final = frozenset({"OFF", "INFO", "DEBUG"})


def _at_least(minimum: int) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidStoreConfigError(attribute.name, value, "must be an integer")
        if value < minimum:
            raise InvalidStoreConfigError(attribute.name, value, f"must be >= {minimum}")

    return check


def _fraction(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidStoreConfigError(attribute.name, value, "must be a number")
    if not 0 <= value <= 1:
        raise InvalidStoreConfigError(attribute.name, value, "must be between 0 and 1")


def _instance_of(cls: type[Any]) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, cls):
            raise InvalidStoreConfigError(attribute.name, value, f"must be a {cls.__name__}")

    return check


def _one_of(choices: frozenset[str]) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in choices:
            raise InvalidStoreConfigError(
                attribute.name, value, f"must be one of {', '.join(sorted(choices))}"
            )

    return check


@attrs.frozen(kw_only=True)
class RocksDBConfig:
    """RocksDB options of one store, applied on every open (never read back from disk).

    Defaults follow Kafka Streams' ``RocksDBStore`` (16 MiB write buffers, 3 of
    them, 4 KiB blocks, bloom filters, no compression), plus memtable bloom
    filters (:attr:`memtable_bloom_size_ratio`).  The block cache is
    shared by every store of a manager and sized by
    :attr:`StateManagerConfig.block_cache_size_bytes`.

    Immutable; thread-safe.
    """

    write_buffer_size_bytes: int = attrs.field(
        default=16 * 1024 * 1024, validator=_at_least(64 * 1024)
    )
    """Size of one memtable (RocksDB ``write_buffer_size``; Kafka Streams: 16 MiB)."""

    max_write_buffer_number: int = attrs.field(default=3, validator=_at_least(2))
    """Memtables per column family (``max_write_buffer_number``; Kafka Streams: 3)."""

    block_size_bytes: int = attrs.field(default=4096, validator=_at_least(512))
    """SST data block size (``block_size``; Kafka Streams: 4 KiB)."""

    bloom_filter_bits_per_key: int = attrs.field(default=10, validator=_at_least(0))
    """Bloom filter bits per key; 0 disables the filter (Kafka Streams: 10)."""

    memtable_bloom_size_ratio: float = attrs.field(default=0.02, validator=_fraction)
    """Beyond Kafka Streams: a bloom filter over the whole keys of each memtable, sized at
    this fraction of :attr:`write_buffer_size_bytes` (RocksDB's
    ``memtable_prefix_bloom_size_ratio`` with ``memtable_whole_key_filtering``); 0 disables.
    A get of a key that is not in a memtable then skips that memtable's skip-list search,
    which is most gets of a store being written (its keys spread over the memtables and
    level-0 files); docs/performance.md, "Reads in a live store"."""

    compression: Compression = attrs.field(default="none", validator=_one_of(_COMPRESSIONS))
    """SST compression (Kafka Streams: none)."""

    max_background_jobs: int = attrs.field(default=2, validator=_at_least(1))
    """Concurrent flushes and compactions (``max_background_jobs``)."""

    max_open_files: int = attrs.field(default=-1, validator=_at_least(-1))
    """Open SST files kept (``max_open_files``; -1: unlimited, as Kafka Streams)."""


@attrs.frozen(kw_only=True)
class StoreConfig:
    """How one store restores, commits and flushes.  Immutable; thread-safe."""

    restore_mode: RestoreMode = attrs.field(default="full", validator=_one_of(_RESTORE_MODES))
    """``full`` (default): on open, delete the RocksDB directory and replay the
    changelog from its log start offset.  ``incremental``: keep RocksDB and
    replay from the applied offset stored in it (rebuilding with a warning when
    that offset is outside the log); the store then holds the changelog's
    cleaning barrier at its durably flushed offset so the cleaner keeps every
    tombstone a later incremental restore may need."""

    restore_batch_records: int = attrs.field(default=10_000, validator=_at_least(1))
    """Records per RocksDB ``WriteBatch`` during restore (Kafka Streams'
    ``max.poll.records`` plays this role: 1,000)."""

    restore_batch_bytes: int = attrs.field(default=4 * 1024 * 1024, validator=_at_least(1))
    """Changelog batch bytes per RocksDB ``WriteBatch`` during restore: a WriteBatch
    closes after the log batch that brings it to this many bytes or to
    ``restore_batch_records`` records, whichever comes first, so large values do
    not make a WriteBatch of that many records (the bytes of each log batch as
    stored, compressed if it is; distributed mode's
    ``ProcessorConfig.restore_batch_bytes``)."""

    flush_interval_records: int = attrs.field(default=100_000, validator=_at_least(1))
    """With ``incremental`` restore: start a RocksDB flush (in the background) after
    this many committed records, and raise the changelog's cleaning barrier once
    it is on disk.  With WAL off only flushed data survives a crash, so this is
    about how far the durable applied offset (and the cleaning barrier) trails the
    changelog; Kafka Streams checkpoints every 10,000 records under EOS.  Unused
    with ``full`` restore, which deletes RocksDB at every open: there RocksDB
    flushes only when its memtables are full, and at close."""


@attrs.frozen(kw_only=True)
class StateManagerConfig:
    """Settings of a :class:`~statestore.StateManager` (one state directory).  Immutable; thread-safe."""

    block_cache_size_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=_at_least(0))
    """The LRU block cache shared by every store's RocksDB (0: no cache)."""

    run_cleaner: bool = attrs.field(default=True, validator=_instance_of(bool))
    """Run the background log cleaner (:class:`changelog.CleanerConfig`) over the changelogs."""

    cleaner: CleanerConfig = attrs.field(
        factory=CleanerConfig, validator=_instance_of(CleanerConfig)
    )
    """The log cleaner's settings."""

    metrics_recording_level: RecordingLevel = attrs.field(
        default="INFO", validator=_one_of(_RECORDING_LEVELS)
    )
    """Which metrics are recorded (Kafka's ``metrics.recording.level``): ``INFO`` the
    commit counters, histograms and gauges; ``DEBUG`` also the per-operation ones
    (put, get and delete counts, the per-get latency; a Python call per put and get);
    ``OFF`` none (the stores are built without their metered layer)."""
