"""Bad input: typed errors, and nothing written (the changelog's files and offsets are unchanged).

Every case checks, besides the error type, that the partition directory's
``.log`` files have the same sizes and the log end offset is the same as
before the bad call, and (for stores) that the store still works and its
content after a reopen is what was committed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog import CleanerConfig, LogConfig
from changelog.errors import (
    ChangelogError,
    InvalidConfigError,
    InvalidRecordError,
    LogClosedError,
    RecordTooLargeError,
)
from changelog.log.log import Log
from statestore.config import RocksDBConfig, StoreConfig
from statestore.errors import (
    InvalidStateStoreError,
    InvalidStoreConfigError,
    RecordTooLargeForLogError,
    SerializationError,
    StateStoreError,
)
from statestore.manager import StateManager
from tests.reliability import stats


def _files(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(directory.glob("*.log"))}


@pytest.fixture
def log(tmp_path: Path) -> Any:
    with Log.open(tmp_path / "bad-0", config=LogConfig(max_message_bytes=2000)) as opened:
        opened.append([(b"k", b"v")])
        yield opened


BAD_RECORDS: list[tuple[str, Any]] = [
    ("str key", [("k", b"v")]),
    ("int value", [(b"k", 5)]),
    ("str value", [(b"k", "v")]),
    ("not a pair", [b"kv"]),
    ("triple", [(b"k", b"v", b"x")]),
    ("not a list", 42),
    ("bytearray-like junk", [(object(), b"v")]),
    ("None key on a compacted log", [(None, b"v")]),
]


@pytest.mark.parametrize(("case", "records"), BAD_RECORDS, ids=[c for c, _ in BAD_RECORDS])
def test_bad_records_are_rejected_before_anything_is_written(
    log: Any, case: str, records: Any
) -> None:
    before_files, before_end = _files(log.dir), log.log_end_offset
    error: BaseException | None = None
    try:
        log.append(records)
    except (ChangelogError, TypeError) as exc:
        error = exc
    unchanged = _files(log.dir) == before_files and log.log_end_offset == before_end
    typed = isinstance(error, InvalidRecordError)
    stats.record("bad-input.log", trials=1, faults=1, wrong=int(not (typed and unchanged)))
    assert error is not None, f"{case}: accepted (and written: {not unchanged})"
    assert typed, f"{case}: untyped {type(error).__name__}"
    assert unchanged


def test_oversized_batch_is_rejected_before_anything_is_written(log: Any) -> None:
    before_files, before_end = _files(log.dir), log.log_end_offset
    with pytest.raises(RecordTooLargeError) as info:
        log.append([(b"k", b"x" * 1500), (b"l", b"y" * 1500)])
    assert info.value.limit == 2000
    assert info.value.size > 2000
    unchanged = _files(log.dir) == before_files and log.log_end_offset == before_end
    stats.record("bad-input.log", trials=1, faults=1, wrong=int(not unchanged))
    assert unchanged
    log.append([(b"k", b"fine")])  # still usable
    assert log.log_end_offset == before_end + 1


def test_append_to_a_closed_log_is_a_typed_error(tmp_path: Path) -> None:
    opened = Log.open(tmp_path / "closed-0")
    opened.close()
    with pytest.raises(LogClosedError):
        opened.append([(b"k", b"v")])
    stats.record("bad-input.log", trials=1, faults=1)


LOG_CONFIGS: list[dict[str, Any]] = [
    {"segment_bytes": 0},
    {"segment_bytes": -1},
    {"segment_bytes": "big"},
    {"segment_bytes": True},
    {"segment_bytes": 2**31},
    {"retention_ms": -2},
    {"retention_bytes": -5},
    {"min_cleanable_dirty_ratio": 1.5},
    {"min_cleanable_dirty_ratio": math.nan},
    {"cleanup_policy": "bogus"},
    {"min_compaction_lag_ms": 10, "max_compaction_lag_ms": 5},
    {"flush_messages": 0},
    {"index_interval_bytes": -1},
    {"segment_index_bytes": 4},
]


@pytest.mark.parametrize("kwargs", LOG_CONFIGS, ids=[str(k) for k in LOG_CONFIGS])
def test_invalid_log_config_is_rejected_at_construction(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError) as info:
        LogConfig(**kwargs)
    assert info.value.setting in kwargs
    assert isinstance(info.value, ValueError)
    stats.record("bad-input.config", trials=1, faults=1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threads": 0},
        {"io_max_bytes_per_second": 0},
        {"dedupe_buffer_size_bytes": 10},
        {"dedupe_buffer_load_factor": 2.0},
    ],
)
def test_invalid_cleaner_config_is_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        CleanerConfig(**kwargs)
    stats.record("bad-input.config", trials=1, faults=1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: StoreConfig(restore_mode="bogus"),  # type: ignore[arg-type]
        lambda: StoreConfig(restore_batch_records=0),
        lambda: RocksDBConfig(write_buffer_size_bytes=1),
        lambda: RocksDBConfig(compression="lz77"),  # type: ignore[arg-type]
    ],
    ids=["restore_mode", "restore_batch_records", "write_buffer", "compression"],
)
def test_invalid_store_config_is_rejected(make: Callable[[], object]) -> None:
    with pytest.raises(InvalidStoreConfigError):
        make()
    stats.record("bad-input.config", trials=1, faults=1)


def test_a_directory_that_is_not_a_partition_name_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError):
        Log.open(tmp_path / "no_partition_number")
    assert not (tmp_path / "no_partition_number").exists()
    stats.record("bad-input.config", trials=1, faults=1)


# ------------------------------------------------------------------------------ stores


@attrs.frozen
class Profile:
    name: str
    age: int


class Unserializable:
    pass


@pytest.fixture
def manager(tmp_path: Path) -> Any:
    with StateManager(tmp_path / "state", log_config=LogConfig(max_message_bytes=4096)) as opened:
        yield opened


def _committed(store: Any) -> tuple[dict[str, int], int]:
    log = store.changelog
    return _files(log.dir), log.log_end_offset


STORE_CASES: list[tuple[str, dict[str, Any], Any, Any]] = [
    ("None key", {}, None, {"a": 1}),
    ("int key for str serde", {}, 5, {"a": 1}),
    ("bytes key for str serde", {}, b"k", {"a": 1}),
    ("unserializable value", {}, "k", Unserializable()),
    ("set value for msgpack", {}, "k", {1, 2}),
    ("str value for bytes store", {"value_type": bytes}, "k", "text"),
    ("str value for int store", {"value_type": int}, "k", "12"),
    ("float value for int store", {"value_type": int}, "k", 1.5),
    ("dict value for attrs store", {"value_type": Profile}, "k", {"name": "x", "age": 1}),
    ("str key for int keys", {"key_type": int}, "k", {"a": 1}),
]


@pytest.mark.parametrize(
    ("case", "store_kwargs", "key", "value"), STORE_CASES, ids=[c[0] for c in STORE_CASES]
)
def test_bad_store_input_is_a_typed_error_and_nothing_is_written(
    manager: Any, case: str, store_kwargs: dict[str, Any], key: Any, value: Any
) -> None:
    store = manager.store("s", **store_kwargs)
    good_key = 1 if store_kwargs.get("key_type") is int else "good"
    good_values: dict[object, object] = {bytes: b"v", int: 7, Profile: Profile("p", 3)}
    good_value = good_values.get(store_kwargs.get("value_type"), {"ok": True})
    store.put(good_key, good_value)
    store.commit()
    before = _committed(store)
    with pytest.raises(SerializationError) as info:
        store.put(key, value)
    assert info.value.role in ("key", "value")
    assert store.pending_count == 0, f"{case}: the bad write was buffered"
    store.commit()
    unchanged = _committed(store) == before
    stats.record("bad-input.store", trials=1, faults=1, wrong=int(not unchanged))
    assert unchanged, f"{case}: something was written"
    assert store.get(good_key) == good_value


def test_value_over_max_message_bytes_is_rejected_before_anything_is_written(manager: Any) -> None:
    store = manager.store("big", value_type=bytes)
    before = _committed(store)
    with pytest.raises(RecordTooLargeForLogError):
        store.put("k", b"x" * 5000)
    assert store.pending_count == 0
    store.commit()
    unchanged = _committed(store) == before
    stats.record("bad-input.store", trials=1, faults=1, wrong=int(not unchanged))
    assert unchanged


def test_commit_whose_batch_is_too_large_writes_nothing_and_keeps_the_writes(manager: Any) -> None:
    store = manager.store("batch", value_type=bytes)
    before = _committed(store)
    for i in range(4):
        store.put(f"k{i}", b"x" * 1500)  # each fits, the batch does not
    with pytest.raises(StateStoreError) as info:
        store.commit()
    unchanged = _committed(store) == before
    stats.record("bad-input.store", trials=1, faults=1, wrong=int(not unchanged))
    assert unchanged, "a partial commit was written"
    assert getattr(info.value, "written", False) is False
    assert store.pending_count == 4, (
        "the writes should stay buffered (CommitFailedError(written=False))"
    )
    store.abort()
    store.put("k0", b"small")
    store.commit()
    assert store.get("k0") == b"small"


@pytest.mark.parametrize("name", ["", "a/b", "..", ".", "x" * 201, "white space"])
def test_invalid_store_names_are_rejected(manager: Any, name: str) -> None:
    with pytest.raises(InvalidStoreConfigError):
        manager.store(name)
    stats.record("bad-input.config", trials=1, faults=1)


def test_invalid_partition_counts_are_rejected(manager: Any) -> None:
    for partitions in (0, -1, True, 1.5):
        with pytest.raises(InvalidStoreConfigError):
            manager.store("p", partitions=partitions)
    stats.record("bad-input.config", trials=4, faults=4)


def test_a_closed_store_is_a_typed_error(tmp_path: Path) -> None:
    with StateManager(tmp_path / "state") as opened:
        store = opened.store("s")
    with pytest.raises(InvalidStateStoreError) as info:
        store.put("k", 1)
    assert info.value.state == "closed"
    stats.record("bad-input.store", trials=1, faults=1)
