"""The typed KeyValueStore: Kafka Streams' operations, mapping protocol, buffering, lifecycle, bad input."""

from __future__ import annotations

import logging

import attrs
import pytest

from changelog.config import LogConfig
from statestore.errors import (
    DeserializationError,
    InvalidStateStoreError,
    RecordTooLargeForLogError,
    SerializationError,
)
from statestore.serdes import IntSerde, StringSerde
from statestore.stores.bytes_store import prefix_upper_bound
from statestore.stores.lifecycle import StoreState
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import changelog_entries


@attrs.frozen
class Account:
    owner: str
    balance: int


def test_get_put_defaults_and_mapping_protocol(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    assert store.get("missing") is None
    assert store.get("missing", 7) == 7
    store["a"] = {"x": 1}
    store.put("b", [1, 2])
    assert store["a"] == {"x": 1}
    assert "a" in store
    assert "zz" not in store
    assert len(store) == 2
    assert sorted(store) == ["a", "b"]
    del store["a"]
    assert "a" not in store
    with pytest.raises(KeyError):
        store["a"]
    with pytest.raises(KeyError):
        del store["a"]
    assert list(store.keys()) == ["b"]
    assert list(store.values()) == [[1, 2]]
    assert list(store.items()) == [("b", [1, 2])]


def test_put_none_deletes_like_kafka(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    store["a"] = 1
    store.commit()
    store.put("a", None)
    assert "a" not in store
    store.commit()
    assert changelog_entries(store.changelog)[-1] == (b"a", None)


def test_read_your_writes_before_commit_and_abort(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    store["a"] = 1
    store.commit()
    store["a"] = 2
    store["b"] = 3
    store.delete("a")
    assert store.get("a") is None
    assert store.get("b") == 3
    assert store.pending_count == 2
    assert store.abort() == 2
    assert store.get("a") == 1
    assert store.get("b") is None
    assert changelog_entries(store.changelog) == [(b"a", b"\x01")]


def test_commit_writes_one_batch_and_returns_count(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    log = store.changelog
    assert store.commit() == 0
    assert log.log_end_offset == 0
    store.put_all([(f"k{i}", i) for i in range(50)])
    assert store.commit() == 50
    batches = list(log.read_batches(0))
    assert len(batches) == 1
    assert batches[0][0].records_count == 50
    assert log.log_end_offset == 50


def test_transaction_commits_on_success_and_aborts_on_error(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    with store.transaction():
        store["a"] = 1
    assert store.changelog.log_end_offset == 1

    class BoomError(Exception):
        pass

    def failing_transaction() -> None:
        with store.transaction():
            store["b"] = 2
            raise BoomError

    with pytest.raises(BoomError):
        failing_transaction()
    assert store.get("b") is None
    assert store.pending_count == 0
    assert store.changelog.log_end_offset == 1


def test_put_if_absent(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    assert store.put_if_absent("a", 1) is None
    assert store.put_if_absent("a", 2) == 1
    store.commit()
    assert store.put_if_absent("a", 3) == 1
    store.commit()
    assert changelog_entries(store.changelog) == [(b"a", b"\x01")]


def test_delete_returns_old_value(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    store["a"] = "v"
    store.commit()
    assert store.delete("a") == "v"
    assert store.delete("never") is None


def test_range_is_half_open_in_key_byte_order_with_pending_overlay(
    open_manager: OpenManager,
) -> None:
    store = open_manager().store("kv")
    store.put_all({k: k.upper() for k in ["a", "b", "c", "d", "e"]})
    store.commit()
    store["bb"] = "BB"  # pending insert
    store.delete("c")  # pending tombstone
    store["d"] = "D2"  # pending overwrite
    assert [k for k, _ in store.range("b", "e")] == ["b", "bb", "d"]
    assert dict(store.range("b", "e"))["d"] == "D2"
    assert [k for k, _ in store.range("b", "e", reverse=True)] == ["d", "bb", "b"]
    assert [k for k, _ in store.reverse_range(None, "c")] == ["bb", "b", "a"]
    assert [k for k, _ in store.range("d")] == ["d", "e"]
    assert [k for k, _ in store.range()] == ["a", "b", "bb", "d", "e"]


def test_range_with_lo_above_hi_is_empty_with_warning(
    open_manager: OpenManager, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_manager().store("kv")
    store["a"] = 1
    with caplog.at_level(logging.WARNING):
        assert list(store.range("z", "a")) == []
    assert "lo > hi" in caplog.text


def test_int_keys_range_in_numeric_order(open_manager: OpenManager) -> None:
    store = open_manager().store("nums", key_serde=IntSerde())
    for k in [5, -3, 0, 100, -100]:
        store[k] = k
    store.commit()
    assert list(store.keys()) == [-100, -3, 0, 5, 100]
    assert [k for k, _ in store.range(-3, 6)] == [-3, 0, 5]


def test_prefix_scan(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    for key in ["user:1", "user:2", "user:10", "usex", "use", "order:1"]:
        store[key] = key
    store.commit()
    store["user:3"] = "pending"
    assert [k for k, _ in store.prefix_scan("user:")] == ["user:1", "user:10", "user:2", "user:3"]
    assert next(k for k, _ in store.prefix_scan("user:", reverse=True)) == "user:3"
    assert [k for k, _ in store.prefix_scan("use")] == [
        "use",
        "user:1",
        "user:10",
        "user:2",
        "user:3",
        "usex",
    ]
    assert [k for k, _ in store.prefix_scan("order", StringSerde())] == ["order:1"]


def test_prefix_scan_with_a_prefix_serde(open_manager: OpenManager) -> None:
    store = open_manager().store("kv", key_type=bytes)
    store.put_all([(b"\x01\xff\xff", 1), (b"\x01\xff", 2), (b"\x02", 3), (b"\x01", 4)])
    store.commit()

    class RawPrefix:
        def serialize(self, obj: bytes, /) -> bytes:
            return obj

        def deserialize(self, data: bytes, /) -> bytes:
            return data

    assert [k for k, _ in store.prefix_scan(b"\x01\xff", RawPrefix())] == [
        b"\x01\xff",
        b"\x01\xff\xff",
    ]


def test_prefix_upper_bound() -> None:
    assert prefix_upper_bound(b"ab") == b"ac"
    assert prefix_upper_bound(b"a\xff") == b"b"
    assert prefix_upper_bound(b"\xff\xff") is None
    assert prefix_upper_bound(b"") is None


def test_value_type_attrs_returns_instances(open_manager: OpenManager) -> None:
    store = open_manager().store("accounts", value_type=Account)
    store["alice"] = Account("alice", 10)
    store.commit()
    assert store["alice"] == Account("alice", 10)
    with pytest.raises(SerializationError) as info:
        store["bob"] = {"owner": "bob"}
    assert info.value.role == "value"
    assert store.pending_count == 0


def test_bad_keys_and_values_are_typed_errors_and_nothing_is_written(
    open_manager: OpenManager,
) -> None:
    store = open_manager().store("kv")
    with pytest.raises(SerializationError) as info:
        store.put(None, 1)
    assert info.value.role == "key"
    with pytest.raises(SerializationError):
        store.put(42, 1)
    with pytest.raises(SerializationError) as info:
        store.put("k", object())
    assert info.value.role == "value"
    assert info.value.type_name == "object"
    with pytest.raises(SerializationError):
        store.put_all([("ok", 1), ("bad", object())])
    assert store.pending_count == 0
    assert store.commit() == 0
    assert store.changelog.log_end_offset == 0


def test_record_over_max_message_bytes_is_rejected_at_put(open_manager: OpenManager) -> None:
    manager = open_manager(log_config=LogConfig(max_message_bytes=1000))
    store = manager.store("kv", value_type=bytes)
    with pytest.raises(RecordTooLargeForLogError) as info:
        store["k"] = b"x" * 2000
    assert info.value.limit < 1000
    assert store.pending_count == 0
    store["k"] = b"x" * 100
    assert store.commit() == 1


def test_closed_store_raises_typed_error(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("kv")
    store["a"] = 1
    store.commit()
    manager.close()
    assert store.state is StoreState.CLOSED
    for call in (
        lambda: store.get("a"),
        lambda: store.put("a", 1),
        lambda: list(store.items()),
        store.commit,
        lambda: len(store),
        lambda: "a" in store,
    ):
        with pytest.raises(InvalidStateStoreError) as info:
            call()
        assert info.value.state == "closed"
        assert info.value.store == "kv"


def test_closing_a_store_by_hand_closes_its_changelogs_and_the_manager_reopens_it(
    open_manager: OpenManager,
) -> None:
    manager = open_manager()
    store = manager.store("kv", partitions=2)
    store.put_all([("a", 1), ("b", 2)])
    store.commit()
    store.close()
    store.close()  # idempotent
    assert all(log.closed for log in store.changelogs)
    reopened = manager.store("kv", partitions=2)
    assert reopened is not store
    assert dict(reopened.items()) == {"a": 1, "b": 2}


def test_abandon_drops_the_store_as_a_crash_would(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("kv")
    store["kept"] = 1
    store.commit()
    store["lost"] = 2
    store.abandon()
    store.abandon()  # idempotent
    assert store.state is StoreState.CLOSED
    assert store.changelog.closed  # type: ignore[union-attr]
    with pytest.raises(InvalidStateStoreError):
        store.get("kept")
    assert dict(manager.store("kv").items()) == {"kept": 1}


def test_approximate_num_entries(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    store.put_all([(f"k{i:04}", i) for i in range(2000)])
    store.commit()
    store.flush()
    assert 1000 <= store.approximate_num_entries() <= 4000


def test_foreign_bytes_are_a_deserialization_error(open_manager: OpenManager) -> None:
    manager = open_manager()
    manager.store("kv", key_type=bytes).close()  # created with msgpack values
    raw = manager.raw_store("kv")  # a tool's view: bytes in, unchecked
    raw[b"k"] = b"\xc1"  # 0xc1 is never used in msgpack
    raw.commit()
    manager.close()
    typed = open_manager().store("kv", key_type=bytes)
    with pytest.raises(DeserializationError) as info:
        typed.get(b"k")
    assert info.value.data == b"\xc1"
    with pytest.raises(DeserializationError):
        list(typed.items())


def test_bytes_keys_skip_the_serde_but_keep_its_rules(open_manager: OpenManager) -> None:
    store = open_manager().store("kv", key_type=bytes, value_type=bytes)
    store.put(b"k", b"v")
    store.put(bytearray(b"b"), b"from a bytearray")  # copied to bytes by BytesSerde
    store.put(memoryview(b"m"), b"from a memoryview")
    assert store.get(b"k") == b"v"
    assert store.get(bytearray(b"b")) == b"from a bytearray"
    assert store[b"m"] == b"from a memoryview"
    for bad in ("k", None, 1):
        with pytest.raises(SerializationError):
            store.put(bad, b"v")
        with pytest.raises(SerializationError):
            store.get(bad)
    store.commit()
    assert sorted(changelog_entries(store.changelog)) == [
        (b"b", b"from a bytearray"),
        (b"k", b"v"),
        (b"m", b"from a memoryview"),
    ]


def test_str_keys_do_not_take_the_bytes_shortcut(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")  # StringSerde keys
    with pytest.raises(SerializationError):
        store.put(b"k", 1)
    with pytest.raises(SerializationError):
        store.get(b"k")


def test_values_the_fast_decoder_rejects_read_back_on_every_path(open_manager: OpenManager) -> None:
    """msgpack maps with int keys: the strict first try fails, the serde's decoder decides."""
    store = open_manager().store("kv")
    for i in range(40):
        store[f"k{i:02}"] = {i: "int key"} if i % 3 == 0 else {"n": i}
    store.commit()
    for i in range(40):
        assert store[f"k{i:02}"] == ({i: "int key"} if i % 3 == 0 else {"n": i})
    keys = [f"k{i:02}" for i in range(40)]
    assert store.get_many(keys) == [store[key] for key in keys]
    assert list(store.range("k00", "k40")) == [(key, store[key]) for key in keys]
    assert list(store.values()) == [store[key] for key in keys]


def test_a_bad_value_in_a_long_scan_names_its_key(open_manager: OpenManager) -> None:
    manager = open_manager()
    manager.store("kv", key_type=bytes).close()  # created with msgpack values
    raw = manager.raw_store("kv")  # a tool's view: bytes in, unchecked
    for i in range(3000):
        raw[b"k%05d" % i] = b"\xc1" if i == 2500 else b"\x01"
    raw.commit()
    manager.close()
    typed = open_manager().store("kv", key_type=bytes)
    scan = typed.range(b"k00000")
    assert [next(scan) for _ in range(5)] == [(b"k%05d" % i, 1) for i in range(5)]
    with pytest.raises(DeserializationError) as info:
        list(scan)
    assert info.value.data == b"k02500"
    assert list(typed.range(b"k02501", b"k02504")) == [(b"k%05d" % i, 1) for i in range(2501, 2504)]
    with pytest.raises(DeserializationError):
        list(typed.values())
    assert len(list(typed.keys())) == 3000


def test_scans_read_ahead_at_most_eight_entries_before_the_first(
    open_manager: OpenManager,
) -> None:
    from statestore.stores import typed as typed_module  # noqa: PLC0415

    source = iter([(b"%05d" % i, b"") for i in range(3000)])
    chunks = typed_module._readahead(source, "kv")
    assert len(next(chunks)) == 8
    sizes = [len(chunk) for chunk in chunks]
    assert sizes[:7] == [16, 32, 64, 128, 256, 512, 1024]
    assert sum(sizes) == 3000 - 8
    assert max(sizes) == 1024
    store = open_manager().store("kv", key_type=bytes)
    for i in range(100):
        store[b"%03d" % i] = i
    store.commit()
    assert list(store.range(b"010", b"030", reverse=True)) == [
        (b"%03d" % i, i) for i in range(29, 9, -1)
    ]
    assert list(store.prefix_scan(b"05")) == [(b"%03d" % i, i) for i in range(50, 60)]
