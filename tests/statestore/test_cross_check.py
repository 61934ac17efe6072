"""RocksDB's durable applied offset held against the changelog (restore.check_applied_offset).

One test per row of the table in statestore/stores/restore.py's docstring, then the
open itself: an implausible combination is a typed error that changed nothing,
an explained one rebuilds with a warning, a consistent one replays from it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import pytest

from changelog.config import LogConfig
from changelog.log.log import Log
from statestore.config import RestoreMode, StoreConfig
from statestore.errors import AppliedOffsetMismatchError, RestoreError
from statestore.stores.restore import check_applied_offset
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import TINY_LOG

COMPACT = LogConfig()
LOOSE = LogConfig(flush_messages=100)
DELETE = LogConfig(cleanup_policy="compact,delete")


def check(
    applied: int | None,
    *,
    mode: RestoreMode = "incremental",
    start: int = 10,
    end: int = 50,
    rp: int = 40,
    config: LogConfig = COMPACT,
) -> str | None:
    return check_applied_offset(
        mode,
        applied,
        log_start_offset=start,
        log_end_offset=end,
        recovery_point=rp,
        config=config,
        store="kv",
        partition=3,
    )


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_beyond_the_log_end_under_one_fsync_per_append_is_refused(mode: RestoreMode) -> None:
    with pytest.raises(AppliedOffsetMismatchError) as info:
        check(51, mode=mode)
    error = info.value
    assert isinstance(error, RestoreError)
    assert (error.store, error.partition, error.applied_offset) == ("kv", 3, 51)
    assert (error.log_start_offset, error.log_end_offset, error.recovery_point) == (10, 50, 40)
    assert "flush_messages=1" in error.reason


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_beyond_the_log_end_under_a_loose_flush_policy_is_explained(mode: RestoreMode) -> None:
    warning = check(51, mode=mode, config=LOOSE)
    assert warning is not None
    assert "flush_messages=100" in warning


def test_below_the_log_start_with_retention_is_explained() -> None:
    warning = check(5, config=DELETE)
    assert warning is not None
    assert "retention" in warning


def test_below_the_log_start_with_compaction_only_is_refused() -> None:
    with pytest.raises(AppliedOffsetMismatchError) as info:
        check(5)
    assert "only retention could move the log start" in info.value.reason


@pytest.mark.parametrize("config", [COMPACT, DELETE])
def test_below_the_log_start_in_full_mode_is_harmless(config: LogConfig) -> None:
    assert check(5, mode="full", config=config) is None


@pytest.mark.parametrize("applied", [None, 10, 39, 40, 45, 50])
@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_inside_the_log_is_consistent_on_either_side_of_the_recovery_point(
    applied: int | None, mode: RestoreMode
) -> None:
    assert check(applied, mode=mode) is None


# ----------------------------------------------------------------------------- the open


def test_a_deleted_changelog_directory_is_refused_not_opened_empty(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """Issue 13: 'OK for a deleted changelog directory (the app then opens an empty store)'.

    The metadata file refuses a missing directory; here the directory is emptied
    instead (every segment and checkpoint gone), which only RocksDB's applied
    offset can tell: the cross-check refuses it in both modes.
    """
    state = tmp_path / "state"
    for mode in ("full", "incremental"):
        config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
        manager = open_manager()
        store = manager.store(f"kv-{mode}", config=config)
        for i in range(10):
            store[f"k{i}"] = i
            store.commit()
        manager.close()
        changelog = state / f"kv-{mode}-changelog-0"
        shutil.rmtree(changelog)
        changelog.mkdir()
        manager = open_manager()
        with pytest.raises(AppliedOffsetMismatchError) as info:
            manager.store(f"kv-{mode}", config=config)
        assert (info.value.applied_offset, info.value.log_end_offset) == (10, 0)
        # The loader ran before the cross-check (it made an empty active segment and
        # the close wrote checkpoints): no record was added or removed, RocksDB is
        # untouched, and the refusal repeats at every open.
        with pytest.raises(AppliedOffsetMismatchError):
            manager.store(f"kv-{mode}", config=config)
        with Log.open(changelog, config=TINY_LOG) as log:
            assert log.log_end_offset == 0
        manager.close()


def test_an_applied_offset_above_the_recovery_point_replays_from_it(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """After a crash the recovery point trails the log end; RocksDB flushed in between
    is consistent: the incremental restore starts at its applied offset."""
    incremental = StoreConfig(restore_mode="incremental", flush_interval_records=1)
    manager = open_manager()
    store = manager.store("kv", config=incremental)
    for i in range(30):
        store[f"k{i}"] = i
        store.commit()
    manager.crash()
    with Log.open(tmp_path / "state" / "kv-changelog-0", config=TINY_LOG) as log:
        recovery_point, end = log.recovery_point, log.log_end_offset
    manager = open_manager()
    store = manager.store("kv", config=incremental)
    result = manager.restore_results("kv")[0]
    assert not result.rebuilt
    assert result.start_offset <= end
    assert dict(store.items()) == {f"k{i}": i for i in range(30)}
    assert recovery_point <= end


def test_retention_past_the_applied_offset_rebuilds_with_a_warning(
    open_manager: OpenManager, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = attrs.evolve(TINY_LOG, cleanup_policy="compact,delete", retention_bytes=0)
    incremental = StoreConfig(restore_mode="incremental", flush_interval_records=1_000_000)
    manager = open_manager(log_config=config)
    store = manager.store("kv", value_type=bytes, config=incremental)
    store["early"] = b"x"
    store.commit()
    manager.close()  # RocksDB durable at offset 1
    state = tmp_path / "state"
    shutil.copytree(state / "kv-rocksdb-0", tmp_path / "old-rocksdb")
    manager = open_manager(log_config=config)
    store = manager.store("kv", value_type=bytes, config=incremental)
    for i in range(40):
        store[f"k{i}"] = b"v" * 200
        store.commit()
    log = store.changelogs[0]
    assert log.delete_old_segments() > 0
    start = log.log_start_offset
    assert start > 1
    manager.close()
    shutil.rmtree(state / "kv-rocksdb-0")
    shutil.copytree(tmp_path / "old-rocksdb", state / "kv-rocksdb-0")
    manager = open_manager(log_config=config)
    with caplog.at_level("WARNING"):
        store = manager.store("kv", value_type=bytes, config=incremental)
    assert "retention" in caplog.text
    assert manager.restore_results("kv")[0].rebuilt
    assert "early" not in dict(store.items())
