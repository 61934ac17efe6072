"""The cleaner's bounded offset map: Kafka's ``OffsetMapTest`` plus capacity and batch behaviour."""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from changelog.cleaner.offset_map import SLOT_BYTES, OffsetMap, key_hashes
from changelog.errors import InvalidConfigError


def test_basic_put_and_get() -> None:
    offset_map = OffsetMap(4096)
    for i in range(10):
        assert offset_map.put(b"key-%d" % i, i)
    for i in range(10):
        assert offset_map.get(b"key-%d" % i) == i
    assert offset_map.get(b"absent") == -1
    assert offset_map.size == 10
    assert offset_map.latest_offset == 9


def test_put_overwrites_and_keeps_size() -> None:
    offset_map = OffsetMap(4096)
    offset_map.put(b"a", 1)
    offset_map.put(b"a", 7)
    assert offset_map.get(b"a") == 7
    assert offset_map.size == 1


def test_clear_empties_but_keeps_memory() -> None:
    offset_map = OffsetMap(4096)
    offset_map.put_batch([b"a", b"b"], [0, 1])
    slots = offset_map.slots
    offset_map.clear()
    assert offset_map.size == 0
    assert offset_map.latest_offset == -1
    assert offset_map.get(b"a") == -1
    assert offset_map.slots == slots


def test_entry_budget_follows_the_configured_size() -> None:
    for memory in (1024, 4096, 10_000, 1 << 20):
        offset_map = OffsetMap(memory)
        assert offset_map.memory_bytes <= memory
        assert offset_map.slots == memory // SLOT_BYTES
        assert offset_map.capacity == int(offset_map.slots * 0.9)


def test_a_full_map_stays_within_its_memory_budget() -> None:
    """Measured, not assumed: the dict, its hash ints and offset ints, and the resize peak."""
    memory = 1 << 20
    offset_map = OffsetMap(memory, load_factor=1.0)
    gc.collect()
    tracemalloc.start()
    try:
        offset = 10**9  # offsets above the small-int cache, like a long-lived log's
        inserted = 0
        while not offset_map.is_full:
            keys = [b"user:%012d" % (inserted + i) for i in range(1000)]
            offsets = list(range(offset, offset + len(keys)))
            inserted += offset_map.put_batch(keys, offsets)
            offset += len(keys)
            del keys, offsets
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert offset_map.size == offset_map.capacity == memory // SLOT_BYTES
    # one batch of 1,000 keys and their offsets (~100 KB) is the only other allocation
    assert peak <= memory + 150_000


def test_hash_is_96_bits_and_injective_on_its_two_halves() -> None:
    keys = [b"", b"a", b"b", b"user:1", bytes(100)]
    hashes = key_hashes(keys)
    assert len(set(hashes)) == len(keys)
    for key, hashed in zip(keys, hashes, strict=True):
        assert hashed & 0xFFFFFFFF == crc32c(key)
        assert hashed >> 32 == hash(key)
        assert -(2**95) <= hashed < 2**95


def test_fills_to_capacity_then_stops_mid_batch() -> None:
    offset_map = OffsetMap(SLOT_BYTES * 101, load_factor=0.5)
    assert offset_map.slots == 101
    assert offset_map.capacity == 50
    keys = [b"k%d" % i for i in range(80)]
    consumed = offset_map.put_batch(keys, list(range(100, 180)))
    assert consumed == 50
    assert offset_map.is_full
    assert offset_map.latest_offset == 149
    assert offset_map.utilization == pytest.approx(50 / 101)
    # a key already present is still updated when the map is full
    assert offset_map.put(b"k3", 500)
    assert offset_map.get(b"k3") == 500
    assert not offset_map.put(b"new", 501)


def test_none_keys_extend_latest_offset_only() -> None:
    offset_map = OffsetMap(4096)
    assert offset_map.put_batch([None, b"a", None], [3, 4, 5]) == 3
    assert offset_map.size == 1
    assert offset_map.latest_offset == 5
    assert offset_map.get_batch([None, b"a"]) == [-1, 4]


def test_update_latest_offset_never_moves_back() -> None:
    offset_map = OffsetMap(4096)
    offset_map.update_latest_offset(10)
    offset_map.update_latest_offset(4)
    assert offset_map.latest_offset == 10


def test_full_map_finds_every_key() -> None:
    rng = random.Random(7)
    offset_map = OffsetMap(SLOT_BYTES * 1009, load_factor=1.0)
    keys = list({rng.randbytes(rng.randint(0, 40)) for _ in range(1009)})
    assert offset_map.put_batch(keys, list(range(len(keys)))) == len(keys)
    assert offset_map.get_batch(keys) == list(range(len(keys)))
    assert offset_map.size == len(keys)
    assert offset_map.utilization == pytest.approx(len(keys) / 1009)


@pytest.mark.parametrize(("memory", "load_factor"), [(SLOT_BYTES * 2, 0.9), (4096, 0.0)])
def test_a_map_that_cannot_progress_is_rejected(memory: int, load_factor: float) -> None:
    with pytest.raises(InvalidConfigError):
        OffsetMap(memory, load_factor=load_factor)


def test_batch_lengths_must_match() -> None:
    with pytest.raises(ValueError, match="zip"):
        OffsetMap(4096).put_batch([b"a"], [1, 2])


@given(
    st.lists(st.tuples(st.binary(max_size=8), st.integers(0, 10**12)), max_size=200),
)
def test_matches_a_dict_model(entries: list[tuple[bytes, int]]) -> None:
    offset_map = OffsetMap(SLOT_BYTES * 1000)
    model: dict[bytes, int] = {}
    offset = 0
    for key, step in entries:
        offset += step
        offset_map.put(key, offset)
        model[key] = offset
    for key, value in model.items():
        assert offset_map.get(key) == value
    assert offset_map.size == len(model)
    assert offset_map.latest_offset == (offset if entries else -1)
