"""The timestamped key-value store: the timestamp travels as the changelog record's CreateTime."""

from __future__ import annotations

import pytest

from statestore.config import StoreConfig
from statestore.errors import (
    InvalidStoreConfigError,
    InvalidTimestampError,
    StoreMetadataMismatchError,
)
from statestore.serdes import IntSerde
from statestore.stores.time.timestamped import ValueAndTimestamp
from tests.statestore.conftest import OpenManager


def test_put_get_with_timestamp(open_manager: OpenManager) -> None:
    clock = [5_000]
    manager = open_manager(clock=lambda: clock[0])
    store = manager.timestamped_store("ts")
    store.put("a", {"n": 1}, timestamp_ms=42)
    store["b"] = 2  # the clock's time
    assert store.get_with_timestamp("a") == ValueAndTimestamp({"n": 1}, 42)
    assert store.get_with_timestamp("b") == ValueAndTimestamp(2, 5_000)
    assert store.get("a") == {"n": 1}
    assert store.get("zz", "dflt") == "dflt"
    assert "a" in store
    assert "zz" not in store
    with pytest.raises(KeyError):
        store["zz"]
    store.commit()
    assert list(store.items()) == [
        ("a", ValueAndTimestamp({"n": 1}, 42)),
        ("b", ValueAndTimestamp(2, 5_000)),
    ]
    assert list(store.range("b", None)) == [("b", ValueAndTimestamp(2, 5_000))]
    assert [k for k, _ in store.range(reverse=True)] == ["b", "a"]
    assert len(store) == 2
    assert store.delete("a") == ValueAndTimestamp({"n": 1}, 42)
    assert store.get("a") is None
    store.commit()


def test_changelog_holds_plain_value_and_create_time(open_manager: OpenManager) -> None:
    manager = open_manager(clock=lambda: 9)
    store = manager.timestamped_store("ts", value_serde=IntSerde())
    store.put("a", 5, timestamp_ms=1234)
    store.put("b", None)
    store.commit()
    (log,) = store.changelogs
    records = [(r.key, r.value, r.timestamp_ms, r.headers) for r in log.read(0)]
    # Kafka Streams' timestamped changelog: plain value bytes, timestamp as CreateTime, no headers
    assert records == [(b"a", IntSerde().serialize(5), 1234, ()), (b"b", None, 9, ())]


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_restore_puts_the_timestamp_back(open_manager: OpenManager, mode: str) -> None:
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    manager = open_manager()
    store = manager.timestamped_store("ts", config=config)
    for n in range(50):
        store.put(f"k{n % 7}", n, timestamp_ms=1_000 + n)
        if n % 5 == 4:
            store.commit()
    store.put("uncommitted", 1, timestamp_ms=1)
    expected = {f"k{n % 7}": ValueAndTimestamp(n, 1_000 + n) for n in range(50)}
    manager.crash()
    manager = open_manager()
    store = manager.timestamped_store("ts", config=config)
    assert dict(store.items()) == expected


def test_committed_with_key_value_stores_in_one_transaction(open_manager: OpenManager) -> None:
    manager = open_manager()
    plain = manager.store("plain")
    timed = manager.timestamped_store("timed")
    with manager.transaction(plain, timed):
        plain["x"] = 1
        timed.put("x", 2, timestamp_ms=77)

    def abort_midway() -> None:
        with manager.transaction():
            plain["x"] = 10
            timed.put("x", 20, timestamp_ms=78)
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError):
        abort_midway()
    manager.crash()
    manager = open_manager()
    assert manager.store("plain")["x"] == 1
    assert manager.timestamped_store("timed").get_with_timestamp("x") == ValueAndTimestamp(2, 77)


def test_type_is_recorded_and_checked(open_manager: OpenManager) -> None:
    manager = open_manager()
    manager.timestamped_store("ts").put("a", 1)
    manager.commit()
    with pytest.raises(InvalidStoreConfigError):
        manager.store("ts")  # open as another type
    manager.close()
    manager = open_manager()
    with pytest.raises(StoreMetadataMismatchError) as info:
        manager.store("ts")
    assert info.value.mismatches[0][0] == "time"
    manager.store("kv").put("a", 1)
    manager.commit()
    manager.close()
    manager = open_manager()
    with pytest.raises(StoreMetadataMismatchError):
        manager.timestamped_store("kv")
    assert manager.timestamped_store("ts")["a"] == 1


@pytest.mark.parametrize("bad", [-1, 2**63, 1.5, True, "3"])
def test_bad_timestamp_buffers_nothing(open_manager: OpenManager, bad: object) -> None:
    store = open_manager().timestamped_store("ts")
    with pytest.raises(InvalidTimestampError) as info:
        store.put("a", 1, timestamp_ms=bad)  # type: ignore[arg-type]
    assert (info.value.name, info.value.value) == ("timestamp_ms", bad)
    assert store.pending_count == 0
