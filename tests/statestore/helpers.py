"""Shared helpers for statestore tests."""

from __future__ import annotations

from typing import Any

from changelog.config import LogConfig
from statestore.config import StateManagerConfig

TINY_LOG = LogConfig(segment_bytes=4096, index_interval_bytes=128, delete_retention_ms=0)
"""Segments roll every few batches so that restore crosses segments and the cleaner has work."""

NO_CLEANER = StateManagerConfig(run_cleaner=False, block_cache_size_bytes=1 << 20)
"""Tests that clean do it explicitly (``clean_log(log, force=True)``), so results are deterministic."""


def changelog_entries(log: Any) -> list[tuple[bytes | None, bytes | None]]:
    """Every ``(key, value)`` record in a changelog, in offset order."""
    return [(record.key, record.value) for record in log.read(log.log_start_offset)]


def engine_of(store: Any, partition: int = 0) -> Any:
    """The RocksDB engine under ``partition`` of an open typed store (for fault injection).

    Walks the stack the builder made (typed -> [partitioned] -> [metered] -> buffer ->
    change logging -> engine); tests only.
    """
    inner = store._inner
    layer = inner.partitions[partition] if hasattr(inner, "partitions") else inner
    while not hasattr(layer, "engine"):  # metered (when metrics are on) -> buffer -> change logging
        layer = layer.inner
    return layer.engine
