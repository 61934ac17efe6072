"""The StateManager: directory lock, layout, store registry, commit, close, crash, cleaner."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from changelog.config import CleanerConfig, LogConfig
from statestore.config import StateManagerConfig, StoreConfig
from statestore.errors import (
    InvalidStateStoreError,
    InvalidStoreConfigError,
    StateDirLockedError,
    StoreEngineError,
)
from statestore.manager import StateManager
from statestore.serdes import IntSerde
from statestore.stores.lifecycle import StoreState
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import NO_CLEANER, TINY_LOG, engine_of


def test_layout_is_changelog_and_rocksdb_dirs_side_by_side(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    manager = open_manager()
    manager.store("users")
    manager.store("orders", partitions=2)
    names = sorted(p.name for p in (tmp_path / "state").iterdir())
    assert names == [
        ".lock",
        "__transaction_state-0",
        "orders-changelog-0",
        "orders-changelog-1",
        "orders-rocksdb-0",
        "orders-rocksdb-1",
        "orders.metadata.json",
        "users-changelog-0",
        "users-rocksdb-0",
        "users.metadata.json",
    ]
    assert manager.stores["users"].changelog.topic == "users-changelog"


def test_second_owner_in_the_same_process_gets_a_typed_error(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    manager = open_manager()
    with pytest.raises(StateDirLockedError) as info:
        StateManager(tmp_path / "state", config=NO_CLEANER)
    assert info.value.path == tmp_path / "state" / ".lock"
    manager.close()
    StateManager(tmp_path / "state", config=NO_CLEANER).close()


def test_second_owner_in_another_process_gets_a_typed_error(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    open_manager()
    code = (
        "import sys\n"
        "from statestore.manager import StateManager\n"
        "from statestore.errors import StateDirLockedError\n"
        "try:\n"
        f"    StateManager({str(tmp_path / 'state')!r})\n"
        "except StateDirLockedError as exc:\n"
        "    print('locked', exc.holder)\n"
        "    sys.exit(3)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 3, result.stderr
    assert "locked pid" in result.stdout


def test_store_registry(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("kv")
    assert manager.store("kv") is store
    with pytest.raises(InvalidStoreConfigError):
        manager.store("kv", key_serde=IntSerde())
    with pytest.raises(InvalidStoreConfigError):
        manager.store("kv", partitions=2)
    for bad in ["", "a/b", "..", "with space", "x" * 300]:
        with pytest.raises(InvalidStoreConfigError):
            manager.store(bad)
    with pytest.raises(InvalidStoreConfigError):
        manager.store("p", partitions=0)
    with pytest.raises(InvalidStoreConfigError):
        manager.store("t", value_type=float)
    with pytest.raises(InvalidStoreConfigError):
        manager.store("t", value_type=int, value_serde=IntSerde())
    assert list(manager) == ["kv"]


def test_commit_commits_every_store(open_manager: OpenManager) -> None:
    manager = open_manager()
    a = manager.store("a")
    b = manager.store("b")
    a["x"] = 1
    b["y"] = 2
    b["z"] = 3
    assert manager.commit() == 3
    manager.close()
    manager = open_manager()
    assert manager.store("a")["x"] == 1
    assert dict(manager.store("b").items()) == {"y": 2, "z": 3}


def test_close_discards_uncommitted_writes_with_a_warning(
    open_manager: OpenManager, caplog: pytest.LogCaptureFixture
) -> None:
    manager = open_manager()
    store = manager.store("kv")
    store["committed"] = 1
    manager.commit()
    store["uncommitted"] = 2
    with caplog.at_level(logging.WARNING):
        manager.close()
    assert "uncommitted" in caplog.text
    assert manager.state is StoreState.CLOSED
    with pytest.raises(InvalidStateStoreError):
        manager.store("kv")
    with pytest.raises(InvalidStateStoreError):
        manager.commit()
    assert dict(open_manager().store("kv").items()) == {"committed": 1}


def test_context_manager_closes_and_releases_every_lock(tmp_path: Path) -> None:
    with StateManager(tmp_path / "s", config=NO_CLEANER) as manager:
        manager.store("kv")["a"] = 1
        manager.commit()
    assert (tmp_path / "s" / "kv-changelog-0" / ".kafka_cleanshutdown").exists()
    with StateManager(tmp_path / "s", config=NO_CLEANER) as manager:
        assert manager.store("kv")["a"] == 1


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_crash_loses_only_uncommitted_writes(open_manager: OpenManager, mode: str) -> None:
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    manager = open_manager()
    store = manager.store("kv", config=config)
    for i in range(10):
        store[f"k{i}"] = i
        manager.commit()
    store["lost"] = 1
    manager.crash()
    with pytest.raises(InvalidStateStoreError):
        store.get("k1")
    manager = open_manager()
    store = manager.store("kv", config=config)
    assert dict(store.items()) == {f"k{i}": i for i in range(10)}


def test_background_cleaner_compacts_and_state_survives(tmp_path: Path) -> None:
    config = StateManagerConfig(
        cleaner=CleanerConfig(backoff_ms=10, dedupe_buffer_size_bytes=1 << 20),
        block_cache_size_bytes=1 << 20,
    )
    log_config = LogConfig(
        segment_bytes=2048, min_cleanable_dirty_ratio=0.01, delete_retention_ms=0
    )
    with StateManager(tmp_path / "s", config=config, log_config=log_config) as manager:
        store = manager.store("kv", key_serde=IntSerde())
        for round_ in range(40):
            store.put_all([(k, round_) for k in range(10)])
            manager.commit()
        deadline = time.monotonic() + 20
        assert manager.cleaner is not None
        while not manager.cleaner.history and time.monotonic() < deadline:
            time.sleep(0.02)
        assert manager.cleaner.history, "the cleaner never ran"
        expected = dict(store.items())
    with StateManager(tmp_path / "s", config=NO_CLEANER, log_config=log_config) as manager:
        store = manager.store("kv", key_serde=IntSerde())
        assert dict(store.items()) == expected == dict.fromkeys(range(10), 39)
        records = sum(1 for _ in store.changelog.read(store.changelog.log_start_offset))
        assert records < 400


def test_manager_log_config_default_applies(open_manager: OpenManager) -> None:
    manager = open_manager(log_config=TINY_LOG)
    store = manager.store("kv")
    assert store.changelog.config == TINY_LOG


def test_a_failed_store_is_reopened_from_its_changelog(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("kv")
    store.put_all([(f"k{i}", i) for i in range(100)])
    store.commit()
    engine = engine_of(store)

    def broken(*_args: object, **_kwargs: object) -> None:
        raise StoreEngineError(engine.path, "write", "simulated")

    engine.write = broken
    store.put_all([(f"k{i}", -i) for i in range(100)])
    with pytest.raises(StoreEngineError):
        store.commit()
    assert store.state is StoreState.FAILED
    with pytest.raises(InvalidStateStoreError) as info:
        store.get("k1")
    assert info.value.state == "failed"
    reopened = manager.store("kv")
    assert reopened is not store
    assert dict(reopened.items()) == {f"k{i}": -i for i in range(100)}  # the changelog had it
