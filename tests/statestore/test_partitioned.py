"""Partitioned stores: Kafka's default partitioner, global order, independent restore."""

from __future__ import annotations

import pytest

from statestore.config import StoreConfig
from statestore.partitioner import partition_for
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import changelog_entries


def test_keys_go_to_kafkas_partition(open_manager: OpenManager) -> None:
    store = open_manager().store("kv", partitions=4)
    keys = [f"key-{i}" for i in range(200)]
    store.put_all([(k, i) for i, k in enumerate(keys)])
    assert store.commit() == 200
    assert isinstance(store.changelog, tuple)
    assert len(store.changelogs) == 4
    for partition, log in enumerate(store.changelogs):
        logged = {key for key, _ in changelog_entries(log)}
        assert logged == {k.encode() for k in keys if partition_for(k.encode(), 4) == partition}
        assert logged, "every partition got keys"


def test_reads_and_scans_span_partitions_in_key_order(open_manager: OpenManager) -> None:
    store = open_manager().store("kv", partitions=3)
    store.put_all([(f"k{i:03}", i) for i in range(100)])
    store.commit()
    store["k050"] = "pending"
    store.delete("k051")
    keys = list(store.keys())
    assert keys == sorted(keys)
    assert len(keys) == 99
    assert store["k050"] == "pending"
    assert [k for k, _ in store.range("k010", "k013")] == ["k010", "k011", "k012"]
    assert [k for k, _ in store.range("k010", "k013", reverse=True)] == ["k012", "k011", "k010"]
    assert [k for k, _ in store.prefix_scan("k09")] == [f"k09{i}" for i in range(10)]
    assert len(store) == 99


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_each_partition_restores_independently(open_manager: OpenManager, mode: str) -> None:
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    manager = open_manager()
    store = manager.store("kv", partitions=3, config=config)
    store.put_all([(f"k{i}", i) for i in range(60)])
    store.commit()
    ends = [log.log_end_offset for log in store.changelogs]
    manager.close()
    manager = open_manager()
    store = manager.store("kv", partitions=3, config=config)
    results = manager.restore_results("kv")
    assert [r.end_offset for r in results] == ends
    if mode == "full":  # each partition: its records and the transaction's COMMIT marker
        assert [r.records_restored for r in results] == [end - 1 for end in ends]
    else:
        assert [r.records_restored for r in results] == [0, 0, 0]
    assert dict(store.items()) == {f"k{i}": i for i in range(60)}


def test_kafka_vector_key_lands_in_kafkas_partition(open_manager: OpenManager) -> None:
    """``toPositive(murmur2(b"foobar")) % 10 == 6`` (Kafka's UtilsTest vector)."""
    store = open_manager().store("kv", key_type=bytes, partitions=10)
    store[b"foobar"] = 1
    store.commit()
    ends = [log.log_end_offset for log in store.changelogs]
    assert ends == [0, 0, 0, 0, 0, 0, 1, 0, 0, 0]
