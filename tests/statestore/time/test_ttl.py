"""The key-value store with a TTL: reads, the sweep, the cleaner and restore, each with the same rule.

A value has expired once ``timestamp <= clock - ttl_ms``.  The expectations
come from that rule applied by hand to the writes of each test.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import pytest

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from statestore.config import StoreConfig
from statestore.errors import (
    InvalidStoreConfigError,
    StoreMetadataMismatchError,
    UnsupportedStoreOperationError,
)
from statestore.manager import StateManager
from statestore.serdes import LongSerde
from statestore.stores.time.settings import TimeSettings, TtlSettings
from statestore.stores.time.timestamped import ValueAndTimestamp
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import NO_CLEANER, engine_of

TTL = 100
T0 = 1_000_000


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def test_settings_are_validated() -> None:
    with pytest.raises(InvalidStoreConfigError) as caught:
        TtlSettings(ttl_ms=0)
    assert caught.value.setting == "ttl_ms"
    with pytest.raises(InvalidStoreConfigError):
        TtlSettings(ttl_ms=10, timestamp="event")  # type: ignore[arg-type]
    with pytest.raises(InvalidStoreConfigError):
        TtlSettings(ttl_ms=10, sweep_interval_ms=-1)
    with pytest.raises(InvalidStoreConfigError):
        TimeSettings(store_type="timestamped-key-value", ttl=100)  # type: ignore[arg-type]
    # the sweep interval is not part of the identity; the TTL is
    assert TtlSettings(ttl_ms=10, sweep_interval_ms=1) == TtlSettings(ttl_ms=10)
    assert TtlSettings(ttl_ms=10) != TtlSettings(ttl_ms=11)


def test_settings_doc_round_trip_and_old_docs() -> None:
    settings = TimeSettings.timestamped_key_value(ttl=TtlSettings(ttl_ms=5, timestamp="record"))
    assert TimeSettings.from_doc(settings.to_doc()) == settings
    old = TimeSettings.timestamped_key_value().to_doc()
    del old["ttl"]  # recorded before TTL existed
    assert TimeSettings.from_doc(old) == TimeSettings.timestamped_key_value()
    assert settings.changelog_config(LogConfig()).record_ttl_ms == 5


def test_reads_never_return_an_expired_value(open_manager: OpenManager) -> None:
    clock = Clock()
    manager = open_manager(clock=clock)
    store = manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL, sweep_interval_ms=10**9))
    store["a1"] = 1
    store["b1"] = 2
    manager.commit()
    clock.now_ms += 60
    store["a2"] = 3  # stamped 60 ms later
    assert store.get_many(["a1", "a2", "b1"]) == [1, 3, 2]
    clock.now_ms += 40  # a1, b1: exactly TTL old -> expired
    assert store.get("a1") is None
    assert "b1" not in store
    with pytest.raises(KeyError):
        store["a1"]
    assert store.get_with_timestamp("a2") == ValueAndTimestamp(3, T0 + 60)  # buffered, live
    assert store.get_many(["a1", "a2", "b1"]) == [None, 3, None]
    assert list(store.items()) == [("a2", 3)]
    assert list(store.prefix_scan("a")) == [("a2", 3)]
    assert list(store.reverse_range()) == [("a2", 3)]
    assert len(store) == 1
    reader = store.reader()
    assert reader.get("a1") is None
    assert reader.get("a2") is None  # not committed yet
    manager.commit()
    assert list(reader.items()) == [("a2", 3)]
    assert reader.get_many(["a1", "a2"]) == [None, 3]
    assert list(reader.prefix_scan("b")) == []
    assert store.counts.expired_reads > 0
    clock.now_ms += 60
    assert list(store.items()) == []
    assert reader.get("a2") is None


def test_wall_clock_ttl_refuses_a_record_timestamp(open_manager: OpenManager) -> None:
    manager = open_manager(clock=Clock())
    store = manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL))
    with pytest.raises(UnsupportedStoreOperationError):
        store.put("a", 1, timestamp_ms=5)
    assert store.pending_count == 0


def test_record_timestamps_count_from_the_record(open_manager: OpenManager) -> None:
    clock = Clock()
    manager = open_manager(clock=clock)
    store = manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL, timestamp="record"))
    store.put("old", 1, timestamp_ms=T0 - TTL)  # already expired
    store.put("new", 2, timestamp_ms=T0 - TTL + 1)
    assert store.get("old") is None
    assert store.get("new") == 2
    clock.now_ms += 1
    assert store.get("new") is None


def test_sweep_writes_tombstones_through_the_commit(open_manager: OpenManager) -> None:
    clock = Clock()
    manager = open_manager(clock=clock)
    store = manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL, sweep_interval_ms=50))
    store["a"] = 1
    store["b"] = 2
    manager.commit()  # no sweep: the interval has not passed since the open
    assert store.counts.sweeps == 0
    clock.now_ms += TTL
    store["b"] = 3  # refreshed in the same commit that sweeps: must survive (quix #1128)
    manager.commit()
    assert store.counts.expired_swept == 1
    (log,) = store.changelogs
    records = [(r.key, r.value) for r in log.read(0)]
    assert records[-2:] in (
        [(b"a", None), (b"b", records[-1][1])],
        [(b"b", records[-2][1]), (b"a", None)],
    )
    assert store.get("b") == 3
    clock.now_ms += 10  # sweep not due yet (interval 50)
    manager.commit()
    assert store.counts.sweeps == 1
    manager.close()
    manager = open_manager(clock=clock)
    store = manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL))
    assert list(store.items()) == [("b", 3)]


def test_sweep_judges_buffered_writes(open_manager: OpenManager) -> None:
    clock = Clock()
    manager = open_manager(clock=clock)
    store = manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL, timestamp="record"))
    store.put("a", 1, timestamp_ms=T0)
    manager.commit()
    clock.now_ms += TTL + 5
    store.put("a", 2, timestamp_ms=clock.now_ms)  # a fresh value over an expired one
    store.put("b", 3, timestamp_ms=T0)  # buffered, already expired
    assert store.expire() == 1  # b only
    manager.commit()
    assert dict(store.items()) == {"a": 2}


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_restore_applies_expired_values_as_deletes(open_manager: OpenManager, mode: str) -> None:
    clock = Clock()
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    ttl = TtlSettings(ttl_ms=TTL, sweep_interval_ms=10**9)
    manager = open_manager(clock=clock)
    store = manager.ttl_store("t", ttl=ttl, config=config)
    store["a"] = 1
    manager.commit()
    clock.now_ms += 50
    store["b"] = 2
    manager.commit()
    manager.close()
    clock.now_ms += 60  # a expired, b live
    manager = open_manager(clock=clock)
    store = manager.ttl_store("t", ttl=ttl, config=config)
    assert list(store.items()) == [("b", 2)]
    if mode == "full":
        (result,) = manager.restore_results("t")
        assert (result.records_restored, result.records_expired) == (2, 1)
        assert list(engine_of(store.inner).items()) == [(b"b", engine_of(store.inner).get(b"b"))]


def test_cleaner_removes_expired_records(open_manager: OpenManager) -> None:
    clock = Clock()
    manager = open_manager(clock=clock)
    store = manager.ttl_store(
        "t", ttl=TtlSettings(ttl_ms=TTL, sweep_interval_ms=10**9), value_serde=LongSerde()
    )
    for value in range(3):
        store[f"k{value}"] = value
        manager.commit()
    (log,) = store.changelogs
    log.roll()
    clock.now_ms += 50
    store["live"] = 9
    manager.commit()
    log.roll()
    stats = clean_log(log, force=True)
    assert stats is not None and stats.expired_records_removed == 0
    clock.now_ms += 50  # the first three expired, "live" not
    stats = clean_log(log, force=True)
    assert stats is not None and stats.expired_records_removed == 3
    assert [r.key for r in log.read(0) if r.value is not None] == [b"live"]
    assert list(store.items()) == [("live", 9)]


@pytest.mark.timeout(120)
def test_cleaner_keeps_expired_records_at_the_barrier(tmp_path: Path) -> None:
    """An older live value in RocksDB must not come back when a newer, expired one is removed.

    Record timestamps out of order: ``v0`` (live for long) then ``v1`` stamped
    earlier (expired at once).  RocksDB durably holds ``v0``; ``v1`` lies at the
    cleaning barrier.  Were the cleaner to remove ``v1`` (and ``v0`` with it, now
    shadowed), an incremental restore from RocksDB's offset would bring ``v0``
    back.
    """
    clock = Clock()
    state = tmp_path / "state"
    ttl = TtlSettings(ttl_ms=TTL, timestamp="record", sweep_interval_ms=10**9)
    config = StoreConfig(restore_mode="incremental", flush_interval_records=10**9)
    log_config = LogConfig(segment_bytes=400, delete_retention_ms=0)

    def open_() -> tuple[StateManager, object]:
        manager = StateManager(state, clock, config=NO_CLEANER, log_config=log_config)
        return manager, manager.ttl_store("t", ttl=ttl, config=config, value_serde=LongSerde())

    manager, store = open_()
    store.put("k", 0, timestamp_ms=T0 + 10 * TTL)  # type: ignore[attr-defined]
    manager.commit()
    (log,) = store.changelogs  # type: ignore[attr-defined]
    log.roll()
    store.flush()  # type: ignore[attr-defined]
    snapshot = tmp_path / "snapshot"
    engine_of(store.inner).checkpoint(snapshot)  # type: ignore[attr-defined]
    store.put("k", 1, timestamp_ms=T0 - TTL)  # type: ignore[attr-defined]
    manager.commit()
    assert store.get("k") is None  # type: ignore[attr-defined]
    assert log.cleaning_barrier_offset == 1
    log.roll()
    clean_log(log, force=True)
    clean_log(log, force=True)
    assert [r.offset for r in log.read(0) if r.value is not None][-1:] == [1]  # v1 stays
    manager.crash()
    rocksdb = state / "t-rocksdb-0"
    shutil.rmtree(rocksdb)
    shutil.copytree(snapshot, rocksdb)  # RocksDB as flushed: v0 applied, v1 not
    manager, store = open_()
    assert store.get("k") is None  # type: ignore[attr-defined]
    manager.close()


def test_reopen_with_another_ttl_is_refused(open_manager: OpenManager) -> None:
    manager = open_manager(clock=Clock())
    manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL))
    manager.timestamped_store("ts")
    manager.close()
    manager = open_manager(clock=Clock())
    with pytest.raises(StoreMetadataMismatchError):
        manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL + 1))
    with pytest.raises(StoreMetadataMismatchError):
        manager.ttl_store("ts", ttl=TtlSettings(ttl_ms=TTL))
    with pytest.raises(StoreMetadataMismatchError):
        manager.timestamped_store("t")


def test_a_given_log_config_gets_the_ttl(open_manager: OpenManager) -> None:
    manager = open_manager(clock=Clock())
    given = attrs.evolve(LogConfig(), segment_bytes=4096)
    store = manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL), log_config=given)
    (log,) = store.changelogs
    assert log.config.record_ttl_ms == TTL
    assert log.config.segment_bytes == 4096


def test_expiry_is_counted_in_metrics(tmp_path: Path) -> None:
    clock = Clock()
    ttl = TtlSettings(ttl_ms=TTL, sweep_interval_ms=0)
    with StateManager(tmp_path / "state", clock, config=NO_CLEANER) as manager:
        store = manager.ttl_store("t", ttl=ttl)
        store["a"] = 1
        store["b"] = 2
        manager.commit()
        clock.now_ms += TTL
        assert store.get("a") is None  # one expired read
        metrics = manager.metrics()
        assert metrics["ttl"]["t"] == {"expired-reads-total": 1, "expired-swept-total": 0}
        store.inner.put(b"c", store.inner.get(b"a"))  # an expired value, written as is
        store.inner.commit()
    clock.now_ms += 1
    with StateManager(tmp_path / "state", clock, config=NO_CLEANER) as manager:
        store = manager.ttl_store("t", ttl=ttl)
        assert manager.metrics()["stores"]["t"][0]["restore-expired-total"] == 3
        manager.commit()  # the sweep: nothing left to sweep, the restore deleted them
        assert manager.metrics()["ttl"]["t"]["expired-swept-total"] == 0
        store["d"] = 4
        manager.commit()
        clock.now_ms += TTL
        manager.commit()
        assert manager.metrics()["ttl"]["t"]["expired-swept-total"] == 1


def test_a_large_sweep_is_spread_over_commits_that_fit_a_batch(tmp_path: Path) -> None:
    """One sweep buffers at most a quarter of max_message_bytes of tombstones; the rest follow."""
    clock = Clock()
    log_config = LogConfig(max_message_bytes=4096)
    with StateManager(tmp_path / "s", clock, config=NO_CLEANER, log_config=log_config) as manager:
        store = manager.ttl_store("t", ttl=TtlSettings(ttl_ms=TTL, sweep_interval_ms=10**9))
        for start in range(0, 1000, 100):
            for n in range(start, start + 100):
                store[f"key-{n:04d}"] = n
            manager.commit()
        clock.now_ms += TTL
        store.expire()  # the first part: the next commits go on (the sweep stays due)
        assert 0 < store.counts.expired_swept <= 4096 // 4 // (len("key-0000") + 16)
        commits = 0
        while store.sweep_due() or store.pending_count:
            manager.commit()  # each commit sweeps the next part; each fits in one batch
            commits += 1
            assert commits < 100
        assert store.counts.expired_swept == 1000 and commits > 1
        assert len(store.inner) == 0
