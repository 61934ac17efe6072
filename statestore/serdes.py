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
AttrsSerde        an attrs class as a msgpack map of its fields (nested attrs fields too)
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

import collections.abc
import struct
import types
import typing
from collections.abc import Callable
from typing import Any, Final, Generic, Protocol, TypeVar, cast, runtime_checkable

import attrs
import msgpack

from statestore.errors import SerdeDefinitionError

__all__ = [
    "AttrsSerde",
    "BytesSerde",
    "IntSerde",
    "LongSerde",
    "MsgpackSerde",
    "Serde",
    "StringSerde",
    "serde_for_type",
]

T = TypeVar("T")

_INT64: Final = struct.Struct(">Q")
_SIGN_BIT: Final = 1 << 63
_LONG: Final = struct.Struct(">q")
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


class LongSerde:
    """Kafka's ``Serdes.Long``: a 64-bit signed integer as 8 big-endian bytes (two's complement).

    What Kafka Streams' ``count()`` and ``Serdes.Long`` write, so a changelog
    of longs is read the same on both sides.  Unlike :class:`IntSerde`, byte
    order is not numeric order for negative numbers.  ``bool`` and values
    outside ``[-2**63, 2**63 - 1]`` are rejected.

    Thread-safety: thread-safe (stateless).
    """

    serde_id: Final = "kafka-long"
    """The identity the store metadata records."""

    def serialize(self, obj: int, /) -> bytes:
        """The 8 big-endian bytes of ``obj``."""
        if type(obj) is not int and (isinstance(obj, bool) or not isinstance(obj, int)):
            raise TypeError(f"expected int, got {type(obj).__name__}")
        if not _INT64_MIN <= obj <= _INT64_MAX:
            raise ValueError(f"{obj} does not fit in a signed 64-bit integer")
        return _LONG.pack(obj)

    def deserialize(self, data: bytes, /) -> int:
        """Inverse of :meth:`serialize`; other lengths are a ``ValueError``."""
        if len(data) != 8:
            raise ValueError(f"expected 8 bytes, got {len(data)}")
        return int(_LONG.unpack(data)[0])

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
    bare ``unpackb`` (docs/performance.md).
    """
    return _unpackb(data, strict_map_key=False)


def _unpack_many(values: list[bytes], /) -> list[Any]:
    """``[_unpack(v) for v in values]``, with the loop in C when it can be.

    ``msgpack.unpackb`` with its defaults (``strict_map_key=True``) runs under a
    C-level ``map``; strictness only *rejects* maps whose keys are not ``str`` or
    ``bytes``, so wherever it succeeds its result equals the non-strict one.  If
    any value fails, the whole list is decoded again value by value with
    :func:`_unpack`, which returns the non-strict results or raises the error of
    the first value that cannot be decoded at all.  Measured (load ~6):
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


_Convert = Callable[[Any], Any]


