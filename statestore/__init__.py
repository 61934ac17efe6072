"""Durable key-value state stores on RocksDB, restored from a local compacted changelog."""

from __future__ import annotations

from statestore.config import RocksDBConfig, StateManagerConfig, StoreConfig
from statestore.errors import (
    AppliedOffsetMismatchError,
    ChangelogFailedError,
    CommitFailedError,
    CorruptChangelogError,
    CorruptStoreMetadataError,
    DeserializationError,
    InvalidStateStoreError,
    InvalidStoreConfigError,
    InvalidTimestampError,
    RecordTooLargeForLogError,
    RepairInProgressError,
    RestoreError,
    SerdeDefinitionError,
    SerializationError,
    StateDirLockedError,
    StateStoreError,
    StoreEngineError,
    StoreLayoutError,
    StoreMetadataError,
    StoreMetadataMismatchError,
    TransactionCoordinatorError,
    TransactionLogCorruptError,
    TransactionStateMissingError,
    UnsupportedStoreOperationError,
)
from statestore.manager import StateManager
from statestore.migrate import migrate_store
from statestore.partitioner import murmur2, partition_for
from statestore.serdes import (
    AttrsSerde,
    BytesSerde,
    IntSerde,
    LongSerde,
    MsgpackSerde,
    Serde,
    StringSerde,
)
from statestore.stores.lifecycle import StoreState
from statestore.stores.reader import StoreReader
from statestore.stores.restore import RestoreProgress, RestoreResult, StateRestoreListener
from statestore.stores.time.session import SessionStore
from statestore.stores.time.settings import TimeSettings, TtlSettings
from statestore.stores.time.timestamped import TimestampedKeyValueStore, ValueAndTimestamp
from statestore.stores.time.ttl import TtlKeyValueStore, TtlStoreReader
from statestore.stores.time.versioned import VersionedKeyValueStore, VersionedRecord
from statestore.stores.time.window import Windowed, WindowStore
from statestore.stores.typed import KeyValueStore
from statestore.txn.coordinator import TransactionCoordinator

__all__ = [
    "AppliedOffsetMismatchError",
    "AttrsSerde",
    "BytesSerde",
    "ChangelogFailedError",
    "CommitFailedError",
    "CorruptChangelogError",
    "CorruptStoreMetadataError",
    "DeserializationError",
    "IntSerde",
    "InvalidStateStoreError",
    "InvalidStoreConfigError",
    "InvalidTimestampError",
    "KeyValueStore",
    "LongSerde",
    "MsgpackSerde",
    "RecordTooLargeForLogError",
    "RepairInProgressError",
    "RestoreError",
    "RestoreProgress",
    "RestoreResult",
    "RocksDBConfig",
    "Serde",
    "SerdeDefinitionError",
    "SerializationError",
    "SessionStore",
    "StateDirLockedError",
    "StateManager",
    "StateManagerConfig",
    "StateRestoreListener",
    "StateStoreError",
    "StoreConfig",
    "StoreEngineError",
    "StoreLayoutError",
    "StoreMetadataError",
    "StoreMetadataMismatchError",
    "StoreReader",
    "StoreState",
    "StringSerde",
    "TimeSettings",
    "TimestampedKeyValueStore",
    "TransactionCoordinator",
    "TransactionCoordinatorError",
    "TransactionLogCorruptError",
    "TransactionStateMissingError",
    "TtlKeyValueStore",
    "TtlSettings",
    "TtlStoreReader",
    "UnsupportedStoreOperationError",
    "ValueAndTimestamp",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "WindowStore",
    "Windowed",
    "migrate_store",
    "murmur2",
    "partition_for",
]
