"""Concurrent readers of a store: its committed state, from any thread, never its pending writes.

A :class:`StoreReader` is the read-only face of a store for every thread
other than the store's writer (``store.reader()``; Kafka Streams' interactive
queries use a ``ReadOnlyKeyValueStore`` the same way).  It reads RocksDB only,
never the write buffer, so:

* it sees **committed** state: RocksDB holds a commit only after the
  changelog's fsync returned (:mod:`statestore.stores.change_logging`,
  :mod:`statestore.txn.coordinator` T5), so a reader never sees a write
  that a crash could take back, nor anyone's pending writes;
* each call is **consistent as of one moment** and never shows part of a
  commit: ``get`` reads one key, ``get_many`` one RocksDB multi-get (one
  implicit snapshot), ``range``/``prefix_scan``/``items``/``keys``/``values``
  one RocksDB iterator created by the call, which pins its snapshot until the
  iterator is exhausted or dropped (it stays valid across later commits and
  sees none of them);
* over several partitions, a call opens its per-partition views (iterators)
  while holding the coordinator's visibility lock, which a transaction
  holds while it applies its partitions to RocksDB (T5): all views are of the
  same set of commits;
* it **never waits for an fsync**: the visibility lock is held only while a
  transaction's RocksDB writes run (memtable inserts) and, by readers, while
  their views are opened (microseconds).  A one-partition commit does not
  take it (one ``WriteBatch`` is atomic on its own).

Two calls are two moments: a ``get`` followed by a ``range`` may see
different commits between them.

What it does not do: see the writer's buffered writes (the store itself
does, for its writer: read-your-writes); keep answering after the store is
closed (a closed engine raises :class:`~statestore.errors.InvalidStateStoreError`;
a reopened store has a new reader).  After a failed commit it keeps answering
from the last state applied to RocksDB until the store is closed or reopened.

Invariants: ``_engines[i]`` is partition ``i``'s engine; a key is read from
the partition :func:`statestore.partitioner.partition_for` picks, as the
write path routes it.

Thread-safety: thread-safe.  ``_visibility`` (the coordinator's lock) is taken
only by multi-partition reads, only to open views.  ``_key_lock`` guards the
key serde when it is not known to be thread-safe (msgpack and attrs serdes
reuse one packer); values are decoded with the serde's ``deserialize``, which
the built-in serdes implement without shared state.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, Final, Generic, TypeVar, overload

from statestore.errors import (
    DeserializationError,
    InvalidStateStoreError,
    SerializationError,
    StateStoreError,
)
from statestore.partitioner import partition_for
from statestore.serdes import BytesSerde, IntSerde, Serde, StringSerde
from statestore.stores.bytes_store import prefix_upper_bound
from statestore.stores.engine import EngineView, RocksDBEngine

__all__ = ["StoreReader"]

K = TypeVar("K")
V = TypeVar("V")

_KEY: Final = itemgetter(0)
_MISSING: Final[Any] = object()
_CHUNK: Final = 256
"""Entries a scan reads from RocksDB and decodes at a time."""
_THREAD_SAFE_KEY_SERDES: Final[tuple[type[Any], ...]] = (BytesSerde, StringSerde, IntSerde)
"""Key serdes without shared state (msgpack and attrs serdes reuse one packer)."""


class StoreReader(Generic[K, V]):
    """The committed state of one store, readable from any number of threads (module docstring)."""

    def __init__(
        self,
        *,
        name: str,
        engines: Sequence[RocksDBEngine],
        key_serde: Serde[K],
        value_serde: Serde[V],
        visibility: threading.Lock,
    ) -> None:
        """A reader of ``engines`` (by partition number), decoding with the store's serdes.

        ``visibility`` is the transaction coordinator's lock around T5 (used
        when there are several partitions).  Built by
        :func:`statestore.stores.builder.build_store`; applications call
        :meth:`statestore.KeyValueStore.reader`.
        """
        self._name = name
        self._engines = tuple(engines)
        self._count = len(self._engines)
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._visibility = visibility
        self._key_lock: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext()
            if type(key_serde) in _THREAD_SAFE_KEY_SERDES
            else threading.Lock()
        )
        self._de_value: Callable[[bytes], V] = value_serde.deserialize
        self._de_key: Callable[[bytes], K] = key_serde.deserialize

    @property
    def name(self) -> str:
        """The store's name."""
        return self._name

    @property
    def partitions(self) -> int:
        """Number of partitions."""
        return self._count

    # ------------------------------------------------------------- serdes

    def _key_bytes(self, key: Any, serde: Serde[Any] | None = None, role: str = "key") -> bytes:
        if key is None:
            raise SerializationError(self._name, role, "NoneType", "keys must not be None")
        try:
            if serde is not None:
                return serde.serialize(key)
            with self._key_lock:
                return self._key_serde.serialize(key)
        except Exception as exc:
            raise SerializationError(self._name, role, type(key).__name__, str(exc)) from exc

    def _value(self, data: bytes) -> V:
        try:
            return self._de_value(data)
        except Exception as exc:
            raise DeserializationError(self._name, "value", data, str(exc)) from exc

    def _entry(self, key: bytes, value: bytes) -> tuple[K, V]:
        try:
            return self._de_key(key), self._de_value(value)
        except Exception as exc:
            raise DeserializationError(self._name, "entry", key, str(exc)) from exc

    def _named(self, exc: InvalidStateStoreError) -> InvalidStateStoreError:
        """An engine's "closed" error, naming this store (the engine knows only its directory)."""
        return InvalidStateStoreError(self._name, exc.state, exc.operation)

    def _engine_of(self, key: bytes) -> RocksDBEngine:
        if self._count == 1:
            return self._engines[0]
        return self._engines[partition_for(key, self._count)]

    # ------------------------------------------------------------- point reads

    @overload
    def get(self, key: K, default: None = None) -> V | None: ...
    @overload
    def get(self, key: K, default: V) -> V: ...
    def get(self, key: K, default: V | None = None) -> V | None:
        """The committed value of ``key``, or ``default``."""
        key_bytes = self._key_bytes(key)
        try:
            data = self._engine_of(key_bytes).get(key_bytes)
        except InvalidStateStoreError as exc:
            raise self._named(exc) from exc
        return default if data is None else self._value(data)

    def __getitem__(self, key: K) -> V:
        """The committed value of ``key``; ``KeyError`` if absent."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` has a committed value."""
        key_bytes = self._key_bytes(key)
        try:
            return self._engine_of(key_bytes).get(key_bytes) is not None
        except InvalidStateStoreError as exc:
            raise self._named(exc) from exc

    def get_many(self, keys: Iterable[K], default: V | None = None) -> list[V | None]:
        """The committed values of ``keys`` in order (``default`` where absent), all as of one moment."""
        wanted = [self._key_bytes(key) for key in keys]
        try:
            if self._count == 1:
                found = self._engines[0].get_many(wanted)
            else:
                found = self._get_many_partitioned(wanted)
        except InvalidStateStoreError as exc:
            raise self._named(exc) from exc
        return [default if data is None else self._value(data) for data in found]

    def _get_many_partitioned(self, keys: list[bytes]) -> list[bytes | None]:
        by_partition: dict[int, list[int]] = {}
        for index, key in enumerate(keys):
            by_partition.setdefault(partition_for(key, self._count), []).append(index)
        if len(by_partition) == 1:  # one partition: its multi-get is one moment already
            (number,) = by_partition
            return self._engines[number].get_many(keys)
        views: dict[int, EngineView] = {}
        try:
            with self._visibility:  # every view sees the same transactions
                for number in by_partition:
                    views[number] = self._engines[number].view()
            values: list[bytes | None] = [None] * len(keys)
            for number, indices in by_partition.items():
                found = views[number].get_many([keys[i] for i in indices])
                for index, value in zip(indices, found, strict=True):
                    values[index] = value
            return values
        finally:
            for view in views.values():
                view.close()

    # ------------------------------------------------------------- scans

    def range(
        self, lo: K | None = None, hi: K | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[K, V]]:
        """Committed entries with ``lo <= key < hi`` in serialized key order, as of this call."""
        lo_bytes = None if lo is None else self._key_bytes(lo)
        hi_bytes = None if hi is None else self._key_bytes(hi)
        if lo_bytes is not None and hi_bytes is not None and lo_bytes > hi_bytes:
            return iter(())
        return self._scan(lo_bytes, hi_bytes, reverse=reverse)

    def reverse_range(self, lo: K | None = None, hi: K | None = None) -> Iterator[tuple[K, V]]:
        """:meth:`range` in descending key order."""
        return self.range(lo, hi, reverse=True)

    def prefix_scan(
        self, prefix: Any, prefix_serde: Serde[Any] | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[K, V]]:
        """Committed entries whose serialized key starts with the serialized ``prefix``, as of this call."""
        lo = self._key_bytes(prefix, prefix_serde, "key" if prefix_serde is None else "prefix")
        return self._scan(lo, prefix_upper_bound(lo), reverse=reverse)

    def items(self) -> Iterator[tuple[K, V]]:
        """Every committed entry in serialized key order, as of this call."""
        return self._scan(None, None, reverse=False)

    def keys(self) -> Iterator[K]:
        """Every committed key in serialized key order, as of this call."""
        return (key for key, _value in self.items())

    def values(self) -> Iterator[V]:
        """Every committed value in serialized key order, as of this call."""
        return (value for _key, value in self.items())

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate of the number of entries."""
        try:
            return sum(engine.approximate_num_entries() for engine in self._engines)
        except InvalidStateStoreError as exc:
            raise self._named(exc) from exc

    def _scan(self, lo: bytes | None, hi: bytes | None, *, reverse: bool) -> Iterator[tuple[K, V]]:
        """The raw scan opened now (so it is of this moment), decoded lazily in chunks."""
        try:
            if self._count == 1:
                raw: Iterator[tuple[bytes, bytes]] = self._engines[0].items(lo, hi, reverse=reverse)
            else:
                with self._visibility:  # every partition's iterator sees the same transactions
                    sources = [engine.items(lo, hi, reverse=reverse) for engine in self._engines]
                raw = heapq.merge(*sources, key=_KEY, reverse=reverse)
        except InvalidStateStoreError as exc:
            raise self._named(exc) from exc
        return itertools.chain.from_iterable(map(self._decode_chunk, _chunks(raw, self._name)))

    def _decode_chunk(self, chunk: list[tuple[bytes, bytes]]) -> list[tuple[K, V]]:
        entry = self._entry
        return [entry(key, value) for key, value in chunk]


def _chunks(
    source: Iterator[tuple[bytes, bytes]], store: str
) -> Iterator[list[tuple[bytes, bytes]]]:
    """``source`` in lists of :data:`_CHUNK` entries; a non-store error, or the engine's
    "closed", names the store."""
    last = b""
    while True:
        try:
            chunk = list(itertools.islice(source, _CHUNK))
        except InvalidStateStoreError as exc:  # closed meanwhile: named for the store
            raise InvalidStateStoreError(store, exc.state, exc.operation) from exc
        except StateStoreError:
            raise
        except Exception as exc:
            raise DeserializationError(store, "entry", last, str(exc)) from exc
        if not chunk:
            return
        last = chunk[-1][0]
        yield chunk
        if len(chunk) < _CHUNK:
            return
