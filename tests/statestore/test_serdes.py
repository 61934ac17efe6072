"""Serdes: round trips, byte order of IntSerde, typed failures."""

from __future__ import annotations

import attrs
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statestore.serdes import (
    AttrsSerde,
    BytesSerde,
    IntSerde,
    MsgpackSerde,
    Serde,
    StringSerde,
    serde_for_type,
)


@attrs.frozen
class Profile:
    name: str
    age: int
    tags: list[str] = attrs.field(factory=list)


def test_int_serde_golden_bytes() -> None:
    serde = IntSerde()
    assert serde.serialize(0) == b"\x80\x00\x00\x00\x00\x00\x00\x00"
    assert serde.serialize(-1) == b"\x7f\xff\xff\xff\xff\xff\xff\xff"
    assert serde.serialize(1) == b"\x80\x00\x00\x00\x00\x00\x00\x01"
    assert serde.serialize(-(2**63)) == b"\x00" * 8
    assert serde.serialize(2**63 - 1) == b"\xff" * 8


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), min_size=2))
def test_int_serde_byte_order_is_numeric_order(values: list[int]) -> None:
    serde = IntSerde()
    assert sorted(values, key=serde.serialize) == sorted(values)
    assert [serde.deserialize(serde.serialize(v)) for v in values] == values


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, True, 1.5, "1", None])
def test_int_serde_rejects(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        IntSerde().serialize(bad)  # type: ignore[arg-type]


def test_int_serde_rejects_wrong_length() -> None:
    with pytest.raises(ValueError, match="8 bytes"):
        IntSerde().deserialize(b"\x00")


@given(st.text())
def test_string_serde_is_utf8(text: str) -> None:
    serde = StringSerde()
    assert serde.serialize(text) == text.encode("utf-8")
    assert serde.deserialize(serde.serialize(text)) == text


def test_string_serde_rejects_non_str() -> None:
    with pytest.raises(TypeError):
        StringSerde().serialize(b"bytes")  # type: ignore[arg-type]


def test_bytes_serde_copies_buffers() -> None:
    serde = BytesSerde()
    assert serde.serialize(bytearray(b"ab")) == b"ab"  # type: ignore[arg-type]
    assert type(serde.serialize(memoryview(b"ab"))) is bytes  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        serde.serialize("ab")  # type: ignore[arg-type]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary(),
        lambda children: (
            st.lists(children)
            | st.dictionaries(st.text() | st.integers(-(2**63), 2**63 - 1), children)
        ),
        max_leaves=20,
    )
)
def test_msgpack_round_trip(value: object) -> None:
    serde = MsgpackSerde()
    assert serde.deserialize(serde.serialize(value)) == value


def test_msgpack_rejects_unserializable() -> None:
    with pytest.raises(TypeError):
        MsgpackSerde().serialize(object())


def test_attrs_serde_round_trip_and_type_check() -> None:
    serde = AttrsSerde(Profile)
    profile = Profile("alice", 31, ["a"])
    assert serde.deserialize(serde.serialize(profile)) == profile
    with pytest.raises(TypeError):
        serde.serialize({"name": "alice"})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        AttrsSerde(dict)


def test_attrs_serde_reads_records_written_before_a_field_was_added() -> None:
    old = MsgpackSerde().serialize({"name": "bob", "age": 3})
    assert AttrsSerde(Profile).deserialize(old) == Profile("bob", 3, [])


def test_serde_for_type() -> None:
    assert isinstance(serde_for_type(bytes), BytesSerde)
    assert isinstance(serde_for_type(str), StringSerde)
    assert isinstance(serde_for_type(int), IntSerde)
    assert serde_for_type(Profile) == AttrsSerde(Profile)
    with pytest.raises(TypeError):
        serde_for_type(float)


def test_builtins_satisfy_the_protocol() -> None:
    for serde in (BytesSerde(), StringSerde(), IntSerde(), MsgpackSerde(), AttrsSerde(Profile)):
        assert isinstance(serde, Serde)


_MSGPACK_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary(),
    lambda children: (
        st.lists(children)
        | st.dictionaries(st.text() | st.binary() | st.integers(-(2**63), 2**63 - 1), children)
    ),
    max_leaves=10,
)


@given(st.lists(_MSGPACK_VALUES, max_size=30))
def test_msgpack_batch_and_first_try_decoders_equal_unpack(values: list[object]) -> None:
    """``unpack_many`` is ``unpack`` per value; ``try_unpack`` equals it wherever it succeeds.

    Maps with int keys make the strict first try fail (the batch then falls back).
    """
    serde = MsgpackSerde()
    packed = [serde.serialize(value) for value in values]
    assert serde.unpack_many(packed) == [serde.unpack(data) for data in packed] == values
    for data, value in zip(packed, values, strict=True):
        try:
            first = serde.try_unpack(data)
        except ValueError:
            continue
        assert first == value


def test_msgpack_batch_decoder_raises_for_a_bad_value() -> None:
    serde = MsgpackSerde()
    good = serde.serialize({1: "int key"})  # the strict first try rejects it
    with pytest.raises(msgpack.FormatError):  # 0xc1 is never used in msgpack
        serde.unpack_many([good, b"\xc1"])
    assert serde.unpack_many([good, good]) == [{1: "int key"}] * 2