class AttrsSerde(Generic[T]):
    """Instances of one attrs class, as a msgpack map ``{field name: value}``.

    Field values must be msgpack types or attrs instances that the field's
    annotation declares: a field annotated with an attrs class ``C``,
    ``C | None``, ``list[C]``, ``tuple[C, ...]``, ``tuple[C, D]``,
    ``dict[K, C]`` (or ``Sequence``/``Mapping`` of them), at any depth, is
    packed as a map and comes back as ``C``.  A field whose annotation puts an
    attrs class where its bytes could not say which class to build (``C | D``,
    ``C | dict``, a ``set`` or a dict *key* of ``C``) is refused at construction
    (:class:`~statestore.errors.SerdeDefinitionError` naming the field); an
    attrs instance in a field whose annotation does not declare it (``Any``,
    ``object``, ``dict``) is refused when serialized (``TypeError``, wrapped by
    the store in :class:`~statestore.errors.SerializationError`), never turned
    into a plain dict without a word.

    A map lets fields be added later with defaults: old records still load.
    Unknown fields in stored data are a ``TypeError`` from the class's
    ``__init__`` (wrapped by the store).

    The store records the class by ``name`` (default ``<module>.<qualname>``)
    in its metadata, and every later open must name the same.  A class defined
    in ``__main__`` has no name another program can give (a test, the CLI, a
    second script all see it in another module), so it is refused unless
    ``name`` is given: move it into a module and import it, or pass
    ``AttrsSerde(Cart, name="shop.Cart")``.

    Thread-safety: not thread-safe (the reused packer); one instance per store.
    """

    def __init__(self, cls: type[T], *, name: str | None = None) -> None:
        """Serde for instances of the attrs class ``cls``, recorded as ``name`` (class docstring)."""
        if not attrs.has(cls):
            raise SerdeDefinitionError(
                _class_name(cls), None, "is not an attrs class (use MsgpackSerde or a custom serde)"
            )
        if name is None and cls.__module__ == "__main__":
            raise SerdeDefinitionError(
                _class_name(cls),
                None,
                "is defined in __main__: the store records a value class by its module, and"
                " __main__ is another module in every other program that opens the store (a"
                " test, the statestore CLI, a second script), which then gets"
                " StoreMetadataMismatchError. Move the class into a module and import it from"
                f" there, or give it a stable name: AttrsSerde({cls.__qualname__},"
                f' name="myapp.{cls.__qualname__}")',
            )
        self.cls = cls
        self.name = name if name is not None else f"{cls.__module__}.{cls.__qualname__}"
        """The name the store's metadata records for the class."""
        self._names = tuple(f.name for f in attrs.fields(cast(Any, cls)))
        plan = _Plan()
        self._encoders, self._decoders = plan.fields(cls, cls.__qualname__)
        packer = msgpack.Packer(autoreset=True, use_bin_type=True, default=_undeclared_attrs)
        self._pack = packer.pack

    def serialize(self, obj: T, /) -> bytes:
        """msgpack map of the fields of ``obj`` (which must be an instance of ``cls``)."""
        if not isinstance(obj, self.cls):
            raise TypeError(f"expected {self.cls.__name__}, got {type(obj).__name__}")
        fields = {name: getattr(obj, name) for name in self._names}
        for name, encode in self._encoders:
            fields[name] = encode(fields[name])
        return cast(bytes, self._pack(fields))

    def deserialize(self, data: bytes, /) -> T:
        """A new ``cls`` instance from the stored map (nested attrs fields rebuilt)."""
        fields = msgpack.unpackb(data, raw=False, strict_map_key=False)
        if not isinstance(fields, dict):
            raise TypeError(f"expected a msgpack map, found {type(fields).__name__}")
        for name, decode in self._decoders:
            if name in fields:
                fields[name] = decode(fields[name])
        instance: T = cast(Any, self.cls)(**fields)
        return instance

    def __eq__(self, other: object) -> bool:
        """Equal when serializing the same class under the same name."""
        return isinstance(other, AttrsSerde) and other.cls is self.cls and other.name == self.name

    def __hash__(self) -> int:
        """Hash of the class serialized."""
        return hash((AttrsSerde, self.cls))


def _class_name(cls: object) -> str:
    module = getattr(cls, "__module__", "?")
    return f"{module}.{getattr(cls, '__qualname__', repr(cls))}"


def _undeclared_attrs(obj: object) -> object:
    """The packer's ``default``: only an attrs instance no annotation declared gets here."""
    if attrs.has(type(obj)):
        raise TypeError(
            f"a nested {type(obj).__qualname__} instance in a field whose annotation does not"
            f" declare it: annotate the field with {type(obj).__qualname__} (or a list, tuple,"
            " dict or Optional of it) so that it comes back as one"
        )
    raise TypeError(f"can not serialize {type(obj).__name__!r} object")


def _mentions_attrs(tp: object) -> bool:
    if isinstance(tp, type) and attrs.has(tp):
        return True
    return any(_mentions_attrs(arg) for arg in typing.get_args(tp))


def _needs_convert(tp: object) -> bool:
    """Whether a value of ``tp`` changes type through msgpack: an attrs class or a tuple."""
    if tp is tuple or typing.get_origin(tp) is tuple:
        return True
    return _mentions_attrs(tp) or any(_needs_convert(arg) for arg in typing.get_args(tp))


