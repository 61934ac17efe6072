"""Restore, ported from Kafka Streams' RocksDBStoreTest (restore cases) and StoreChangelogReaderTest.

Changelogs are written directly through ``changelog.Log`` (as a Kafka topic
would hold them); stores are then opened through a real ``StateManager``.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from changelog.log.log import Log
from statestore.config import RestoreMode, RocksDBConfig, StoreConfig
from statestore.errors import AppliedOffsetMismatchError
from statestore.serdes import BytesSerde
from statestore.stores.engine import RocksDBEngine
from statestore.stores.restore import RestoreProgress, open_engine, plan_restore, restore_into
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import TINY_LOG

MODES: list[RestoreMode] = ["full", "incremental"]
Pairs = list[tuple[bytes | None, bytes | None]]


def write_changelog(state_dir: Path, *batches: Pairs, config: LogConfig = TINY_LOG) -> int:
    """Append each batch to ``kv-changelog-0``; returns the log end offset."""
    with Log.open(state_dir / "kv-changelog-0", config=config) as log:
        for batch in batches:
            log.append(batch)
        return log.log_end_offset


class Recorder:
    """A restore listener that records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_restore_start(
        self, store: str, partition: int, start_offset: int, end_offset: int
    ) -> None:
        self.calls.append(("start", store, partition, start_offset, end_offset))

    def on_batch_restored(
        self, store: str, partition: int, batch_end_offset: int, num_restored: int
    ) -> None:
        self.calls.append(("batch", batch_end_offset, num_restored))

    def on_restore_end(self, store: str, partition: int, total_restored: int) -> None:
        self.calls.append(("end", total_restored))


def open_bytes(manager: Any, mode: RestoreMode, **kwargs: Any) -> Any:
    return manager.store(
        "kv",
        key_serde=BytesSerde(),
        value_serde=BytesSerde(),
        config=StoreConfig(restore_mode=mode, restore_batch_records=kwargs.pop("batch", 10_000)),
        **kwargs,
    )


@pytest.mark.parametrize("mode", MODES)
def test_should_restore_all(open_manager: OpenManager, tmp_path: Path, mode: RestoreMode) -> None:
    write_changelog(tmp_path / "state", [(b"1", b"a"), (b"2", b"b"), (b"3", b"c")])
    store = open_bytes(open_manager(), mode)
    assert dict(store.items()) == {b"1": b"a", b"2": b"b", b"3": b"c"}


@pytest.mark.parametrize("mode", MODES)
def test_should_handle_deletes_on_restore_all(
    open_manager: OpenManager, tmp_path: Path, mode: RestoreMode
) -> None:
    write_changelog(
        tmp_path / "state",
        [(b"1", b"a"), (b"2", b"b"), (b"3", b"c")],
        [(b"1", None)],
        [(b"3", None)],
    )
    store = open_bytes(open_manager(), mode)
    assert dict(store.items()) == {b"2": b"b"}


@pytest.mark.parametrize("mode", MODES)
def test_should_handle_deletes_and_put_back_on_restore_all(
    open_manager: OpenManager, tmp_path: Path, mode: RestoreMode
) -> None:
    write_changelog(
        tmp_path / "state",
        [(b"1", b"a"), (b"2", b"b"), (b"3", b"c")],
        [(b"1", None), (b"3", None)],
        [(b"1", b"d"), (b"3", b"e")],
        [(b"2", None)],
    )
    store = open_bytes(open_manager(), mode)
    assert dict(store.items()) == {b"1": b"d", b"3": b"e"}


@pytest.mark.parametrize("mode", MODES)
def test_should_restore_then_delete_on_restore_all(
    open_manager: OpenManager, tmp_path: Path, mode: RestoreMode
) -> None:
    state = tmp_path / "state"
    write_changelog(state, [(b"1", b"a"), (b"2", b"b"), (b"3", b"c")])
    manager = open_manager()
    assert len(list(open_bytes(manager, mode).items())) == 3
    manager.close()
    write_changelog(state, [(b"1", None), (b"2", None)])
    store = open_bytes(open_manager(), mode)
    assert dict(store.items()) == {b"3": b"c"}


