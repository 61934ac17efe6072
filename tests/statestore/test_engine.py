"""The RocksDB engine: raw bytes, one WriteBatch with the applied offset, ranges, close/reopen."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from statestore.config import Compression, RocksDBConfig
from statestore.errors import StoreEngineError
from statestore.stores.engine import RocksDBEngine, new_block_cache


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[RocksDBEngine]:
    engine = RocksDBEngine.open(
        tmp_path / "db", config=RocksDBConfig(), cache=new_block_cache(1 << 20)
    )
    yield engine
    engine.close()


def test_write_applies_data_and_offset_together(engine: RocksDBEngine) -> None:
    assert engine.applied_offset() is None
    engine.write([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], 3)
    engine.write([(b"b", None)], 4)
    assert engine.applied_offset() == 4
    assert engine.get(b"a") == b"1"
    assert engine.get(b"b") is None
    assert list(engine.items()) == [(b"a", b"1"), (b"c", b"3")]


def test_metadata_is_not_in_the_data_key_space(engine: RocksDBEngine) -> None:
    engine.write([], 7)
    assert list(engine.items()) == []
    assert engine.get(b"changelog-offset") is None


def test_ranges_are_half_open_both_directions(engine: RocksDBEngine) -> None:
    engine.write([(bytes([c]), bytes([c])) for c in b"abcdef"], 6)

    def keys(entries: Iterator[tuple[bytes, bytes]]) -> bytes:
        return b"".join(k for k, _ in entries)

    assert keys(engine.items(b"b", b"e")) == b"bcd"
    assert keys(engine.items(b"b", b"e", reverse=True)) == b"dcb"
    assert keys(engine.items(None, b"c", reverse=True)) == b"ba"
    assert keys(engine.items(b"d", None, reverse=True)) == b"fed"
    assert keys(engine.items(b"bb", b"dd")) == b"cd"
    assert keys(engine.items(b"x", None)) == b""


def test_close_releases_the_lock_at_once_and_data_survives(tmp_path: Path) -> None:
    config = RocksDBConfig()
    first = RocksDBEngine.open(tmp_path / "db", config=config, cache=None)
    first.write([(b"k", b"v")], 1)
    with pytest.raises(StoreEngineError) as info:
        RocksDBEngine.open(tmp_path / "db", config=config, cache=None)
    assert info.value.operation == "open"
    first.close()
    first.close()  # idempotent
    second = RocksDBEngine.open(tmp_path / "db", config=config, cache=None)
    assert second.get(b"k") == b"v"
    assert second.applied_offset() == 1
    second.close()


def test_destroy_removes_the_directory(tmp_path: Path) -> None:
    engine = RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None)
    engine.write([(b"k", b"v")], 1)
    engine.close()
    RocksDBEngine.destroy(tmp_path / "db")
    assert not (tmp_path / "db").exists()
    fresh = RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None)
    assert fresh.get(b"k") is None
    assert fresh.applied_offset() is None
    fresh.close()


def test_approximate_num_entries_after_flush(engine: RocksDBEngine) -> None:
    engine.write([(str(i).encode(), b"v") for i in range(1000)], 1000)
    engine.flush()
    assert 500 <= engine.approximate_num_entries() <= 2000


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd", "snappy"])
def test_every_compression_opens(tmp_path: Path, compression: Compression) -> None:
    engine = RocksDBEngine.open(
        tmp_path / "db",
        config=RocksDBConfig(compression=compression),
        cache=None,
    )
    engine.write([(b"k", b"v" * 100)], 1)
    engine.flush()
    engine.close()


def test_checkpoint_is_an_openable_copy(tmp_path: Path) -> None:
    engine = RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None)
    engine.write([(b"k", b"v")], 1)
    engine.checkpoint(tmp_path / "copy")
    engine.write([(b"k", b"w")], 2)
    engine.close()
    copy = RocksDBEngine.open(tmp_path / "copy", config=RocksDBConfig(), cache=None)
    assert copy.get(b"k") == b"v"
    assert copy.applied_offset() == 1
    copy.close()


def test_bounds_outlive_the_callers_bytes(engine: RocksDBEngine) -> None:
    """The bound's bytes may be freed before iteration starts (rocksdict does not keep them)."""
    engine.write([(b"k%03d" % i, b"v") for i in range(100)], 100)
    forward = engine.items(b"k010", b"k%03d" % 13)
    backward = engine.items(b"k%03d" % 10, b"k%03d" % 13, reverse=True)
    gc.collect()
    _ = [bytes(64) for _ in range(1000)]  # reuse the freed memory
    assert [k for k, _ in forward] == [b"k010", b"k011", b"k012"]
    assert [k for k, _ in backward] == [b"k012", b"k011", b"k010"]
