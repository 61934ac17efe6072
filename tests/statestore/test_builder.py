"""The builder: the stack is built inside out, restored, and a failed build leaves nothing open."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from changelog.config import LogConfig
from changelog.log.log import Log
from statestore.config import RocksDBConfig, StoreConfig
from statestore.errors import RestoreError
from statestore.serdes import MsgpackSerde, StringSerde
from statestore.stores.buffer import WriteBuffer
from statestore.stores.builder import build_store
from statestore.stores.engine import RocksDBEngine
from statestore.stores.lifecycle import StoreState
from statestore.stores.partitioned import PartitionedStore
from statestore.stores.spec import RECORD_OVERHEAD_BYTES, StoreSpec
from statestore.txn.coordinator import TransactionCoordinator


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[TransactionCoordinator]:
    opened = TransactionCoordinator.open(tmp_path)
    yield opened
    opened.close()


def _spec(partitions: int, **config: object) -> StoreSpec:
    return StoreSpec(
        name="kv",
        partitions=partitions,
        key_serde=StringSerde(),
        value_serde=MsgpackSerde(),
        log_config=LogConfig(),
        rocksdb=RocksDBConfig(),
        config=StoreConfig(**config),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("partitions", [1, 3])
def test_the_stack_is_typed_over_partitioned_over_buffers_over_change_logging(
    tmp_path: Path, partitions: int, coordinator: TransactionCoordinator
) -> None:
    spec = _spec(partitions)
    store, results = build_store(
        spec, state_dir=tmp_path, cache=None, clock=None, coordinator=coordinator
    )
    try:
        assert store.state is StoreState.OPEN
        assert [r.mode for r in results] == ["full"] * partitions
        inner = store._inner
        buffers = inner.partitions if partitions > 1 else (inner,)
        assert isinstance(inner, PartitionedStore if partitions > 1 else WriteBuffer)
        for number, buffer in enumerate(buffers):
            assert isinstance(buffer, WriteBuffer)
            assert buffer.inner.state is StoreState.OPEN
            assert buffer.inner.changelog.dir == spec.changelog_dir(tmp_path, number)
            assert buffer.inner.engine.path == spec.rocksdb_dir(tmp_path, number)
        assert store.changelogs == tuple(b.inner.changelog for b in buffers)
        assert store._max_record_bytes == spec.max_record_bytes
    finally:
        store.close()
    assert all(log.closed for log in store.changelogs)


def test_a_failed_restore_closes_every_partition_opened_so_far(
    tmp_path: Path, coordinator: TransactionCoordinator
) -> None:
    spec = _spec(3)
    # partition 1 holds a record a store never writes (no key): its restore fails
    with Log.open(
        spec.changelog_dir(tmp_path, 1), config=LogConfig(cleanup_policy="delete")
    ) as log:
        log.append([(None, b"v")])
    with pytest.raises(RestoreError):
        build_store(spec, state_dir=tmp_path, cache=None, clock=None, coordinator=coordinator)
    for number in range(2):  # partitions 0 and 1 were opened; every lock is free again
        Log.open(spec.changelog_dir(tmp_path, number)).close()
        RocksDBEngine.open(
            spec.rocksdb_dir(tmp_path, number), config=spec.rocksdb, cache=None
        ).close()
    assert not spec.changelog_dir(tmp_path, 2).exists()  # never reached


def test_a_changelog_that_cannot_open_leaves_nothing_open(
    tmp_path: Path, coordinator: TransactionCoordinator
) -> None:
    spec = _spec(2)
    held = Log.open(spec.changelog_dir(tmp_path, 1))  # partition 1 is locked by someone else
    try:
        with pytest.raises(Exception, match="lock"):
            build_store(spec, state_dir=tmp_path, cache=None, clock=None, coordinator=coordinator)
    finally:
        held.close()
    Log.open(spec.changelog_dir(tmp_path, 0)).close()
    RocksDBEngine.open(spec.rocksdb_dir(tmp_path, 0), config=spec.rocksdb, cache=None).close()


def test_spec_facts() -> None:
    spec = _spec(1)
    assert spec.max_record_bytes == LogConfig().max_message_bytes - RECORD_OVERHEAD_BYTES
    assert spec.changelog_dir(Path("s"), 2) == Path("s/kv-changelog-2")
    assert spec.rocksdb_dir(Path("s"), 2) == Path("s/kv-rocksdb-2")
    assert spec == _spec(1)
    assert spec != _spec(1, restore_mode="incremental")
