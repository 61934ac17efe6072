"""Shared helpers for statestore tests."""

from __future__ import annotations

import signal
import subprocess
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


def kill9_and_drain(child: subprocess.Popen[str], timeout_s: float = 60) -> tuple[str, str]:
    """SIGKILL ``child`` and return the rest of its stdout and stderr.

    Reads through the same text wrappers a test's ``readline()`` used: ``communicate()`` reads
    the raw pipes and would drop lines already in the wrapper's buffer (an acknowledgement lost
    that way makes a durable commit look unacknowledged).
    """
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=timeout_s)
    out = child.stdout.read() if child.stdout is not None else ""
    err = child.stderr.read() if child.stderr is not None else ""
    for stream in (child.stdout, child.stderr):
        if stream is not None:
            stream.close()
    return out, err
