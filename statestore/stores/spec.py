"""What a store is (:class:`StoreSpec`) and where its partitions live in a state directory.

Directory names (Kafka Streams' shape, flattened into one state directory):
the changelog of partition ``p`` of store ``s`` is ``<state_dir>/s-changelog-p``
(a Kafka partition directory of topic ``s-changelog``) and its RocksDB is
``<state_dir>/s-rocksdb-p``, side by side.  :func:`changelog_dir` and
:func:`rocksdb_dir` are the one home of these names (the CLI uses them too).

Thread-safety: immutable values and pure functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import attrs

from changelog import LogConfig
from changelog.record.header import BATCH_HEADER_SIZE
from statestore.config import RocksDBConfig, StoreConfig
from statestore.serdes import Serde
from statestore.stores.time.settings import TimeSettings

__all__ = ["RECORD_OVERHEAD_BYTES", "StoreSpec", "changelog_dir", "rocksdb_dir"]

RECORD_OVERHEAD_BYTES: Final = BATCH_HEADER_SIZE + 32
"""The batch header plus the most a single record's framing can take (varints, attributes)."""


def changelog_dir(state_dir: Path, store: str, partition: int) -> Path:
    """``<state_dir>/<store>-changelog-<partition>``."""
    return state_dir / f"{store}-changelog-{partition}"


def rocksdb_dir(state_dir: Path, store: str, partition: int) -> Path:
    """``<state_dir>/<store>-rocksdb-<partition>``."""
    return state_dir / f"{store}-rocksdb-{partition}"


@attrs.frozen(kw_only=True)
class StoreSpec:
    """Everything that defines one store: the manager builds it once, the builder reads it.

    Two specs are equal when a store opened with one may be handed out for the
    other (the manager refuses a second open with different settings).

    Immutable; thread-safe (the serdes are shared, and must be thread-safe
    themselves if several threads use the store).
    """

    name: str
    """The store's name (the changelog topic is ``<name>-changelog``)."""
    partitions: int
    """Number of changelog partitions (>= 1)."""
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    log_config: LogConfig
    """Settings of every changelog partition."""
    rocksdb: RocksDBConfig
    """Settings of every partition's RocksDB."""
    config: StoreConfig
    """Restore, commit and flush settings."""
    time: TimeSettings | None = None
    """A store in time (timestamped key-value, window); ``None``: a plain key-value store."""

    @property
    def max_record_bytes(self) -> int:
        """The largest serialized key + value one record may have (fits one changelog batch)."""
        return self.log_config.max_message_bytes - RECORD_OVERHEAD_BYTES

    def changelog_dir(self, state_dir: Path, partition: int) -> Path:
        """The changelog directory of ``partition`` under ``state_dir``."""
        return changelog_dir(state_dir, self.name, partition)

    def rocksdb_dir(self, state_dir: Path, partition: int) -> Path:
        """The RocksDB directory of ``partition`` under ``state_dir``."""
        return rocksdb_dir(state_dir, self.name, partition)