@pytest.mark.parametrize("mode", MODES)
def test_should_restore_over_pre_existing_files(
    open_manager: OpenManager, tmp_path: Path, mode: RestoreMode
) -> None:
    """RocksDB files from another history never leak into the restored state.

    A changelog replaced by a shorter history behind RocksDB's back is refused
    (RocksDB applied offsets the log does not have: the cross-check), and
    nothing changes; the operator's explicit rebuild then restores the new history.
    """
    state = tmp_path / "state"
    manager = open_manager()
    store = open_bytes(manager, mode)
    store.put_all([(b"stale-%d" % i, b"x") for i in range(10)])
    store.commit()
    manager.close()
    # The changelog is replaced by another history; RocksDB keeps the old files.
    shutil.rmtree(state / "kv-changelog-0")
    write_changelog(state, [(b"1", b"a")], [(b"2", b"b")])
    before = snapshot(state)
    manager = open_manager()
    with pytest.raises(AppliedOffsetMismatchError) as info:
        open_bytes(manager, mode)
    assert (info.value.applied_offset, info.value.log_end_offset) == (10, 2)
    assert snapshot(state) == before
    manager.raw_store("kv", rebuild=True).close()
    store = open_bytes(manager, mode)
    assert dict(store.items()) == {b"1": b"a", b"2": b"b"}


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (but the lock) by relative path, with its bytes."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
        and path.name != ".lock"
        and "rocksdb" not in path.parent.name
        and "__transaction_state" not in str(path)  # the coordinator bumps its epoch at open
    } | {
        str(path.relative_to(directory)): b"<dir>"
        for path in sorted(directory.rglob("*"))
        if path.is_dir()
    }


def test_restore_does_not_decode_values(open_manager: OpenManager, tmp_path: Path) -> None:
    write_changelog(tmp_path / "state", [(b"k%d" % i, b"v") for i in range(100)])

    class Counting(BytesSerde):
        decoded = 0

        def deserialize(self, data: bytes, /) -> bytes:
            Counting.decoded += 1
            return data

    open_manager().store("kv", key_serde=BytesSerde(), value_serde=Counting())
    assert Counting.decoded == 0


# ---------------------------------------------------------------- StoreChangelogReaderTest


