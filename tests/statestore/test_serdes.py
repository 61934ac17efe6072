"""Serdes: round trips, byte order of IntSerde, typed failures."""

from __future__ import annotations

from pathlib import Path

import attrs
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statestore import StateManager
from statestore.errors import SerdeDefinitionError
from statestore.serdes import (
    AttrsSerde,
    BytesSerde,
    IntSerde,
    MsgpackSerde,
    Serde,
    StringSerde,
    serde_for_type,
)
from statestore.stores.metadata import read_metadata


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


# --------------------------------------------------------------------------- nested attrs classes


@attrs.frozen
class Item:
    sku: str
    quantity: int


@attrs.frozen
class Address:
    city: str
    lines: tuple[str, ...] = ()


@attrs.frozen
class Cart:
    owner: str
    items: list[Item]
    shipping: Address | None = None
    by_sku: dict[str, Item] = attrs.field(factory=dict)
    pair: tuple[Item, int] | None = None
    history: tuple[Address, ...] = ()


@attrs.frozen
class Node:
    label: str
    children: list[Node] = attrs.field(factory=list)


@attrs.frozen
class Loose:
    anything: object


def test_nested_attrs_values_come_back_as_attrs_instances() -> None:
    serde = AttrsSerde(Cart)
    cart = Cart(
        "alice",
        [Item("a", 1), Item("b", 2)],
        Address("Oslo", ("1 Main St",)),
        {"a": Item("a", 1)},
        (Item("c", 3), 7),
        (Address("Bergen"),),
    )
    back = serde.deserialize(serde.serialize(cart))
    assert back == cart
    assert type(back.items[0]) is Item
    assert type(back.shipping) is Address
    assert type(back.by_sku["a"]) is Item
    assert back.pair is not None and type(back.pair[0]) is Item
    assert serde.deserialize(serde.serialize(Cart("bob", []))) == Cart("bob", [])


def test_a_self_referencing_attrs_class_round_trips() -> None:
    serde = AttrsSerde(Node)
    tree = Node("root", [Node("a", [Node("a1")]), Node("b")])
    assert serde.deserialize(serde.serialize(tree)) == tree


def test_a_field_of_the_wrong_declared_class_is_refused_when_serialized() -> None:
    serde = AttrsSerde(Cart)
    with pytest.raises(TypeError, match=r"field Cart.items\[\] is declared Item, got dict"):
        serde.serialize(Cart("x", [{"sku": "a", "quantity": 1}]))  # type: ignore[list-item]


def test_an_undeclared_nested_attrs_value_is_refused_not_turned_into_a_dict() -> None:
    serde = AttrsSerde(Loose)
    assert serde.deserialize(serde.serialize(Loose({"a": 1}))) == Loose({"a": 1})
    with pytest.raises(TypeError, match="annotate the field with Item"):
        serde.serialize(Loose(Item("a", 1)))


@attrs.frozen
class Ambiguous:
    either: Item | Address


@attrs.frozen
class KeyedByItem:
    counts: dict[Item, int]


@attrs.frozen
class SetOfItems:
    items: frozenset[Item]


@pytest.mark.parametrize(
    ("cls", "field"),
    [
        (Ambiguous, "Ambiguous.either"),
        (KeyedByItem, "KeyedByItem.counts"),
        (SetOfItems, "SetOfItems.items"),
    ],
)
def test_shapes_that_cannot_be_rebuilt_are_refused_at_construction(
    cls: type[object], field: str
) -> None:
    with pytest.raises(SerdeDefinitionError) as refused:
        AttrsSerde(cls)
    assert refused.value.field == field
    assert refused.value.cls.endswith(cls.__qualname__)


def test_a_class_defined_in_main_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    @attrs.frozen
    class Order:
        total: int

    monkeypatch.setattr(Order, "__module__", "__main__")
    with pytest.raises(SerdeDefinitionError) as refused:
        AttrsSerde(Order)
    message = str(refused.value)
    assert "is defined in __main__" in message
    assert "Move the class into a module" in message
    assert 'name="myapp.' in message
    named = AttrsSerde(Order, name="shop.Order")
    assert named.name == "shop.Order"
    assert named.deserialize(named.serialize(Order(3))) == Order(3)


def test_store_round_trips_nested_attrs_through_restore(tmp_path: Path) -> None:
    with StateManager(tmp_path / "state") as manager:
        carts = manager.store("carts", value_type=Cart)
        carts.put("alice", Cart("alice", [Item("a", 1)], Address("Oslo")))
        manager.commit()
    with StateManager(tmp_path / "state") as manager:  # restored by replaying the changelog
        back = manager.store("carts", value_type=Cart).get("alice")
    assert back == Cart("alice", [Item("a", 1)], Address("Oslo"))
    assert type(back.items[0]) is Item


def test_the_recorded_name_is_the_serde_s_name(tmp_path: Path) -> None:
    with StateManager(tmp_path / "state") as manager:
        manager.store("named", value_serde=AttrsSerde(Item, name="shop.Item"))
    meta = read_metadata(tmp_path / "state", "named")
    assert meta is not None
    assert "attrs:shop.Item" in str(meta)
