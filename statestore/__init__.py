"""Durable key-value state stores on RocksDB, restored from a local compacted changelog."""

from __future__ import annotations

from statestore.config import RocksDBConfig, StateManagerConfig, StoreConfig
from statestore.errors import (
    CommitFailedError,
    DeserializationError,
    InvalidStateStoreError,
    InvalidStoreConfigError,
    RecordTooLargeForLogError,
    RestoreError,
    SerializationError,
    StateDirLockedError,
    StateStoreError,
    StoreEngineError,
    TransactionCoordinatorError,
    TransactionLogCorruptError,
)
from statestore.manager import StateManager
from statestore.partitioner import murmur2, partition_for
from statestore.serdes import AttrsSerde, BytesSerde, IntSerde, MsgpackSerde, Serde, StringSerde
from statestore.stores.lifecycle import StoreState
from statestore.stores.restore import RestoreProgress, RestoreResult, StateRestoreListener
from statestore.stores.typed import KeyValueStore
from statestore.txn.coordinator import TransactionCoordinator

__all__ = [
    "AttrsSerde",
    "BytesSerde",
    "CommitFailedError",
    "DeserializationError",
    "IntSerde",
    "InvalidStateStoreError",
    "InvalidStoreConfigError",
    "KeyValueStore",
    "MsgpackSerde",
    "RecordTooLargeForLogError",
    "RestoreError",
    "RestoreProgress",
    "RestoreResult",
    "RocksDBConfig",
    "Serde",
    "SerializationError",
    "StateDirLockedError",
    "StateManager",
    "StateManagerConfig",
    "StateRestoreListener",
    "StateStoreError",
    "StoreConfig",
    "StoreEngineError",
    "StoreState",
    "StringSerde",
    "TransactionCoordinator",
    "TransactionCoordinatorError",
    "TransactionLogCorruptError",
    "murmur2",
    "partition_for",
]