def test_should_restore_from_beginning_and_report_to_listeners(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    batches: list[Pairs] = [[(b"k%d" % i, b"v")] for i in range(25)]
    end = write_changelog(tmp_path / "state", *batches)
    recorder = Recorder()
    progress: list[RestoreProgress] = []
    open_bytes(
        open_manager(), "full", restore_listener=recorder, progress=progress.append, batch=10
    )
    assert recorder.calls[0] == ("start", "kv", 0, 0, end)
    assert [c for c in recorder.calls if c[0] == "batch"] == [
        ("batch", 9, 10),
        ("batch", 19, 10),
        ("batch", 24, 5),
    ]
    assert recorder.calls[-1] == ("end", 25)
    assert progress[-1].records_restored == 25
    assert progress[-1].fraction == 1.0
    assert [p.offset for p in progress] == [10, 20, 25]


def test_a_write_batch_closes_at_the_byte_bound_before_the_record_bound(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    value = b"v" * 1000
    batches: list[Pairs] = [[(b"k%d" % i, value)] for i in range(6)]
    write_changelog(tmp_path / "state", *batches)
    recorder = Recorder()
    store = open_manager().store(
        "kv",
        key_serde=BytesSerde(),
        value_serde=BytesSerde(),
        # each log batch holds one ~1,000-byte record: 2,500 bytes close a WriteBatch after 3
        config=StoreConfig(restore_batch_records=10_000, restore_batch_bytes=2_500),
        restore_listener=recorder,
    )
    assert [c for c in recorder.calls if c[0] == "batch"] == [("batch", 2, 3), ("batch", 5, 3)]
    assert dict(store.items()) == {b"k%d" % i: value for i in range(6)}


def test_should_restore_from_the_applied_offset(open_manager: OpenManager, tmp_path: Path) -> None:
    state = tmp_path / "state"
    manager = open_manager()
    store = open_bytes(manager, "incremental")
    store.put_all([(b"k%d" % i, b"v1") for i in range(20)])
    store.commit()
    manager.close()
    end = write_changelog(state, [(b"k1", b"v2")], [(b"k2", None)])
    recorder = Recorder()
    manager = open_manager()
    store = open_bytes(manager, "incremental", restore_listener=recorder)
    assert recorder.calls[0] == ("start", "kv", 0, 20, end)
    assert recorder.calls[-1] == ("end", 2)
    result = manager.restore_results("kv")[0]
    assert (result.start_offset, result.end_offset, result.rebuilt) == (20, 22, False)
    assert store[b"k1"] == b"v2"
    assert b"k2" not in store
    assert len(store) == 19


def test_should_complete_with_nothing_to_restore_when_up_to_date(
    open_manager: OpenManager,
) -> None:
    manager = open_manager()
    store = open_bytes(manager, "incremental")
    store[b"a"] = b"1"
    store.commit()
    manager.close()
    recorder = Recorder()
    manager = open_manager()
    open_bytes(manager, "incremental", restore_listener=recorder)
    assert recorder.calls == [("start", "kv", 0, 1, 1), ("end", 0)]


@pytest.mark.parametrize("mode", MODES)
def test_should_restore_when_the_end_of_the_log_is_a_gap(
    open_manager: OpenManager, tmp_path: Path, mode: RestoreMode
) -> None:
    """A compacted tail leaves no record at ``log_end_offset - 1``: restore still completes there."""
    state = tmp_path / "state"
    with Log.open(state / "kv-changelog-0", config=TINY_LOG) as log:
        log.append([(b"keep", b"1")])
        log.append([(b"gone", b"1")])
        log.append([(b"gone", None)])
        log.roll()
        clean_log(log, force=True)  # removes the put; the tombstone survives its first pass
        clean_log(log, force=True)  # delete_retention_ms=0: the tombstone goes too
        end = log.log_end_offset
        assert end == 3
        assert [r.offset for r in log.read(log.log_start_offset)] == [0]
    manager = open_manager()
    store = open_bytes(manager, mode)
    assert dict(store.items()) == {b"keep": b"1"}
    result = manager.restore_results("kv")[0]
    assert result.end_offset == 3
    manager.close()
    if mode == "full":  # a switch to incremental rebuilds first
        manager = open_manager()
        open_bytes(manager, "incremental")
        assert manager.restore_results("kv")[0].rebuilt
        manager.close()
    # The applied offset reached the end: an incremental reopen has nothing to replay.
    manager = open_manager()
    open_bytes(manager, "incremental")
    assert manager.restore_results("kv")[0].start_offset == 3


def test_should_rebuild_when_the_applied_offset_is_beyond_the_log_end_under_a_loose_flush_policy(
    open_manager: OpenManager, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``flush_messages > 1`` a power cut may take the changelog's tail (documented):
    a RocksDB ahead of its changelog is rebuilt with a warning (one fsync per append:
    refused, see test_should_restore_over_pre_existing_files)."""
    state = tmp_path / "state"
    manager = open_manager(log_config=attrs.evolve(TINY_LOG, flush_messages=10))
    store = open_bytes(manager, "incremental")
    for i in range(5):
        store[b"k%d" % i] = b"v"
        store.commit()
    manager.close()
    shutil.rmtree(state / "kv-changelog-0")
    write_changelog(state, [(b"other", b"x")])
    manager = open_manager(log_config=attrs.evolve(TINY_LOG, flush_messages=10))
    with caplog.at_level(logging.WARNING):
        store = open_bytes(manager, "incremental")
    assert "beyond the log end offset" in caplog.text
    assert manager.restore_results("kv")[0].rebuilt
    assert dict(store.items()) == {b"other": b"x"}


def test_plan_restore_cases() -> None:
    plan = plan_restore(
        "incremental", applied_offset=5, has_data=True, log_start_offset=0, log_end_offset=9
    )
    assert (plan.start_offset, plan.rebuild) == (5, False)
    plan = plan_restore(
        "incremental", applied_offset=2, has_data=True, log_start_offset=4, log_end_offset=9
    )
    assert (plan.start_offset, plan.rebuild) == (4, True)
    assert "below the log start offset" in plan.reason
    plan = plan_restore(
        "incremental", applied_offset=10, has_data=True, log_start_offset=0, log_end_offset=9
    )
    assert plan.rebuild
    plan = plan_restore(
        "incremental", applied_offset=None, has_data=True, log_start_offset=0, log_end_offset=9
    )
    assert (plan.start_offset, plan.rebuild) == (0, True)
    plan = plan_restore(
        "incremental", applied_offset=None, has_data=False, log_start_offset=3, log_end_offset=9
    )
    assert (plan.start_offset, plan.rebuild) == (3, False)
    plan = plan_restore(
        "full", applied_offset=5, has_data=True, log_start_offset=0, log_end_offset=9
    )
    assert (plan.start_offset, plan.rebuild) == (0, True)


@pytest.mark.parametrize("mode", MODES)
def test_delete_everything_but_the_changelog_files_and_reopen(
    open_manager: OpenManager, tmp_path: Path, mode: RestoreMode
) -> None:
    state = tmp_path / "state"
    manager = open_manager()
    store = manager.store("users", config=StoreConfig(restore_mode=mode))
    model: dict[str, Any] = {}
    for round_ in range(30):
        for i in range(20):
            key = f"user-{(round_ * 7 + i) % 50}"
            if (round_ + i) % 5 == 0:
                store.delete(key)
                model.pop(key, None)
            else:
                store[key] = {"round": round_, "i": i}
                model[key] = {"round": round_, "i": i}
        store.commit()
    manager.close()
    kept = 0
    for path in sorted(state.rglob("*"), reverse=True):
        if path.is_file() and path.suffix == ".log" and "-changelog-" in path.parent.name:
            kept += 1
            continue
        if path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()
        else:
            path.unlink()
    assert kept > 1  # several segments survived, nothing else did
    assert sorted(p.name for p in state.iterdir()) == ["users-changelog-0"]
    store = open_manager().store("users", config=StoreConfig(restore_mode=mode))
    assert dict(store.items()) == model


def test_cleaner_keeps_tombstones_an_incremental_restore_still_needs(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """RocksDB (WAL off) may fall back to its last flush; the tombstones above it must remain."""
    state = tmp_path / "state"
    incremental = StoreConfig(restore_mode="incremental", flush_interval_records=10**9)
    manager = open_manager()
    store = manager.store("kv", config=incremental)
    store["doomed"] = 1
    store["kept"] = 2
    store.commit()
    manager.close()  # flushed: RocksDB durably holds both keys at applied offset 2
    shutil.copytree(state / "kv-rocksdb-0", tmp_path / "durable")
    manager = open_manager()
    store = manager.store("kv", config=incremental)
    assert store.changelog.cleaning_barrier_offset == 2
    store.delete("doomed")
    store.commit()  # not flushed: RocksDB could lose this
    log = store.changelog
    log.roll()
    clean_log(log, force=True)
    clean_log(log, force=True)
    assert (b"doomed", None) in [(r.key, r.value) for r in log.read(log.log_start_offset)]
    manager.crash()
    shutil.rmtree(state / "kv-rocksdb-0")
    shutil.copytree(tmp_path / "durable", state / "kv-rocksdb-0")
    store = open_manager().store("kv", config=incremental)
    assert dict(store.items()) == {"kept": 2}


def test_full_restore_holds_no_cleaning_barrier(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    store["a"] = 1
    store.commit()
    store.flush()
    assert store.changelog.cleaning_barrier_offset is None


@pytest.mark.parametrize("mode", MODES)
def test_rocksdb_ahead_of_the_changelog_after_a_power_cut_is_rebuilt(
    open_manager: OpenManager, tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: RestoreMode
) -> None:
    """A power cut can take a changelog tail that RocksDB already persisted.

    Under a looser flush policy (no fsync per append) RocksDB may flush a
    commit whose batch never reached the disk; the stored applied offset is
    then beyond the log end offset.  The next open must give exactly the state
    the surviving changelog implies (a warning and a rebuild when incremental).
    """
    state = tmp_path / "state"
    loose = LogConfig(segment_bytes=4096, index_interval_bytes=128, flush_messages=2**62)
    manager = open_manager(log_config=loose)
    store = open_bytes(manager, mode)
    for i in range(6):
        store[b"k%d" % i] = b"v%d" % i
        store[b"shared"] = b"%d" % i
        store.commit()
    store.flush()  # RocksDB holds all 12 records and applied offset 12 on disk
    manager.crash()
    # The power cut: the last two commits never left the page cache.
    with Log.open(state / "kv-changelog-0", config=loose) as log:
        log.truncate_to(8)
    manager = open_manager(log_config=loose)
    with caplog.at_level(logging.WARNING):
        store = open_bytes(manager, mode)
    result = manager.restore_results("kv")[0]
    assert result.rebuilt
    assert (result.start_offset, result.end_offset) == (0, 8)
    if mode == "incremental":
        assert "applied offset 12 is beyond the log end offset 8" in caplog.text
    assert dict(store.items()) == {
        b"k0": b"v0",
        b"k1": b"v1",
        b"k2": b"v2",
        b"k3": b"v3",
        b"shared": b"3",
    }


def _engine_opener(path: Path) -> Any:
    return lambda: RocksDBEngine.open(path, config=RocksDBConfig(), cache=None)


def _seed_engine(path: Path, applied: int) -> None:
    engine = RocksDBEngine.open(path, config=RocksDBConfig(), cache=None)
    engine.write([(b"old", b"x")], applied)
    engine.close()


@pytest.mark.parametrize(
    ("mode", "applied", "kept", "reason"),
    [
        ("full", 1, False, "full restore"),
        ("incremental", 1, True, "incremental"),
    ],
)
def test_open_engine_keeps_or_rebuilds_as_the_policy_says(
    tmp_path: Path, mode: RestoreMode, applied: int, kept: bool, reason: str
) -> None:
    end = write_changelog(tmp_path, [(b"a", b"1"), (b"b", b"2")])
    engine_path = tmp_path / "kv-rocksdb-0"
    _seed_engine(engine_path, applied)
    destroyed: list[Path] = []

    def destroy() -> None:
        destroyed.append(engine_path)
        RocksDBEngine.destroy(engine_path)

    with Log.open(tmp_path / "kv-changelog-0", config=TINY_LOG) as log:
        engine, plan = open_engine(
            mode, log, open_=_engine_opener(engine_path), destroy=destroy, label="[kv-0]"
        )
        try:
            assert plan.mode == mode
            assert plan.rebuild is not kept
            assert reason in plan.reason
            assert plan.start_offset == (applied if kept else 0)
            assert (engine.get(b"old") == b"x") is kept
            assert destroyed == ([] if kept else [engine_path])
            result = restore_into(
                engine,
                log,
                plan,
                store="kv",
                partition=0,
                batch_records=10,
                listener=None,
                progress=None,
            )
            assert (result.start_offset, result.end_offset) == (plan.start_offset, end)
            assert engine.applied_offset() == end
            assert log.cleaning_barrier_offset == (end if mode == "incremental" else None)
        finally:
            engine.close()


def test_only_incremental_restore_holds_the_cleaning_barrier() -> None:
    for mode, holds in (("full", False), ("incremental", True)):
        plan = plan_restore(
            mode,  # type: ignore[arg-type]
            applied_offset=None,
            has_data=False,
            log_start_offset=0,
            log_end_offset=0,
        )
        assert plan.hold_cleaning_barrier is holds
