"""The versioned key-value store (KIP-889): versions, as-of reads, history retention, changelog."""

from __future__ import annotations

import pytest

from statestore.config import StoreConfig
from statestore.errors import StoreMetadataMismatchError
from statestore.serdes import LongSerde
from statestore.stores.time.settings import ADDITIONAL_RETENTION_MS
from statestore.stores.time.versioned import VersionedKeyValueStore, VersionedRecord
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import engine_of

HISTORY = 1_000


def _versioned(manager: object, **kwargs: object) -> VersionedKeyValueStore[str, int]:
    kwargs.setdefault("history_retention_ms", HISTORY)
    kwargs.setdefault("value_serde", LongSerde())
    return manager.versioned_store("v", **kwargs)  # type: ignore[attr-defined,no-any-return]


def test_versions_and_as_of_reads(open_manager: OpenManager) -> None:
    store = _versioned(open_manager())
    assert store.put("k", 1, 100)
    assert store.put("k", 2, 200)
    assert store.put("k", 3, 300)
    assert store.get("k") == VersionedRecord(3, 300, None)
    store.commit()
    assert store.get("k", 250) == VersionedRecord(2, 200, 300)
    assert store.get("k", 200) == VersionedRecord(2, 200, 300)
    assert store.get("k", 99) is None
    assert store.delete("k", 350) == VersionedRecord(3, 300, None)
    assert store.get("k") is None
    assert store.get("k", 349) == VersionedRecord(3, 300, 350)
    assert store.put("k", 4, 150)  # out of order, within the history: a version in between
    assert store.get("k", 160) == VersionedRecord(4, 150, 200)
    store.commit()
    assert store.get("k", 120) == VersionedRecord(1, 100, 150)
    # a key that is a byte prefix of another does not see its versions
    store.put("k\x00", 9, 310)
    assert store.get("k", 320) == VersionedRecord(3, 300, 350)


def test_history_retention(open_manager: OpenManager) -> None:
    store = _versioned(open_manager())
    store.put("k", 1, 100)
    store.put("k", 2, 5_000)  # stream time 5000: history back to 4000
    assert store.get("k", 3_999) is None
    assert store.get("k", 4_000) == VersionedRecord(1, 100, 5_000)
    assert not store.put("k", 7, 3_999)  # too old: dropped
    assert store.expired_records_dropped == 1
    assert store.put("k", 8, 4_000)
    store.commit()
    store.put("old", 1, 10)  # a first version older than the history: dropped too
    assert store.get("old") is None


def test_changelog_is_kafka_streams_versioned(open_manager: OpenManager) -> None:
    store = _versioned(open_manager())
    store.put("k", 5, 100)
    store.put("k", 6, 200)
    store.delete("k", 300)
    store.commit()
    (log,) = store.changelogs
    # one record per version: plain key, plain value, the version's time as CreateTime
    assert [(r.key, r.value, r.timestamp_ms) for r in log.read(0)] == [
        (b"k", (5).to_bytes(8, "big"), 100),
        (b"k", (6).to_bytes(8, "big"), 200),
        (b"k", None, 300),
    ]
    assert log.config.min_compaction_lag_ms == HISTORY + ADDITIONAL_RETENTION_MS
    assert log.config.cleanup_policy == "compact"


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_restore_keeps_every_version(open_manager: OpenManager, mode: str) -> None:
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    manager = open_manager()
    store = _versioned(manager, config=config)
    for n in range(1, 40):
        store.put(f"k{n % 3}", n, n * 10)
        if n % 4 == 0:
            store.delete(f"k{(n + 1) % 3}", n * 10 + 5)
        store.commit()
    expected = {(k, t): store.get(k, t) for k in ("k0", "k1", "k2") for t in range(0, 420, 5)}
    latest = {k: store.get(k) for k in ("k0", "k1", "k2")}
    manager.crash()
    manager = open_manager()
    store = _versioned(manager, config=config)
    assert {(k, t): store.get(k, t) for k in ("k0", "k1", "k2") for t in range(0, 420, 5)} == (
        expected
    )
    assert {k: store.get(k) for k in ("k0", "k1", "k2")} == latest
    assert store.stream_time_ms == 390


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_commits_prune_history_from_rocksdb(open_manager: OpenManager, mode: str) -> None:
    """Versions no read returns leave RocksDB as the stream time moves; reads are unchanged."""
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    manager = open_manager()
    store = _versioned(manager, config=config)
    engine = engine_of(store.inner)
    keys = [f"k{n}" for n in range(20)]
    for step in range(200):  # 100 ms apart: the stream time moves 20 histories
        for n, key in enumerate(keys):
            if (step + n) % 7 == 0:
                store.delete(key, step * 100 + n)
            else:
                store.put(key, step, step * 100 + n)
        store.commit()
        # at most: the history, a prune interval, and what was written since the last pass
        assert len(list(engine.items())) <= len(keys) * (HISTORY + HISTORY // 2) // 100 * 3
    assert engine.history_pruned_to_ms >= store.stream_time_ms - 2 * HISTORY
    assert engine.versions_pruned > 0
    cutoff = store.stream_time_ms - HISTORY
    times = range(cutoff, store.stream_time_ms + 200, 37)
    expected = {(k, t): store.get(k, t) for k in keys for t in times}
    latest = {k: store.get(k) for k in keys}
    # a read needs nothing older than the newest version before the prune point
    point = engine.history_pruned_to_ms
    stamps = [int.from_bytes(stored[-8:], "big") for stored, _ in engine.items()]
    assert sum(stamp < point for stamp in stamps) <= len(keys)
    manager.crash()
    manager = open_manager()
    store = _versioned(manager, config=config)
    assert {(k, t): store.get(k, t) for k in keys for t in times} == expected
    assert {k: store.get(k) for k in keys} == latest
    assert len(list(engine_of(store.inner).items())) < 200 * len(keys) // 4


def test_type_and_retention_are_recorded(open_manager: OpenManager) -> None:
    manager = open_manager()
    _versioned(manager).put("k", 1, 1)
    manager.commit()
    manager.close()
    manager = open_manager()
    with pytest.raises(StoreMetadataMismatchError):
        _versioned(manager, history_retention_ms=5)
    with pytest.raises(StoreMetadataMismatchError):
        manager.timestamped_store("v")
    assert _versioned(manager).get("k") == VersionedRecord(1, 1, None)
