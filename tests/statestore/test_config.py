"""Store, RocksDB and manager configuration: defaults and validation."""

from __future__ import annotations

import pytest

from statestore.config import RocksDBConfig, StateManagerConfig, StoreConfig
from statestore.errors import InvalidStoreConfigError


def test_defaults() -> None:
    assert StoreConfig().restore_mode == "full"
    assert RocksDBConfig().bloom_filter_bits_per_key == 10
    assert StateManagerConfig().run_cleaner is True


@pytest.mark.parametrize(
    ("cls", "kwargs", "setting"),
    [
        (StoreConfig, {"restore_mode": "partial"}, "restore_mode"),
        (StoreConfig, {"restore_batch_records": 0}, "restore_batch_records"),
        (StoreConfig, {"restore_batch_bytes": 0}, "restore_batch_bytes"),
        (StoreConfig, {"flush_interval_records": True}, "flush_interval_records"),
        (RocksDBConfig, {"compression": "gzip"}, "compression"),
        (RocksDBConfig, {"write_buffer_size_bytes": 10}, "write_buffer_size_bytes"),
        (RocksDBConfig, {"max_write_buffer_number": 1}, "max_write_buffer_number"),
        (RocksDBConfig, {"memtable_bloom_size_ratio": 1.5}, "memtable_bloom_size_ratio"),
        (RocksDBConfig, {"memtable_bloom_size_ratio": -0.1}, "memtable_bloom_size_ratio"),
        (RocksDBConfig, {"memtable_bloom_size_ratio": "0.1"}, "memtable_bloom_size_ratio"),
        (StateManagerConfig, {"block_cache_size_bytes": -1}, "block_cache_size_bytes"),
        (StateManagerConfig, {"run_cleaner": "yes"}, "run_cleaner"),
        (StateManagerConfig, {"cleaner": {}}, "cleaner"),
    ],
)
def test_nonsense_is_rejected(cls: type, kwargs: dict[str, object], setting: str) -> None:
    with pytest.raises(InvalidStoreConfigError) as info:
        cls(**kwargs)
    assert info.value.setting == setting
    assert isinstance(info.value, ValueError)


def test_configs_are_frozen_and_keyword_only() -> None:
    config = StoreConfig()
    with pytest.raises(AttributeError):
        config.restore_mode = "incremental"  # type: ignore[misc]
    with pytest.raises(TypeError):
        StoreConfig("full")  # type: ignore[call-arg]
