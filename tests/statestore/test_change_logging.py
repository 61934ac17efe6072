"""The change-logging layer under its write buffer, ported from Kafka Streams' ChangeLoggingKeyValueBytesStoreTest.

The layers under test are :class:`WriteBuffer` over :class:`ChangeLoggingStore`
over a real changelog ``Log`` and a real RocksDB engine, built as the builder
builds them; "inner" below is the engine, "the changelog" the Log.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from changelog.config import LogConfig
from changelog.fs import files
from changelog.fs.files import CLEAN_SHUTDOWN_FILE
from changelog.log.log import Log
from statestore.config import RocksDBConfig
from statestore.errors import (
    CommitFailedError,
    InvalidStateStoreError,
    RestoreError,
    StoreEngineError,
)
from statestore.stores.buffer import WriteBuffer
from statestore.stores.change_logging import ChangeLoggingStore
from statestore.stores.engine import RocksDBEngine
from statestore.stores.lifecycle import StoreState
from statestore.stores.restore import plan_restore
from tests.statestore.helpers import changelog_entries


def _partition(
    tmp_path: Path,
    *,
    hold_cleaning_barrier: bool,
    interval: int,
    log_config: LogConfig | None = None,
) -> WriteBuffer:
    """A restored partition over an empty changelog: incremental when it holds the barrier."""
    log = Log.open(tmp_path / "kv-changelog-0", config=log_config or LogConfig())
    engine = RocksDBEngine.open(tmp_path / "kv-rocksdb-0", config=RocksDBConfig(), cache=None)
    plan = plan_restore(
        "incremental" if hold_cleaning_barrier else "full",
        applied_offset=None,
        has_data=False,
        log_start_offset=0,
        log_end_offset=0,
    )
    part = ChangeLoggingStore(
        store="kv",
        partition=0,
        changelog=log,
        engine=engine,
        plan=plan,
        flush_interval_records=interval,
    )
    part.restore(batch_records=1000)
    return WriteBuffer(part)


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[WriteBuffer]:
    part = _partition(
        tmp_path,
        hold_cleaning_barrier=True,
        interval=1000,
        log_config=LogConfig(max_message_bytes=4096),
    )
    part.inner.changelog.cleaning_barrier_offset = None  # as a fresh log has it
    yield part
    part.close()


def test_should_write_key_value_bytes_to_inner_store_on_put(logged: WriteBuffer) -> None:
    logged.put(b"k", b"v")
    logged.commit()
    assert logged.inner.engine.get(b"k") == b"v"


def test_should_log_change_on_put(logged: WriteBuffer) -> None:
    logged.put(b"k", b"v")
    logged.commit()
    assert changelog_entries(logged.inner.changelog) == [(b"k", b"v")]


def test_should_not_write_before_commit(logged: WriteBuffer) -> None:
    logged.put(b"k", b"v")
    assert logged.inner.engine.get(b"k") is None
    assert logged.inner.changelog.log_end_offset == 0
    assert logged.get(b"k") == b"v"


def test_should_put_null_on_delete_and_log_a_tombstone(logged: WriteBuffer) -> None:
    logged.put(b"k", b"v")
    logged.commit()
    logged.put(b"k", None)
    assert logged.get(b"k") is None
    logged.commit()
    assert logged.inner.engine.get(b"k") is None
    assert changelog_entries(logged.inner.changelog) == [(b"k", b"v"), (b"k", None)]


def test_should_log_changes_on_put_all_as_one_batch(logged: WriteBuffer) -> None:
    logged.put_many([(b"a", b"1"), (b"b", b"2"), (b"c", None)])
    assert logged.commit() == 3
    assert changelog_entries(logged.inner.changelog) == [(b"a", b"1"), (b"b", b"2"), (b"c", None)]
    assert len(list(logged.inner.changelog.read_batches(0))) == 1


def test_last_write_to_a_key_wins_within_a_commit(logged: WriteBuffer) -> None:
    logged.put(b"a", b"1")
    logged.put(b"a", b"2")
    logged.put(b"a", None)
    logged.put(b"a", b"3")
    assert logged.commit() == 1
    assert changelog_entries(logged.inner.changelog) == [(b"a", b"3")]


def test_applied_offset_is_the_log_end_offset_after_each_commit(logged: WriteBuffer) -> None:
    for i in range(3):
        logged.put(b"k%d" % i, b"v")
        logged.put(b"x", b"%d" % i)
        logged.commit()
        assert (
            logged.inner.engine.applied_offset()
            == logged.inner.changelog.log_end_offset
            == 2 * (i + 1)
        )


def test_flush_raises_the_cleaning_barrier_to_the_flushed_offset(logged: WriteBuffer) -> None:
    logged.inner.changelog.cleaning_barrier_offset = 0
    logged.put(b"a", b"1")
    logged.commit()
    assert logged.inner.changelog.cleaning_barrier_offset == 0
    logged.flush()
    assert logged.inner.changelog.cleaning_barrier_offset == 1


def test_too_large_commit_writes_nothing_and_keeps_the_writes(logged: WriteBuffer) -> None:
    logged.put_many([(b"k%d" % i, b"v" * 100) for i in range(100)])
    with pytest.raises(CommitFailedError) as info:
        logged.commit()
    assert info.value.written is False
    assert not logged.failed
    assert logged.inner.changelog.log_end_offset == 0
    assert logged.pending_count == 100
    assert logged.abort() == 100
    logged.put(b"k", b"v")
    assert logged.commit() == 1


def test_items_merges_pending_writes(logged: WriteBuffer) -> None:
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


@pytest.mark.parametrize("count", [1, 200])  # one record and a large batch
def test_rocksdb_failure_after_the_append_fails_the_partition_and_keeps_the_commit(
    logged: WriteBuffer, count: int
) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise StoreEngineError(logged.inner.engine.path, "write", "disk on fire")

    logged.inner.engine.write = broken  # type: ignore[method-assign,assignment]
    logged.put_many([(b"k%d" % i, b"v") for i in range(count)])
    with pytest.raises(StoreEngineError):
        logged.commit()
    assert logged.failed
    assert logged.inner.changelog.log_end_offset == count  # the changelog has the commit
    assert len(changelog_entries(logged.inner.changelog)) == count


@pytest.mark.parametrize("count", [1, 200])
def test_simulated_crash_in_the_append_propagates_unwrapped(
    logged: WriteBuffer, count: int
) -> None:
    def die(step: str, path: Path) -> None:
        if step == "segment.append":
            raise files.SimulatedCrash(step)

    logged.put_many([(b"k%d" % i, b"v") for i in range(count)])
    with pytest.raises(files.SimulatedCrash), files.inject_faults(die):
        logged.commit()
    assert logged.inner.engine.get(b"k0") is None  # RocksDB never saw a batch the log did not take


def _close(part: WriteBuffer) -> None:
    part.close()


def _wait_for_data_flush(part: WriteBuffer) -> None:
    deadline = time.monotonic() + 30
    while part.inner.engine.data_flush_pending():
        assert time.monotonic() < deadline, "RocksDB flush did not finish"
        time.sleep(0.01)


def _on_disk_copy(part: WriteBuffer, tmp_path: Path, name: str) -> RocksDBEngine:
    """What a ``kill -9`` now would leave of RocksDB (WAL off: the SST files only).

    Copied once no flush or compaction runs (a copy taken mid-flush could pair a
    new MANIFEST with a missing SST file); a running flush changes nothing on
    disk until it commits, so this is a state a crash could leave.
    """
    _wait_for_data_flush(part)
    db = part.inner.engine._db
    deadline = time.monotonic() + 30
    while db.property_int_value("rocksdb.num-running-flushes") or db.property_int_value(
        "rocksdb.num-running-compactions"
    ):
        assert time.monotonic() < deadline, "RocksDB background work did not finish"
        time.sleep(0.01)
    copy = tmp_path / name
    shutil.copytree(part.inner.engine.path, copy, ignore=shutil.ignore_patterns("LOCK"))
    return RocksDBEngine.open(copy, config=RocksDBConfig(), cache=None)


def test_full_restore_partition_never_flushes_on_the_commit_path(tmp_path: Path) -> None:
    part = _partition(tmp_path, hold_cleaning_barrier=False, interval=1)
    calls: list[str] = []
    part.inner.engine.flush = lambda: calls.append("flush")  # type: ignore[method-assign]
    part.inner.engine.request_data_flush = lambda: calls.append("request")  # type: ignore[method-assign]
    try:
        for i in range(5):
            part.put(b"k%d" % i, b"v")
            part.commit()
        assert calls == []
        assert part.inner.changelog.cleaning_barrier_offset is None
    finally:
        _close(part)


def test_incremental_flush_raises_the_barrier_only_once_the_data_is_on_disk(
    tmp_path: Path,
) -> None:
    part = _partition(tmp_path, hold_cleaning_barrier=True, interval=100)
    part.inner.changelog.cleaning_barrier_offset = 0
    try:
        part.put_many([(b"a%03d" % i, b"v") for i in range(100)])
        part.commit()  # asks RocksDB to flush the data up to applied offset 100
        assert part.inner.changelog.cleaning_barrier_offset == 0  # not known durable yet
        _wait_for_data_flush(part)
        part.put(b"b", b"v")
        part.commit()  # sees the flush done: persists offset 100, raises the barrier
        assert part.inner.changelog.cleaning_barrier_offset == 100
        assert part.inner.engine.applied_offset() == part.inner.changelog.log_end_offset == 101
        copy = _on_disk_copy(part, tmp_path, "copy")
        try:
            assert copy.applied_offset() == 100  # on disk; b (offset 100) may or may not be
            assert all(copy.get(b"a%03d" % i) == b"v" for i in range(100))
        finally:
            copy.close(flush=False)
    finally:
        _close(part)


def test_incremental_flush_still_running_at_the_next_interval_is_waited_for(
    tmp_path: Path,
) -> None:
    part = _partition(tmp_path, hold_cleaning_barrier=True, interval=10)
    part.inner.changelog.cleaning_barrier_offset = 0
    part.inner.engine.data_flush_pending = lambda: True  # type: ignore[method-assign]
    try:
        barriers = []
        for round_ in range(2):
            part.put_many([(b"k%d-%d" % (round_, i), b"v") for i in range(10)])
            part.commit()
            barriers.append(part.inner.changelog.cleaning_barrier_offset)
        assert barriers == [0, 20]  # the second interval flushes and waits
    finally:
        _close(part)


def test_on_disk_applied_offset_is_never_ahead_of_the_on_disk_data(tmp_path: Path) -> None:
    """At any moment, a crash leaves RocksDB with every write below its stored applied offset."""
    part = _partition(tmp_path, hold_cleaning_barrier=True, interval=300)
    written: list[bytes] = []  # key of each offset
    try:
        for round_ in range(12):
            keys = [b"r%02d-%03d" % (round_, i) for i in range(100)]
            part.put_many([(key, key) for key in keys])
            part.commit()
            written.extend(keys)
            copy = _on_disk_copy(part, tmp_path, f"copy-{round_}")
            try:
                applied = copy.applied_offset() or 0
                assert applied <= len(written)
                assert all(copy.get(key) == key for key in written[:applied])
            finally:
                copy.close(flush=False)
            barrier = part.inner.changelog.cleaning_barrier_offset
            assert barrier is None or barrier <= applied or barrier == 0
    finally:
        _close(part)


# ------------------------------------------------------------------ lifecycle


def _unrestored(tmp_path: Path) -> ChangeLoggingStore:
    log = Log.open(tmp_path / "kv-changelog-0", config=LogConfig())
    engine = RocksDBEngine.open(tmp_path / "kv-rocksdb-0", config=RocksDBConfig(), cache=None)
    plan = plan_restore(
        "full", applied_offset=None, has_data=False, log_start_offset=0, log_end_offset=0
    )
    return ChangeLoggingStore(
        store="kv",
        partition=0,
        changelog=log,
        engine=engine,
        plan=plan,
        flush_interval_records=10,
    )


def test_a_partition_is_created_then_restoring_then_open(tmp_path: Path) -> None:
    part = _unrestored(tmp_path)
    try:
        assert part.state is StoreState.CREATED
        with pytest.raises(InvalidStateStoreError) as info:
            part.write([(b"k", b"v")])
        assert (info.value.store, info.value.state, info.value.operation) == (
            "kv-0",
            "created",
            "commit",
        )
        seen: list[StoreState] = []

        class Listener:
            def on_restore_start(self, *_args: object) -> None:
                seen.append(part.state)

            def on_batch_restored(self, *_args: object) -> None:
                pass

            def on_restore_end(self, *_args: object) -> None:
                seen.append(part.state)

        part.restore(batch_records=10, listener=Listener())
        assert seen == [StoreState.RESTORING, StoreState.RESTORING]
        assert part.state is StoreState.OPEN
        with pytest.raises(InvalidStateStoreError):
            part.restore(batch_records=10)  # restores once
        assert part.write([(b"k", b"v")]) == 1
    finally:
        part.close()


def test_a_failed_restore_fails_the_partition_and_close_releases_everything(
    tmp_path: Path,
) -> None:
    # A delete-policy topic may hold keyless records; a store's changelog never does.
    with Log.open(tmp_path / "kv-changelog-0", config=LogConfig(cleanup_policy="delete")) as log:
        log.append([(None, b"a record without a key")])
    part = _unrestored(tmp_path)
    with pytest.raises(RestoreError):
        part.restore(batch_records=10)
    assert part.state is StoreState.FAILED
    with pytest.raises(InvalidStateStoreError):
        part.flush()
    part.close()
    assert part.state is StoreState.CLOSED
    assert part.changelog.closed and part.engine.closed
    Log.open(tmp_path / "kv-changelog-0").close()  # both locks are free again
    RocksDBEngine.open(tmp_path / "kv-rocksdb-0", config=RocksDBConfig(), cache=None).close()


def test_close_closes_the_engine_and_the_changelog_cleanly(tmp_path: Path) -> None:
    part = _partition(tmp_path, hold_cleaning_barrier=False, interval=10)
    part.put(b"k", b"v")
    part.commit()
    part.close()
    part.close()  # idempotent
    assert part.inner.changelog.closed and part.inner.engine.closed
    assert (tmp_path / "kv-changelog-0" / CLEAN_SHUTDOWN_FILE).exists()
    part.put(b"x", b"y")  # the buffer holds no state of its own; the layer below refuses
    with pytest.raises(InvalidStateStoreError) as info:
        part.commit()
    assert info.value.state == "closed"


def test_abandon_releases_everything_as_a_crash_would(tmp_path: Path) -> None:
    part = _partition(tmp_path, hold_cleaning_barrier=False, interval=10)
    part.put(b"k", b"v")
    part.commit()
    part.put(b"lost", b"v")
    part.abandon()
    part.abandon()  # idempotent
    assert part.inner.changelog.closed and part.inner.engine.closed
    assert part.pending_count == 0
    assert not (tmp_path / "kv-changelog-0" / CLEAN_SHUTDOWN_FILE).exists()
    with Log.open(tmp_path / "kv-changelog-0") as log:  # recovers, keeps the commit
        assert changelog_entries(log) == [(b"k", b"v")]


def test_a_failed_partition_refuses_commits_and_closes_without_flushing(
    logged: WriteBuffer,
) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise StoreEngineError(logged.inner.engine.path, "write", "disk on fire")

    logged.inner.engine.write = broken  # type: ignore[method-assign,assignment]
    logged.put(b"k", b"v")
    with pytest.raises(StoreEngineError):
        logged.commit()
    assert logged.pending_count == 0  # the changelog has them
    assert logged.inner.state is StoreState.FAILED
    logged.put(b"k2", b"v")
    with pytest.raises(InvalidStateStoreError) as info:
        logged.commit()
    assert info.value.state == "failed"
    flushes: list[bool] = []
    real_close = logged.inner.engine.close

    def close(*, flush: bool = True) -> None:
        flushes.append(flush)
        real_close(flush=flush)

    logged.inner.engine.close = close  # type: ignore[method-assign]
    logged.close()
    assert flushes == [False]


def test_close_discards_pending_writes_with_a_warning(
    logged: WriteBuffer, caplog: pytest.LogCaptureFixture
) -> None:
    logged.put(b"k", b"v")
    logged.close()
    assert "closing with 1 uncommitted writes" in caplog.text
    assert logged.pending_count == 0


def test_the_buffers_get_maps_rocksdb_failures_like_the_engine(tmp_path: Path) -> None:
    """``WriteBuffer.get`` calls RocksDB's get itself: the errors stay the engine's typed ones."""
    buffer = _partition(tmp_path, hold_cleaning_barrier=False, interval=1000)
    buffer.put(b"k", b"v")
    buffer.commit()
    buffer.put(b"pending", b"p")

    def broken(_key: bytes) -> bytes | None:
        raise RuntimeError("IO error: on fire")

    lookup = buffer._lookup
    buffer._lookup = broken  # the database's get, failing as rocksdict fails
    with pytest.raises(StoreEngineError) as info:
        buffer.get(b"k")
    assert (info.value.path, info.value.operation) == (buffer.inner.engine.path, "get")
    assert isinstance(info.value.__cause__, RuntimeError)
    assert buffer.get(b"pending") == b"p"  # the buffer answers without RocksDB
    buffer._lookup = lookup
    del lookup
    assert buffer.get(b"k") == b"v"
    buffer.close()
    with pytest.raises(InvalidStateStoreError):
        buffer.get(b"k")
    # closed through the buffer: RocksDB's lock is free at once
    reopened = RocksDBEngine.open(tmp_path / "kv-rocksdb-0", config=RocksDBConfig(), cache=None)
    assert reopened.get(b"k") == b"v"
    reopened.close()
