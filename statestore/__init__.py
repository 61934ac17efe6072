"""Durable key-value state stores on RocksDB, restored from a local compacted changelog."""

from __future__ import annotations

__all__: list[str] = []
