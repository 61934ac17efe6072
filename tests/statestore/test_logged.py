"""The logged layer, ported from Kafka Streams' ChangeLoggingKeyValueBytesStoreTest.

The layer under test is :class:`LoggedPartition` over a real changelog ``Log``
and a real RocksDB engine; "inner" below is the engine, "the changelog" the Log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from changelog import files
from changelog.config import LogConfig
from changelog.log import Log
from statestore.config import RocksDBConfig
from statestore.engine import RocksDBEngine
from statestore.errors import CommitFailedError, StoreEngineError
from statestore.logged import LoggedPartition
from tests.statestore.helpers import changelog_entries


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[LoggedPartition]:
    log = Log.open(tmp_path / "kv-changelog-0", config=LogConfig(max_message_bytes=4096))
    engine = RocksDBEngine.open(tmp_path / "kv-rocksdb-0", config=RocksDBConfig(), cache=None)
    part = LoggedPartition(
        store="kv",
        partition=0,
        changelog=log,
        engine=engine,
        flush_interval_records=1000,
        hold_cleaning_barrier=True,
    )
    yield part
    part.close()
    log.close()


def test_should_write_key_value_bytes_to_inner_store_on_put(logged: LoggedPartition) -> None:
    logged.put(b"k", b"v")
    logged.commit()
    assert logged.engine.get(b"k") == b"v"


def test_should_log_change_on_put(logged: LoggedPartition) -> None:
    logged.put(b"k", b"v")
    logged.commit()
    assert changelog_entries(logged.changelog) == [(b"k", b"v")]


def test_should_not_write_before_commit(logged: LoggedPartition) -> None:
    logged.put(b"k", b"v")
    assert logged.engine.get(b"k") is None
    assert logged.changelog.log_end_offset == 0
    assert logged.get(b"k") == b"v"


def test_should_put_null_on_delete_and_log_a_tombstone(logged: LoggedPartition) -> None:
    logged.put(b"k", b"v")
    logged.commit()
    logged.put(b"k", None)
    assert logged.get(b"k") is None
    logged.commit()
    assert logged.engine.get(b"k") is None
    assert changelog_entries(logged.changelog) == [(b"k", b"v"), (b"k", None)]


def test_should_log_changes_on_put_all_as_one_batch(logged: LoggedPartition) -> None:
    logged.put_many([(b"a", b"1"), (b"b", b"2"), (b"c", None)])
    assert logged.commit() == 3
    assert changelog_entries(logged.changelog) == [(b"a", b"1"), (b"b", b"2"), (b"c", None)]
    assert len(list(logged.changelog.read_batches(0))) == 1


def test_last_write_to_a_key_wins_within_a_commit(logged: LoggedPartition) -> None:
    logged.put(b"a", b"1")
    logged.put(b"a", b"2")
    logged.put(b"a", None)
    logged.put(b"a", b"3")
    assert logged.commit() == 1
    assert changelog_entries(logged.changelog) == [(b"a", b"3")]


def test_applied_offset_is_the_log_end_offset_after_each_commit(logged: LoggedPartition) -> None:
    for i in range(3):
        logged.put(b"k%d" % i, b"v")
        logged.put(b"x", b"%d" % i)
        logged.commit()
        assert logged.engine.applied_offset() == logged.changelog.log_end_offset == 2 * (i + 1)


def test_flush_raises_the_cleaning_barrier_to_the_flushed_offset(logged: LoggedPartition) -> None:
    logged.changelog.cleaning_barrier_offset = 0
    logged.put(b"a", b"1")
    logged.commit()
    assert logged.changelog.cleaning_barrier_offset == 0
    logged.flush()
    assert logged.changelog.cleaning_barrier_offset == 1


def test_too_large_commit_writes_nothing_and_keeps_the_writes(logged: LoggedPartition) -> None:
    logged.put_many([(b"k%d" % i, b"v" * 100) for i in range(100)])
    with pytest.raises(CommitFailedError) as info:
        logged.commit()
    assert info.value.written is False
    assert not logged.failed
    assert logged.changelog.log_end_offset == 0
    assert logged.pending_count == 100
    assert logged.abort() == 100
    logged.put(b"k", b"v")
    assert logged.commit() == 1


def test_items_merges_pending_writes(logged: LoggedPartition) -> None:
    logged.put_many([(b"a", b"1"), (b"c", b"3"), (b"e", b"5")])
    logged.commit()
    logged.put_many([(b"b", b"2"), (b"c", None), (b"e", b"6"), (b"f", b"7")])
    assert list(logged.items()) == [(b"a", b"1"), (b"b", b"2"), (b"e", b"6"), (b"f", b"7")]
    assert list(logged.items(reverse=True)) == [
        (b"f", b"7"),
        (b"e", b"6"),
        (b"b", b"2"),
        (b"a", b"1"),
    ]
    assert list(logged.items(b"b", b"f")) == [(b"b", b"2"), (b"e", b"6")]


@pytest.mark.parametrize("count", [1, 200])  # sequential and overlapped (fsync || RocksDB) paths
def test_rocksdb_failure_after_the_append_fails_the_partition_and_keeps_the_commit(
    logged: LoggedPartition, count: int
) -> None:
    def broken(*_args: object) -> None:
        raise StoreEngineError(logged.engine.path, "write", "disk on fire")

    logged.engine.write = broken  # type: ignore[method-assign,assignment]
    logged.put_many([(b"k%d" % i, b"v") for i in range(count)])
    with pytest.raises(StoreEngineError):
        logged.commit()
    assert logged.failed
    assert logged.changelog.log_end_offset == count  # the changelog has the commit
    assert len(changelog_entries(logged.changelog)) == count


@pytest.mark.parametrize("count", [1, 200])
def test_simulated_crash_in_the_append_propagates_unwrapped(
    logged: LoggedPartition, count: int
) -> None:
    def die(step: str, path: Path) -> None:
        if step == "segment.append":
            raise files.SimulatedCrash(step)

    logged.put_many([(b"k%d" % i, b"v") for i in range(count)])
    with pytest.raises(files.SimulatedCrash), files.inject_faults(die):
        logged.commit()
    assert logged.engine.get(b"k0") is None  # RocksDB never saw a batch the log did not take
