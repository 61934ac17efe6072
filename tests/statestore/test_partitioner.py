"""Kafka's murmur2 and default partitioner, pinned with Kafka's own test vectors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statestore.partitioner import murmur2, partition_for, to_positive

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (the empty input is the
# seed-only hash, as other Kafka client ports pin it).
KAFKA_MURMUR2_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"": 275646681,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2_VECTORS.items())
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_to_positive_masks_the_sign_bit_like_kafka() -> None:
    assert to_positive(-790332482) == 1357151166  # not abs(): Utils.toPositive
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_partition_for_is_kafkas_default_partitioner() -> None:
    # toPositive(murmur2("foobar")) = 1357151166
    assert partition_for(b"foobar", 10) == 1357151166 % 10 == 6
    assert partition_for(b"foobar", 50) == 16
    assert partition_for(b"21", 3) == to_positive(-973932308) % 3


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_in_range_and_tail_lengths(data: bytes, n: int) -> None:
    p = partition_for(data, n)
    assert 0 <= p < n
    assert -(2**31) <= murmur2(data) < 2**31


def test_unaligned_buffer_input() -> None:
    data = b"xa-little-bit-long-string"[1:]
    assert murmur2(data) == -985981536
    assert murmur2(bytearray(b"foobar")) == -790332482  # type: ignore[arg-type]
