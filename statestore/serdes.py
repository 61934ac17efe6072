"""Serdes: how keys and values become bytes, once, at the top of a store.

A serde is any object with ``serialize(obj) -> bytes`` and
``deserialize(data) -> obj`` (the :class:`Serde` protocol).  Built in:

================  ==============================================================
serde             bytes
================  ==============================================================
BytesSerde        the bytes themselves (``bytes``, ``bytearray`` and ``memoryview`` in)
StringSerde       UTF-8 (the default for keys)
IntSerde          8 bytes, big-endian two's complement with the sign bit flipped
MsgpackSerde      msgpack with a reused ``Packer`` (the default for values)
AttrsSerde        an attrs class as a msgpack map of its fields
================  ==============================================================

Ordering: range scans follow the serialized key bytes (unsigned, lexicographic,
shorter prefix first).  UTF-8 keeps code-point order for strings.  :class:`IntSerde`
flips the sign bit so that byte order is numeric order over the whole int64
range (-1 sorts before 0): note that this differs from Kafka's ``LongSerializer``
(plain two's complement, where negative numbers sort after positive ones).

Thread-safety: :class:`MsgpackSerde` and :class:`AttrsSerde` reuse one
``msgpack.Packer`` and are therefore *not* thread-safe; the store builder gives
every store its own instance.  The other serdes are stateless and thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, Generic, Protocol, TypeVar, cast, runtime_checkable

import attrs
import msgpack

__all__ = [
    "AttrsSerde",
    "BytesSerde",
    "IntSerde",
    "MsgpackSerde",
    "Serde",
    "StringSerde",
    "serde_for_type",
]

T = TypeVar("T")

_INT64: Final = struct.Struct(">Q")
_SIGN_BIT: Final = 1 << 63
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


@runtime_checkable
class Serde(Protocol[T]):
    """Turns objects of one type into bytes and back.

    ``serialize`` may raise any exception for input it cannot handle (the store
    wraps it in :class:`~statestore.errors.SerializationError` before anything
    is written); ``deserialize`` likewise (wrapped in
    :class:`~statestore.errors.DeserializationError`).
    """

    def serialize(self, obj: T, /) -> bytes:
        """The bytes of ``obj``."""
        ...

    def deserialize(self, data: bytes, /) -> T:
        """The object whose bytes are ``data``."""
        ...


class BytesSerde:
    """Bytes in, bytes out (``bytearray`` and ``memoryview`` are copied to ``bytes``).

    Thread-safety: thread-safe (stateless).
    """

    def serialize(self, obj: bytes, /) -> bytes:
        """``obj`` as ``bytes``; anything else is a ``TypeError``."""
        if type(obj) is bytes:
            return obj
        if isinstance(obj, bytes | bytearray | memoryview):
            return bytes(obj)
        raise TypeError(f"expected bytes, got {type(obj).__name__}")

    def deserialize(self, data: bytes, /) -> bytes:
        """``data`` itself."""
        return data

    def __eq__(self, other: object) -> bool:
        """All instances are interchangeable."""
        return type(other) is type(self)

    def __hash__(self) -> int:
        """Hash of the class (instances are interchangeable)."""
        return hash(type(self))


class StringSerde:
    """UTF-8 strings (the default key serde).

    Thread-safety: thread-safe (stateless).
    """

    def serialize(self, obj: str, /) -> bytes:
        """UTF-8 bytes of ``obj``; a non-``str`` is a ``TypeError``."""
        if not isinstance(obj, str):
            raise TypeError(f"expected str, got {type(obj).__name__}")
        return obj.encode("utf-8")

    def deserialize(self, data: bytes, /) -> str:
        """Decode UTF-8 (strict)."""
        return data.decode("utf-8")

    def __eq__(self, other: object) -> bool:
        """All instances are interchangeable."""
        return type(other) is type(self)

    def __hash__(self) -> int:
        """Hash of the class (instances are interchangeable)."""
        return hash(type(self))


class IntSerde:
    """64-bit signed integers whose byte order is their numeric order.

    Encoding: ``(value + 2**63)`` as 8 unsigned big-endian bytes, that is two's
    complement with the sign bit flipped.  ``bool`` and values outside
    ``[-2**63, 2**63 - 1]`` are rejected.

    Thread-safety: thread-safe (stateless).
    """

    def serialize(self, obj: int, /) -> bytes:
        """The 8 ordered bytes of ``obj``."""
        if type(obj) is not int and (isinstance(obj, bool) or not isinstance(obj, int)):
            raise TypeError(f"expected int, got {type(obj).__name__}")
        if not _INT64_MIN <= obj <= _INT64_MAX:
            raise ValueError(f"{obj} does not fit in a signed 64-bit integer")
        return _INT64.pack(obj + _SIGN_BIT)

    def deserialize(self, data: bytes, /) -> int:
        """Inverse of :meth:`serialize`; other lengths are a ``ValueError``."""
        if len(data) != 8:
            raise ValueError(f"expected 8 bytes, got {len(data)}")
        return int(_INT64.unpack(data)[0]) - _SIGN_BIT

    def __eq__(self, other: object) -> bool:
        """All instances are interchangeable."""
        return type(other) is type(self)

    def __hash__(self) -> int:
        """Hash of the class (instances are interchangeable)."""
        return hash(type(self))


def _unpack(data: bytes, /, _unpackb: Callable[..., Any] = msgpack.unpackb) -> Any:
    """``msgpack.unpackb(data, raw=False, strict_map_key=False)`` (``raw=False`` is its default).

    A plain function rather than ``functools.partial(msgpack.unpackb, ...)``:
    a partial with keyword arguments copies them into a new dict on every call,
    which measured 0.4-0.8 us per value (a third of decoding a 110-byte map);
    a function passing the keyword through vectorcall costs ~50 ns over a
    bare ``unpackb`` (issue 18).
    """
    return _unpackb(data, strict_map_key=False)


def _unpack_many(values: list[bytes], /) -> list[Any]:
    """``[_unpack(v) for v in values]``, with the loop in C when it can be.

    ``msgpack.unpackb`` with its defaults (``strict_map_key=True``) runs under a
    C-level ``map``; strictness only *rejects* maps whose keys are not ``str`` or
    ``bytes``, so wherever it succeeds its result equals the non-strict one.  If
    any value fails, the whole list is decoded again value by value with
    :func:`_unpack`, which returns the non-strict results or raises the error of
    the first value that cannot be decoded at all.  Measured (issue 18, load ~6):
    1.0x (100 values) to 1.1-1.3x (1,000 values of ~110 bytes) the speed of a list
    comprehension over :func:`_unpack`.
    """
    try:
        return list(map(msgpack.unpackb, values))
    except Exception:  # noqa: BLE001 - a non-str map key, or a bad value: decide one by one
        return list(map(_unpack, values))


class MsgpackSerde:
    """msgpack (the default value serde): ``str`` stays ``str``, ``bytes`` stays ``bytes``.

    Tuples come back as lists (msgpack has one array type); maps may have
    non-string keys.  One ``msgpack.Packer`` is reused for every call (about
    1.6x faster than ``msgpack.packb``).

    Thread-safety: not thread-safe (the reused packer); one instance per store.
    """

    def __init__(self) -> None:
        """Create the reused packer."""
        packer = msgpack.Packer(autoreset=True, use_bin_type=True)
        self.pack: Callable[[Any], bytes] = packer.pack
        """The reused packer's ``pack`` (what :meth:`serialize` calls; stores call it directly)."""
        self.unpack: Callable[[bytes], Any] = _unpack
        """``msgpack.unpackb`` with this serde's options (what :meth:`deserialize` calls)."""
        self.try_unpack: Callable[[bytes], Any] = msgpack.unpackb
        """A fast first try at :attr:`unpack`: ``msgpack.unpackb`` with its defaults, a C call.

        Wherever it succeeds its result equals :attr:`unpack`'s; it *rejects* maps
        whose keys are not ``str`` or ``bytes`` (``strict_map_key``), which
        :attr:`unpack` accepts, so a caller falls back to :attr:`unpack` on any error.
        """
        self.unpack_many: Callable[[list[bytes]], list[Any]] = _unpack_many
        """:attr:`unpack` of each value of a list, in order (stores decode batches with it)."""

    def serialize(self, obj: Any, /) -> bytes:
        """msgpack bytes of ``obj``; unsupported types raise ``TypeError``."""
        return self.pack(obj)

    def deserialize(self, data: bytes, /) -> Any:
        """The object packed in ``data`` (exactly one msgpack object)."""
        return self.unpack(data)

    def __eq__(self, other: object) -> bool:
        """All instances produce the same bytes."""
        return type(other) is type(self)

    def __hash__(self) -> int:
        """Hash of the class (instances are interchangeable)."""
        return hash(type(self))


