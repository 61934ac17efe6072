"""Golden bytes of the stores in time's layouts (Kafka Streams' own) and the key-range bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from statestore.stores.time.layout import (
    join_timestamp,
    key_range_upper_bound,
    segment_prefix,
    split_timestamp,
    split_windowed_key,
    windowed_key,
)


def test_windowed_key_golden_bytes() -> None:
    # WindowKeySchema.toStoreKeyBinary("k", 1000, 0): key | int64 BE | int32 BE
    assert windowed_key(b"k", 1000, 0) == b"k" + bytes.fromhex("00000000000003e8") + bytes(4)
    assert windowed_key(b"ab", 2**40, 7) == (
        b"ab" + bytes.fromhex("0000010000000000") + bytes.fromhex("00000007")
    )
    assert split_windowed_key(windowed_key(b"ab", 2**40, 7)) == (b"ab", 2**40, 7)
    assert split_windowed_key(windowed_key(b"", 5, 0)) == (b"", 5, 0)


def test_timestamped_value_golden_bytes() -> None:
    # ValueAndTimestampSerializer: int64 BE timestamp, then the raw value
    assert join_timestamp(1_700_000_000_000, b"\x00\x00\x00\x00\x00\x00\x00\x05") == (
        bytes.fromhex("0000018bcfe56800") + bytes.fromhex("0000000000000005")
    )
    assert split_timestamp(bytes.fromhex("0000018bcfe56800") + b"v") == (1_700_000_000_000, b"v")


def test_segment_prefix_golden_bytes() -> None:
    assert segment_prefix(3) == bytes.fromhex("0000000000000003")


@settings(max_examples=300, deadline=None)
@given(
    last=st.binary(min_size=1, max_size=5),
    key=st.binary(min_size=0, max_size=6),
    start=st.integers(min_value=0, max_value=2**63 - 1),
    seqnum=st.integers(min_value=0, max_value=2**31 - 1),
    time_to=st.integers(min_value=0, max_value=2**63 - 1),
)
def test_upper_bound_covers_every_key_at_or_below_last(
    last: bytes, key: bytes, start: int, seqnum: int, time_to: int
) -> None:
    """Every windowed key with ``key <= last`` and ``start <= time_to`` sorts below the bound."""
    if key <= last and start <= time_to:
        bound = key_range_upper_bound(last, windowed_key(b"", time_to, 2**31 - 1))
        assert windowed_key(key, start, seqnum) < bound
