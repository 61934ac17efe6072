"""The cleaner's bounded offset map: Kafka's ``OffsetMapTest`` plus capacity and batch behaviour."""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from changelog.cleaner import offset_map as offset_map_module
from changelog.cleaner.offset_map import HASH_BITS, SLOT_BYTES, OffsetMap, key_hashes
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


@pytest.mark.parametrize("load_factor", [0.9, 0.75])
def test_a_full_map_stays_within_its_memory_budget(load_factor: float) -> None:
    """Measured, not assumed: the arrays, the stage and every merge's temporaries.

    Random keys (so that every merge inserts rows all over the map) fill the map to
    capacity in batches of 1,000; tracemalloc's peak covers the map's allocations and the
    batch being put (~100 KB of keys and offsets, the only other allocation).
    """
    memory = 1 << 20
    rng = random.Random(3)
    gc.collect()
    tracemalloc.start()
    try:
        offset_map = OffsetMap(memory, load_factor=load_factor)
        offset = 10**9
        while not offset_map.is_full:
            keys = [b"user:%012d" % rng.randrange(10**12) for _ in range(1000)]
            offsets = list(range(offset, offset + len(keys)))
            offset_map.put_batch(keys, offsets)
            offset += len(keys)
            del keys, offsets
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert offset_map.size == offset_map.capacity == int(memory // SLOT_BYTES * load_factor)
    assert peak <= memory + 150_000


def test_sixteen_bytes_a_slot_maps_235k_keys_in_4_mib() -> None:
    offset_map = OffsetMap(4 * 1024 * 1024)
    assert SLOT_BYTES == 16
    assert offset_map.capacity == 235_929
    assert offset_map.stage_records >= 1


def test_hash_is_96_bits_sipHash_and_crc32c() -> None:
    keys = [b"", b"a", b"b", b"user:1", bytes(100)]
    hashes, tags = key_hashes(keys)
    assert len(set(zip(hashes.tolist(), tags.tolist(), strict=True))) == len(keys)
    assert hashes.tolist() == [hash(key) for key in keys]
    assert tags.tolist() == [crc32c(key) for key in keys]
    assert hashes.dtype.itemsize * 8 + tags.dtype.itemsize * 8 == HASH_BITS


def test_equal_siphash_with_different_crc_are_different_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Collision rule: a key is its (SipHash, CRC-32C) pair; equal SipHash alone is not enough."""
    monkeypatch.setattr(offset_map_module, "hash", len, raising=False)  # SipHash collides by length
    offset_map = OffsetMap(SLOT_BYTES * 1000)
    keys = [b"%03d" % i for i in range(200)] + [b"x", b"y", b"zz"]
    model: dict[bytes, int] = {}
    rng = random.Random(5)
    offset = 0
    for _ in range(20):
        batch = [rng.choice(keys) for _ in range(rng.randint(1, 60))]
        offsets = list(range(offset, offset + len(batch)))
        offset += len(batch)
        assert offset_map.put_batch(batch, offsets) == len(batch)
        model.update(zip(batch, offsets, strict=True))
        probe = [*keys, b"000x", b"q"]
        assert offset_map.get_batch(probe) == [model.get(key, -1) for key in probe]
    assert offset_map.size == len(model)


def test_offsets_past_the_32_bit_delta_stop_the_map() -> None:
    offset_map = OffsetMap(4096)
    base = 10**12
    assert offset_map.put_batch([b"a", b"b"], [base, base + 2**32 - 2]) == 2
    assert offset_map.put_batch([b"c", b"d"], [base + 2**32 - 1, base + 2**32]) == 0
    assert offset_map.latest_offset == base + 2**32 - 2
    assert offset_map.get_batch([b"a", b"b", b"c"]) == [base, base + 2**32 - 2, -1]


def _model_put(
    model: dict[bytes, int], capacity: int, keys: list[bytes | None], offsets: list[int]
) -> int:
    """Kafka's rule on a plain dict: stop at the first key that would exceed capacity."""
    for index, (key, offset) in enumerate(zip(keys, offsets, strict=True)):
        if key is None:
            continue
        if key not in model and len(model) >= capacity:
            return index
        model[key] = offset
    return len(keys)


@given(
    st.integers(3, 60),
    st.sampled_from([0.5, 0.9, 1.0]),
    st.lists(
        st.lists(st.one_of(st.none(), st.binary(max_size=2)), min_size=1, max_size=80),
        max_size=12,
    ),
)
def test_batches_match_kafkas_capacity_rule(
    slots: int, load_factor: float, batches: list[list[bytes | None]]
) -> None:
    offset_map = OffsetMap(SLOT_BYTES * slots, load_factor=load_factor)
    model: dict[bytes, int] = {}
    offset = 0
    for batch in batches:
        offsets = list(range(offset, offset + len(batch)))
        offset += len(batch) + 1
        expected = _model_put(model, offset_map.capacity, batch, offsets)
        assert offset_map.put_batch(batch, offsets) == expected
        keys = [*list(model), b"absent-key"]
        assert offset_map.get_batch(keys) == [model.get(key, -1) for key in keys]
        if expected < len(batch):
            break
    assert offset_map.size == len(model)


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
    st.lists(st.tuples(st.binary(max_size=8), st.integers(0, 10**6)), max_size=200),
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