class _Plan:
    """Builds the encoders and decoders of nested attrs fields from the annotations.

    Invariants: ``_classes`` maps each attrs class met to its ``(encode, decode)``
    pair, filled in after its fields, so that a self-referencing class reuses
    the pair through the ``_Lazy`` cells.
    """

    def __init__(self) -> None:
        self._classes: dict[type[Any], tuple[_Lazy, _Lazy]] = {}

    def fields(
        self, cls: type[Any], path: str
    ) -> tuple[tuple[tuple[str, _Convert], ...], tuple[tuple[str, _Convert], ...]]:
        """``((name, encode), ...), ((name, decode), ...)`` for the fields of ``cls`` that need it."""
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - unresolvable annotations: checked when serialized
            hints = {}
        encoders, decoders = [], []
        for field in attrs.fields(cls):
            tp = hints.get(field.name, field.type)
            if isinstance(tp, str) or tp is None:
                continue  # not resolvable: an attrs value there is refused by the packer
            pair = self.convert(tp, f"{path}.{field.name}", _class_name(cls))
            if pair is not None:
                encoders.append((field.name, pair[0]))
                decoders.append((field.name, pair[1]))
        return tuple(encoders), tuple(decoders)

    def convert(self, tp: object, path: str, owner: str) -> tuple[_Convert, _Convert] | None:
        """``(encode, decode)`` of a value of type ``tp``; ``None``: msgpack keeps it as it is.

        Attrs classes are rebuilt, and tuples too (msgpack has one array type).
        """
        if not _needs_convert(tp):
            return None
        if tp is tuple:
            return _same, _to_tuple
        if isinstance(tp, type) and attrs.has(tp):
            return self._attrs_class(tp, path)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            rest = [arg for arg in args if arg is not type(None)]
            if len(rest) == 1:
                inner = self.convert(rest[0], path, owner)
                if inner is not None:
                    enc, dec = inner
                    return (
                        lambda v: None if v is None else enc(v),
                        lambda v: None if v is None else dec(v),
                    )
            if not _mentions_attrs(tp):
                return None  # a tuple among other types: left as msgpack returns it
            raise SerdeDefinitionError(
                owner,
                path,
                f"its type {tp!r} puts an attrs class in a union with other types; the stored"
                " map could not say which to build. Use one attrs class (or Optional of it),"
                " or store it with MsgpackSerde",
            )
        if origin in (list, collections.abc.Sequence, collections.abc.MutableSequence) and args:
            inner = self.convert(args[0], f"{path}[]", owner)
            if inner is not None:
                enc, dec = inner
                return (lambda v: [enc(x) for x in v], lambda v: [dec(x) for x in v])
        if origin is tuple and args:
            if len(args) == 2 and args[1] is Ellipsis:
                inner = self.convert(args[0], f"{path}[]", owner)
                if inner is None:
                    return _same, _to_tuple
                enc, dec = inner
                return (lambda v: [enc(x) for x in v], lambda v: tuple(dec(x) for x in v))
            if args != ((),):
                pairs = [self.convert(arg, f"{path}[{i}]", owner) for i, arg in enumerate(args)]
                encs = [p[0] if p else _same for p in pairs]
                decs = [p[1] if p else _same for p in pairs]
                return (
                    lambda v: [e(x) for e, x in zip(encs, v, strict=True)],
                    lambda v: tuple(d(x) for d, x in zip(decs, v, strict=True)),
                )
        if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping) and args:
            key, value = args
            if _mentions_attrs(key):
                raise SerdeDefinitionError(
                    owner,
                    path,
                    f"its type {tp!r} has attrs instances as dict keys; msgpack"
                    " maps cannot have map keys here: key the dict by a field of the class",
                )
            inner = self.convert(value, f"{path}{{}}", owner)
            if inner is not None:
                enc, dec = inner
                return (
                    lambda v: {k: enc(x) for k, x in v.items()},
                    lambda v: {k: dec(x) for k, x in v.items()},
                )
        if not _mentions_attrs(tp):
            return None  # a tuple inside a shape left as msgpack returns it
        raise SerdeDefinitionError(
            owner,
            path,
            f"its type {tp!r} holds attrs instances in a shape this serde cannot rebuild"
            " (supported: C, C | None, list[C], tuple[C, ...], tuple[C, D], dict[K, C], nested)",
        )

    def _attrs_class(self, cls: type[Any], path: str) -> tuple[_Convert, _Convert]:
        known = self._classes.get(cls)
        if known is not None:
            return known
        enc_cell, dec_cell = _Lazy(), _Lazy()
        self._classes[cls] = (enc_cell, dec_cell)
        encoders, decoders = self.fields(cls, path)
        names = tuple(f.name for f in attrs.fields(cls))

        def encode(value: Any) -> dict[str, Any]:
            if not isinstance(value, cls):
                raise TypeError(
                    f"field {path} is declared {cls.__qualname__}, got {type(value).__name__}"
                )
            out = {name: getattr(value, name) for name in names}
            for name, enc in encoders:
                out[name] = enc(out[name])
            return out

        def decode(value: Any) -> Any:
            if not isinstance(value, dict):
                raise TypeError(
                    f"field {path}: expected a map for {cls.__qualname__},"
                    f" found {type(value).__name__}"
                )
            for name, dec in decoders:
                if name in value:
                    value[name] = dec(value[name])
            return cls(**value)

        enc_cell.target, dec_cell.target = encode, decode
        return enc_cell, dec_cell


class _Lazy:
    """A converter filled in after it is handed out (self-referencing classes)."""

    target: _Convert

    def __call__(self, value: Any) -> Any:
        return self.target(value)


def _same(value: Any) -> Any:
    return value


def _to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


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
