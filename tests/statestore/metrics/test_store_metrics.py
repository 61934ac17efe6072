"""Each store partition metric means what docs/metrics.md says, checked against the store and its log."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from changelog.cleaner.clean import clean_log
from changelog.cleaner.manager import log_to_clean
from statestore import StateManagerConfig, StoreConfig
from statestore.partitioner import partition_for
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import NO_CLEANER

DEBUG = attrs.evolve(NO_CLEANER, metrics_recording_level="DEBUG")
"""Per-operation counts (put, get, delete) are DEBUG metrics, as in Kafka Streams."""


def partition_metrics(manager: Any, store: str = "s", partition: int = 0) -> dict[str, Any]:
    return manager.metrics()["stores"][store][partition]  # type: ignore[no-any-return]


def test_n_puts_and_one_commit(open_manager: OpenManager) -> None:
    manager = open_manager(config=DEBUG)
    store = manager.store("s")
    for i in range(25):
        store[f"k{i}"] = {"i": i}
    assert partition_metrics(manager)["pending-writes"] == 25
    assert manager.commit() == 25
    m = partition_metrics(manager)
    assert m["put-total"] == 25
    assert m["commit-total"] == 1
    assert m["records-committed-total"] == 25
    assert m["pending-writes"] == 0
    assert m["commit-latency"]["count"] == 1
    assert m["commit-latency"]["max"] == m["commit-latency"]["sum"] > 0
    log = store.changelog
    assert m["bytes-appended-total"] == log.size_bytes == m["Size"]
    assert m["LogEndOffset"] == log.log_end_offset == 25
    assert m["applied-offset"] == 25
    assert m["LogStartOffset"] == 0
    assert m["NumLogSegments"] == len(log.segments)
    assert m["estimate-num-keys"] >= 1
    assert m["put-rate"] > 0


def test_repeated_puts_count_calls_but_commit_one_record(open_manager: OpenManager) -> None:
    manager = open_manager(config=DEBUG)
    store = manager.store("s")
    for value in range(5):
        store["same"] = value
    store.put_all([("a", 1), ("b", None)])
    manager.commit()
    manager.commit()  # nothing pending: not a commit
    m = partition_metrics(manager)
    assert (m["put-total"], m["delete-total"]) == (6, 1)
    assert m["records-committed-total"] == 3
    assert m["commit-total"] == 1


def test_gets_and_deletes(open_manager: OpenManager) -> None:
    manager = open_manager(config=DEBUG)
    store = manager.store("s")
    store["a"] = 1
    store.get("a")
    store.get("missing")
    _ = "a" in store
    store.delete("a")  # reads the old value first: a get
    store.put("b", None)
    m = partition_metrics(manager)
    assert m["get-total"] == 4
    assert m["delete-total"] == 2
    assert m["put-total"] == 1


def test_get_many_counts_every_key(open_manager: OpenManager) -> None:
    manager = open_manager(config=DEBUG)
    store = manager.store("s")
    store["a"] = 1
    assert store.get_many(["a", "b", "c"]) == [1, None, None]
    m = partition_metrics(manager)
    assert m["get-total"] == 3
    assert m["get-latency"]["count"] == 3


def test_debug_level_times_every_get(open_manager: OpenManager) -> None:
    manager = open_manager(config=DEBUG)
    store = manager.store("s")
    store["a"] = 1
    for _ in range(7):
        store.get("a")
    latency = partition_metrics(manager)["get-latency"]
    assert latency["count"] == 7 == partition_metrics(manager)["get-total"]
    assert 0 < latency["max"] < 1


def test_metrics_off_builds_no_metered_layer(open_manager: OpenManager) -> None:
    manager = open_manager(config=attrs.evolve(NO_CLEANER, metrics_recording_level="OFF"))
    store = manager.store("s")
    store["a"] = 1
    manager.commit()
    assert manager.metrics() == {"stores": {}, "cleaner": {}, "transactions": {}}
    assert manager.metrics_registry is None
    assert store.changelog.append_observer is None


def test_fsync_time_is_recorded_per_flushed_append(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("s")
    for round_ in range(3):
        store["k"] = round_
        manager.commit()
    m = partition_metrics(manager)
    assert m["log-flush-time"]["count"] == 3  # the default policy fsyncs every commit
    assert m["log-flush-time"]["sum"] <= m["commit-latency"]["sum"]


def test_fsync_time_is_recorded_for_transactional_commits(open_manager: OpenManager) -> None:
    manager = open_manager()
    a, b = manager.store("a"), manager.store("b")
    for round_ in range(4):
        a["k"] = round_
        b["k"] = round_
        manager.commit()  # two partitions: a transaction, fsynced at T2 (not by the append)
    every = manager.metrics()["stores"]
    for name in ("a", "b"):
        (partition,) = every[name].values()
        assert partition["commit-total"] == 4
        assert partition["log-flush-time"]["count"] == 4
        assert 0 < partition["log-flush-time"]["sum"] < 60


def test_restore_metrics_after_reopen(open_manager: OpenManager) -> None:
    manager = open_manager(config=DEBUG)
    store = manager.store("s")
    for i in range(300):
        store[f"k{i}"] = i
        if i % 50 == 49:
            manager.commit()
    manager.close()
    reopened = open_manager(config=DEBUG)
    reopened.store("s")
    m = partition_metrics(reopened)
    result = reopened.restore_results("s")[0]
    assert m["restore-total"] == result.records_restored == 300
    assert m["restore-remaining-records-total"] == 0
    assert m["restore-time"] == pytest.approx(result.seconds)
    assert m["put-total"] == 0  # a new store's operation counters start at 0


def test_restore_progress_reports_remaining_records(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("s")
    for i in range(100):
        store[f"k{i}"] = i
        if i % 10 == 9:
            manager.commit()  # changelog batches of 10: the restore's WriteBatches end at 30, 60, 90
    manager.close()
    seen: list[tuple[int, int]] = []
    reopened = open_manager()

    def progress(p: Any) -> None:
        m = reopened.metrics_registry
        assert m is not None
        values = {s.definition.name: s.value for s in m.samples() if s.tags and s.tags[0][1] == "s"}
        seen.append((values["restore-total"], values["restore-remaining-records-total"]))

    reopened.store("s", config=StoreConfig(restore_batch_records=30), progress=progress)
    assert seen == [(30, 70), (60, 40), (90, 10), (100, 0)]


def test_partitioned_store_counts_per_partition(open_manager: OpenManager) -> None:
    manager = open_manager(config=DEBUG)
    store = manager.store("p", partitions=3, key_type=bytes)
    keys = [b"key-%d" % i for i in range(60)]
    for key in keys:
        store[key] = 1
    manager.commit()
    expected = [sum(1 for key in keys if partition_for(key, 3) == p) for p in range(3)]
    counted = [partition_metrics(manager, "p", p)["put-total"] for p in range(3)]
    assert counted == expected
    # a commit over three partitions is a transaction: one COMMIT marker in each
    assert [partition_metrics(manager, "p", p)["LogEndOffset"] for p in range(3)] == [
        n + 1 for n in expected
    ]


def test_dirty_ratio_is_the_cleaners_own(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("s")
    for round_ in range(30):
        for i in range(40):
            store[f"k{i}"] = round_
        manager.commit()
    log = store.changelog
    assert len(log.segments) > 2
    ratio = partition_metrics(manager)["dirty-ratio"]
    assert ratio == log_to_clean(log, now_ms=log.clock()).dirty_ratio
    assert ratio > 0.5  # never cleaned: everything but the active segment is dirty
    clean_log(log, force=True)
    after = partition_metrics(manager)["dirty-ratio"]
    assert after == log_to_clean(log, now_ms=log.clock()).dirty_ratio < ratio


def test_a_reopened_failed_store_gets_fresh_metrics(open_manager: OpenManager) -> None:
    manager = open_manager(config=DEBUG)
    store = manager.store("s")
    store["a"] = 1
    manager.commit()
    store.close()  # closed by hand: the manager reopens it
    again = manager.store("s")
    assert again is not store
    m = partition_metrics(manager)
    assert m["put-total"] == 0
    assert m["restore-total"] == 1


def test_default_config_records_info_metrics() -> None:
    assert StateManagerConfig().metrics_recording_level == "INFO"


def test_info_level_counts_no_operation_and_adds_no_frame(open_manager: OpenManager) -> None:
    manager = open_manager()  # INFO, the default
    store = manager.store("s")
    metered = store._inner
    buffer = metered.inner
    assert store._inner_put == buffer.put  # the write buffer's own put: no frame of the layer
    assert store._inner_get == buffer.get
    store["a"] = 1
    store.get("a")
    manager.commit()
    m = partition_metrics(manager)
    assert not {"put-total", "get-total", "delete-total", "put-rate", "get-latency"} & set(m)
    assert (m["commit-total"], m["records-committed-total"]) == (1, 1)
