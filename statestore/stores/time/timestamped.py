"""The timestamped key-value store (Kafka Streams' ``TimestampedKeyValueStore``).

Each value carries a timestamp (milliseconds): ``put(key, value,
timestamp_ms=...)``, ``get_with_timestamp(key)``.  RocksDB holds
``timestamp | value`` (:mod:`statestore.stores.time.layout`); the changelog
record holds the serialized value alone, with the timestamp as its CreateTime,
exactly as Kafka Streams' timestamped stores log it, and restore puts the
timestamp back.  A delete is a tombstone stamped with the clock.

Keys, ordering, buffering, commits and lifecycle are those of
:class:`~statestore.stores.typed.KeyValueStore` (see
:mod:`statestore.stores.time.base`).

Thread-safety: not thread-safe (one thread uses a store at a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar, overload

import attrs

from statestore.errors import DeserializationError
from statestore.stores.time.base import TimeStoreBase
from statestore.stores.time.layout import TIMESTAMP_BYTES, join_timestamp, split_timestamp

__all__ = ["TimestampedKeyValueStore", "ValueAndTimestamp"]

K = TypeVar("K")
V = TypeVar("V")


@attrs.frozen
class ValueAndTimestamp(Generic[V]):
    """A value and its timestamp (Kafka Streams' ``ValueAndTimestamp``).  Immutable."""

    value: V
    timestamp_ms: int


class TimestampedKeyValueStore(TimeStoreBase[K, V]):
    """A key-value store whose values carry a timestamp.

    Obtain one from :meth:`statestore.StateManager.timestamped_store`.
    """

    def put(self, key: K, value: V | None, *, timestamp_ms: int | None = None) -> None:
        """Set ``key`` to ``value`` at ``timestamp_ms`` (default: the clock); ``None`` deletes."""
        self._check("put")
        key_bytes = self._key_bytes(key)
        if value is None:
            self._inner.put(key_bytes, None)
            return
        stamp = self._timestamp("timestamp_ms", timestamp_ms)
        self._inner.put(key_bytes, join_timestamp(stamp, self._value_bytes(value)))

    def __setitem__(self, key: K, value: V) -> None:
        """:meth:`put` at the clock's time."""
        self.put(key, value)

    def get_with_timestamp(self, key: K) -> ValueAndTimestamp[V] | None:
        """The value of ``key`` and its timestamp, or ``None`` (uncommitted writes included)."""
        self._check("get")
        data = self._inner.get(self._key_bytes(key))
        return None if data is None else self._decode(data)

    @overload
    def get(self, key: K, default: None = None) -> V | None: ...
    @overload
    def get(self, key: K, default: V) -> V: ...
    def get(self, key: K, default: V | None = None) -> V | None:
        """The value of ``key``, or ``default``."""
        found = self.get_with_timestamp(key)
        return default if found is None else found.value

    def __getitem__(self, key: K) -> V:
        """The value of ``key``; ``KeyError`` if absent."""
        found = self.get_with_timestamp(key)
        if found is None:
            raise KeyError(key)
        return found.value

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` has a value."""
        return self.get_with_timestamp(key) is not None  # type: ignore[arg-type]

    def delete(self, key: K) -> ValueAndTimestamp[V] | None:
        """Delete ``key`` (a tombstone at the next commit); returns the old value and timestamp."""
        old = self.get_with_timestamp(key)
        self._inner.put(self._key_bytes(key), None)
        return old

    def range(
        self, lo: K | None = None, hi: K | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[K, ValueAndTimestamp[V]]]:
        """Entries with ``lo <= key < hi`` by serialized key order (``None``: unbounded)."""
        self._check("range")
        lo_bytes = None if lo is None else self._key_bytes(lo)
        hi_bytes = None if hi is None else self._key_bytes(hi)
        return (
            (self._key(key), self._decode(data))
            for key, data in self._inner.range(lo_bytes, hi_bytes, reverse=reverse)
        )

    def items(self) -> Iterator[tuple[K, ValueAndTimestamp[V]]]:
        """All entries in serialized key order."""
        return self.range()

    def __len__(self) -> int:
        """Exact number of entries (walks the store)."""
        return len(self._inner)

    def _decode(self, data: bytes) -> ValueAndTimestamp[V]:
        if len(data) < TIMESTAMP_BYTES:
            raise DeserializationError(
                self._name,
                "value",
                data,
                f"a timestamped value has at least {TIMESTAMP_BYTES} bytes",
            )
        stamp, value = split_timestamp(data)
        return ValueAndTimestamp(self._value(value), stamp)