class AttrsSerde(Generic[T]):
    """Instances of one attrs class, as a msgpack map ``{field name: value}``.

    Field values must be msgpack types (nested attrs instances are packed as
    maps but come back as dicts).  A map lets fields be added later with
    defaults: old records still load.  Unknown fields in stored data are a
    ``TypeError`` from the class's ``__init__`` (wrapped by the store).

    Thread-safety: not thread-safe (the reused packer); one instance per store.
    """

    def __init__(self, cls: type[T]) -> None:
        """Serde for instances of the attrs class ``cls``."""
        if not attrs.has(cls):
            raise TypeError(f"{cls!r} is not an attrs class")
        self.cls = cls
        self._names = tuple(f.name for f in attrs.fields(cast(Any, cls)))
        packer = msgpack.Packer(autoreset=True, use_bin_type=True, default=_nested_attrs)
        self._pack = packer.pack

    def serialize(self, obj: T, /) -> bytes:
        """msgpack map of the fields of ``obj`` (which must be an instance of ``cls``)."""
        if not isinstance(obj, self.cls):
            raise TypeError(f"expected {self.cls.__name__}, got {type(obj).__name__}")
        return cast(bytes, self._pack({name: getattr(obj, name) for name in self._names}))

    def deserialize(self, data: bytes, /) -> T:
        """A new ``cls`` instance from the stored map."""
        fields = msgpack.unpackb(data, raw=False, strict_map_key=False)
        if not isinstance(fields, dict):
            raise TypeError(f"expected a msgpack map, found {type(fields).__name__}")
        instance: T = cast(Any, self.cls)(**fields)
        return instance

    def __eq__(self, other: object) -> bool:
        """Equal when serializing the same class."""
        return isinstance(other, AttrsSerde) and other.cls is self.cls

    def __hash__(self) -> int:
        """Hash of the class serialized."""
        return hash((AttrsSerde, self.cls))


def _nested_attrs(obj: object) -> object:
    if attrs.has(type(obj)):
        return attrs.asdict(cast(Any, obj), recurse=True)
    raise TypeError(f"can not serialize {type(obj).__name__!r} object")


def serde_for_type(tp: type[Any]) -> Serde[Any]:
    """A new serde for ``tp``: ``bytes``, ``str``, ``int`` or an attrs class.

    Raises ``TypeError`` for any other type (use an explicit serde).
    """
    if tp is bytes:
        return BytesSerde()
    if tp is str:
        return StringSerde()
    if tp is int:
        return IntSerde()
    if isinstance(tp, type) and attrs.has(tp):
        return AttrsSerde(tp)
    raise TypeError(f"no built-in serde for {tp!r}: pass key_serde/value_serde explicitly")
