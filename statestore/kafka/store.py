"""A store partition in distributed mode: reads from RocksDB, writes buffered until the commit.

:class:`TaskStore` is what user code gets for the record's partition: the
read/write surface of :class:`statestore.KeyValueStore` (``get``, ``put``,
``delete``, ``range``, ``prefix_scan``, ``items``, the mapping protocol), with
read-your-writes over a buffer.  It has no ``commit()``: the runtime commits
every store of the process in one Kafka transaction and only then applies the
buffer to RocksDB (:meth:`TaskStore.apply`), so RocksDB never holds
uncommitted data (the property Kafka Streams gets from KIP-892 since 4.4).

Invariants: ``_pending`` holds exactly the writes since the last
:meth:`TaskStore.apply` or :meth:`TaskStore.drop_pending` (serialized key ->
serialized value, ``None`` = tombstone); the engine's applied offset is the
next changelog offset after the last committed record of this partition.

Thread-safety: not thread-safe; the processor's thread uses it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

import attrs

from statestore.errors import InvalidStateStoreError
from statestore.serdes import MsgpackSerde, Serde, StringSerde
from statestore.stores.bytes_store import prefix_upper_bound
from statestore.stores.engine import RocksDBEngine

__all__ = ["KafkaStoreSpec", "TaskStore"]

K = TypeVar("K")
V = TypeVar("V")


@attrs.frozen(kw_only=True)
class KafkaStoreSpec:
    """A store the processor keeps per partition: name and serdes.  Immutable."""

    name: str
    key_serde: Serde[Any] = attrs.field(factory=StringSerde)
    value_serde: Serde[Any] = attrs.field(factory=MsgpackSerde)


class TaskStore(Generic[K, V]):
    """One partition of one store: RocksDB plus the writes of the current transaction."""

    def __init__(
        self,
        *,
        name: str,
        partition: int,
        engine: RocksDBEngine,
        key_serde: Serde[K],
        value_serde: Serde[V],
    ) -> None:
        self._name = name
        self._partition = partition
        self._engine = engine
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._pending: dict[bytes, bytes | None] = {}
        self._closed = False
        self.applied_offset = engine.applied_offset() or 0
        """The next changelog offset after the last committed record of this partition."""

    @property
    def name(self) -> str:
        """The store's name."""
        return self._name

    @property
    def partition(self) -> int:
        """The partition this store instance holds."""
        return self._partition

    @property
    def engine(self) -> RocksDBEngine:
        """The RocksDB engine (the runtime applies commits and restores through it)."""
        return self._engine

    def _check(self, operation: str) -> None:
        if self._closed:
            raise InvalidStateStoreError(f"{self._name}-{self._partition}", "closed", operation)

    # -- reads -----------------------------------------------------------------------

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value of ``key`` (buffered writes first), or ``default``."""
        self._check("get")
        raw_key = self._key_serde.serialize(key)
        raw = self._pending[raw_key] if raw_key in self._pending else self._engine.get(raw_key)
        return default if raw is None else self._value_serde.deserialize(raw)

    def __getitem__(self, key: K) -> V:
        value = self.get(key, None)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return self.get(key, None) is not None  # type: ignore[arg-type]

    def _merged(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        pending = sorted(
            (k, v)
            for k, v in self._pending.items()
            if (lo is None or k >= lo) and (hi is None or k < hi)
        )
        shadowed = {k for k, _ in pending}
        stored = ((k, v) for k, v in self._engine.items(lo, hi) if k not in shadowed)
        for key, value in heapq.merge(stored, pending, key=lambda entry: entry[0]):
            if value is not None:
                yield key, value

    def range(self, lo: K | None = None, hi: K | None = None) -> Iterator[tuple[K, V]]:
        """Entries with ``lo <= key < hi`` in serialized-key order (``None``: unbounded)."""
        self._check("range")
        raw_lo = None if lo is None else self._key_serde.serialize(lo)
        raw_hi = None if hi is None else self._key_serde.serialize(hi)
        for key, value in self._merged(raw_lo, raw_hi):
            yield self._key_serde.deserialize(key), self._value_serde.deserialize(value)

    def prefix_scan(self, prefix: K) -> Iterator[tuple[K, V]]:
        """Entries whose serialized key starts with the serialized ``prefix``."""
        self._check("prefix_scan")
        raw = self._key_serde.serialize(prefix)
        for key, value in self._merged(raw, prefix_upper_bound(raw)):
            yield self._key_serde.deserialize(key), self._value_serde.deserialize(value)

    def items(self) -> Iterator[tuple[K, V]]:
        """Every entry, in serialized-key order."""
        return self.range()

    # -- writes ----------------------------------------------------------------------

    def put(self, key: K, value: V | None) -> None:
        """Buffer a write (``None``: delete) until the runtime's next commit."""
        self._check("put")
        raw_key = self._key_serde.serialize(key)
        self._pending[raw_key] = None if value is None else self._value_serde.serialize(value)

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def delete(self, key: K) -> V | None:
        """Buffer a tombstone for ``key``; returns the value it had."""
        old = self.get(key)
        self.put(key, None)
        return old

    def __delitem__(self, key: K) -> None:
        if self.delete(key) is None:
            raise KeyError(key)

    # -- runtime side ----------------------------------------------------------------

    @property
    def pending(self) -> Mapping[bytes, bytes | None]:
        """The buffered writes (serialized), in the order first written."""
        return self._pending

    def drop_pending(self) -> int:
        """Forget the buffered writes (an aborted transaction); the count dropped."""
        count = len(self._pending)
        self._pending.clear()
        return count

    def apply(self, applied_offset: int, meta: Mapping[bytes, bytes]) -> None:
        """Write the buffer and ``applied_offset`` (+ ``meta``) in one WriteBatch; clear the buffer."""
        self._engine.write(list(self._pending.items()), applied_offset, meta=meta)
        self._pending.clear()
        self.applied_offset = applied_offset

    def close(self, *, flush: bool = True) -> None:
        """Drop the buffer and close RocksDB (idempotent), releasing its lock for a new owner."""
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        self._engine.close(flush=flush)
