"""``KeyValueStore.get_many``: one multi-get per partition, the same answers as ``get``."""

from __future__ import annotations

import random

import pytest

from statestore.errors import DeserializationError, InvalidStateStoreError
from tests.statestore.conftest import OpenManager


@pytest.mark.parametrize("partitions", [1, 3])
def test_same_as_get_with_pending_puts_and_deletes(
    open_manager: OpenManager, partitions: int
) -> None:
    store = open_manager().store("kv", partitions=partitions)
    for i in range(50):
        store[f"k{i}"] = {"n": i}
    store.commit()
    store["k1"] = "pending"  # a pending put over a committed value
    del store["k2"]  # a pending tombstone
    store["new"] = 3  # pending only
    keys = [f"k{i}" for i in range(50)] + ["new", "absent", "k1"]
    got = store.get_many(keys)
    assert got == [store.get(key) for key in keys]
    assert got[1] == "pending"
    assert got[2] is None
    assert got[-3:] == [3, None, "pending"]
    assert store.get_many(iter(["absent", "k3"]), default=-1) == [-1, {"n": 3}]
    assert store.get_many([]) == []


def test_bytes_keys_and_serialized_keys(open_manager: OpenManager) -> None:
    manager = open_manager()
    raw = manager.store("raw", key_type=bytes)
    raw[b"a"] = 1
    raw.commit()
    assert raw.get_many([b"a", b"b"]) == [1, None]
    ints = manager.store("ints", key_type=int, partitions=2)
    ints[5] = "five"
    assert ints.get_many([5, 6]) == ["five", None]


@pytest.mark.parametrize("seed", range(20))
def test_matches_get_after_random_writes(open_manager: OpenManager, seed: int) -> None:
    rng = random.Random(seed)
    store = open_manager().store("kv", key_type=bytes, partitions=rng.choice([1, 4]))
    for _ in range(rng.randint(0, 4)):
        for _ in range(rng.randint(0, 40)):
            key = b"%d" % rng.randrange(30)
            if rng.random() < 0.2:
                store.delete(key)
            else:
                store.put(key, rng.randrange(100))
        if rng.random() < 0.6:
            store.commit()
    keys = [b"%d" % rng.randrange(35) for _ in range(rng.randint(0, 60))]
    assert store.get_many(keys) == [store.get(key) for key in keys]


def test_a_bad_value_is_named(open_manager: OpenManager) -> None:
    manager = open_manager()
    manager.store("kv", key_type=bytes).close()  # created with msgpack values
    writer = manager.raw_store("kv")  # a tool's view: bytes in, unchecked
    writer[b"ok"] = b"1"  # b"1": msgpack's 49
    writer[b"bad"] = "\u00c1".encode()  # b"\xc3\x81": msgpack's True, then a stray byte
    writer.commit()
    writer.close()
    reader = manager.store("kv", key_type=bytes)  # msgpack values now: "x" is not msgpack
    assert reader.get_many([b"ok"]) == [49]
    with pytest.raises(DeserializationError) as info:
        reader.get_many([b"ok", b"bad"])
    assert info.value.data == b"\xc3\x81"


def test_a_closed_store_refuses(open_manager: OpenManager) -> None:
    store = open_manager().store("kv")
    store.close()
    with pytest.raises(InvalidStateStoreError):
        store.get_many(["a"])
