"""The key-value store with a time to live: :class:`TtlKeyValueStore` and its reader.

A timestamped key-value store (RocksDB ``timestamp | value``, the changelog
record ``value`` with the timestamp as its CreateTime) whose values expire
``ttl_ms`` after their timestamp (:class:`~statestore.stores.time.settings.TtlSettings`).
Expiry is enforced in four places, all with the same rule (a value has
expired when ``timestamp <= now - ttl_ms``, ``now`` being the manager's
clock):

1. **reads** (``get``, ``get_many``, ``range``, ``prefix_scan``, the
   :class:`TtlStoreReader` snapshots, the aio API through them) skip an
   expired value, the buffered writes of the writer included;
2. **the sweep** (:meth:`TtlKeyValueStore.expire`, run by the manager's
   commit every ``sweep_interval_ms``) buffers a tombstone for each key
   whose value (committed or buffered) has expired, so the next commit
   writes it through the normal commit path, in the same transaction as
   the other writes; a key written again before the commit keeps its new
   value (the put replaces the buffered tombstone, and the sweep itself
   sees buffered writes, never a stale committed value);
3. **the cleaner** (``LogConfig.record_ttl_ms``) removes expired records
   below the cleaning barrier as it removes shadowed ones
   (:class:`changelog.cleaner.recopy.Filter`); tombstones then leave by the
   delete horizon;
4. **restore** applies a value that has expired by restore time as a delete
   (:func:`~statestore.stores.time.layout.restored_pairs`), in a full and an
   incremental restore alike.

Because ``now`` only moves forward (a wall clock that steps back is the one
thing this cannot defend against), what a read once hid as expired stays
hidden: no later restore, sweep or cleaning pass brings it back.

Thread-safety: :class:`TtlKeyValueStore` is not thread-safe (its writer
thread uses it); :class:`TtlStoreReader` may be used from any thread, like
:class:`~statestore.stores.reader.StoreReader`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar, overload

import attrs

from statestore.errors import (
    DeserializationError,
    SerializationError,
    UnsupportedStoreOperationError,
)
from statestore.serdes import Serde
from statestore.stores.reader import StoreReader
from statestore.stores.time.base import TimeStoreBase
from statestore.stores.time.layout import TIMESTAMP, TIMESTAMP_BYTES, join_timestamp
from statestore.stores.time.settings import TtlSettings
from statestore.stores.time.timestamped import ValueAndTimestamp
from statestore.stores.typed import KeyValueStore

__all__ = ["TtlCounts", "TtlKeyValueStore", "TtlStoreReader"]

K = TypeVar("K")
V = TypeVar("V")

_SWEEP_CHUNK = 1024
"""Entries the sweep reads per RocksDB scan step."""
_TOMBSTONE_OVERHEAD_BYTES = 16
"""What a tombstone costs in a record batch besides its key (length, attributes, deltas,
a null value): an upper bound for small keys."""
_SWEEP_BUDGET_BYTES = 256 * 1024
"""A sweep's tombstone bytes when the store has no local changelog (distributed mode): a
quarter of the producer's default ``message.max.bytes``."""


@attrs.define
class TtlCounts:
    """What a TTL store's expiry did since it was opened (for metrics and ``inspect``).

    Thread-safety: written by the store's writer thread (reads by readers are
    counted too: an integer increment, so a count may lag by one under races).
    """

    expired_reads: int = 0
    """Values a read found expired and did not return."""
    expired_swept: int = 0
    """Tombstones the sweep buffered for expired keys."""
    sweeps: int = 0
    """Sweeps run."""
    last_sweep_ms: int | None = None
    """The clock at the last sweep."""


def _unpack_stamp(data: bytes) -> int:
    return int(TIMESTAMP.unpack_from(data)[0])


class _Decoder(Generic[K, V]):
    """What a TTL store and its readers share: the serdes, the expiry rule, the counts.

    Thread-safety: stateless apart from ``counts`` (see :class:`TtlCounts`).
    """

    def __init__(self, store: TimeStoreBase[K, V], ttl_ms: int, now_ms: Callable[[], int]) -> None:
        self.store = store
        self.name = store.name
        self.ttl_ms = ttl_ms
        self.now_ms = now_ms
        self.counts = TtlCounts()
        self.key_serde = store.key_serde
        self.value_serde = store.value_serde

    def cutoff(self) -> int:
        """A value stamped at or before this has expired."""
        return self.now_ms() - self.ttl_ms

    def live(self, data: bytes | None, cutoff: int) -> bytes | None:
        """``data`` (``timestamp | value``) unless it has expired (counted) or is absent."""
        if data is None:
            return None
        if len(data) < TIMESTAMP_BYTES:
            raise DeserializationError(
                self.name,
                "value",
                data,
                f"a TTL store's value has at least {TIMESTAMP_BYTES} bytes",
            )
        if _unpack_stamp(data) <= cutoff:
            self.counts.expired_reads += 1
            return None
        return data

    def key_bytes(self, key: Any, prefix_serde: Serde[Any] | None = None) -> bytes:
        serde = self.key_serde if prefix_serde is None else prefix_serde
        if key is None:
            raise SerializationError(self.name, "key", "NoneType", "keys must not be None")
        try:
            return serde.serialize(key)
        except Exception as exc:
            raise SerializationError(self.name, "key", type(key).__name__, str(exc)) from exc

    def key(self, data: bytes) -> K:
        try:
            return self.key_serde.deserialize(data)
        except Exception as exc:
            raise DeserializationError(self.name, "key", data, str(exc)) from exc

    def value(self, data: bytes) -> V:
        """The value of a live ``timestamp | value``."""
        try:
            return self.value_serde.deserialize(data[TIMESTAMP_BYTES:])
        except Exception as exc:
            raise DeserializationError(self.name, "value", data, str(exc)) from exc

    def values(self, found: list[bytes | None], default: V | None) -> list[V | None]:
        cutoff = self.cutoff()
        out: list[V | None] = []
        for data in found:
            live = self.live(data, cutoff)
            out.append(default if live is None else self.value(live))
        return out

    def entries(self, source: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[K, V]]:
        cutoff = self.cutoff()  # one "now" per scan, taken when it starts
        live = self.live
        for key, data in source:
            if live(data, cutoff) is not None:
                yield self.key(key), self.value(data)


class TtlKeyValueStore(TimeStoreBase[K, V]):
    """A key-value store whose values expire (module docstring).

    Obtain one from :meth:`statestore.StateManager.ttl_store`.  The API is the
    key-value store's; ``put`` takes ``timestamp_ms`` when the TTL counts from
    the record's timestamp.
    """

    def __init__(
        self,
        inner: KeyValueStore[bytes, bytes],
        ttl: TtlSettings,
        *,
        key_serde: Serde[K],
        value_serde: Serde[V],
        now_ms: Callable[[], int],
    ) -> None:
        """Serialize over ``inner`` (open, restored, timestamped value format); expire by ``ttl``."""
        super().__init__(inner, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms)
        self.sweeps_at_commit = True
        """Whether the manager's (or processor's) commits run the sweep when it is due.  The
        asyncio manager clears it and sweeps on its event loop, the thread that writes the
        store's buffer there (:meth:`statestore.aio.AsyncStateManager.ttl_store`)."""
        self._ttl = ttl
        self._decoder: _Decoder[K, V] = _Decoder(self, ttl.ttl_ms, now_ms)
        self._next_sweep_ms = now_ms() + ttl.sweep_interval_ms
        self._sweep_from: bytes | None = None
        """Where a sweep that stopped at its budget left off (``None``: from the first key)."""
        self._sweep_budget_bytes = (
            min(log.config.max_message_bytes for log in inner.changelogs) // 4
            if inner.changelogs
            else _SWEEP_BUDGET_BYTES
        )
        """When :meth:`sweep_due` says yes: ``sweep_interval_ms`` after the open or the last sweep."""

    @property
    def ttl(self) -> TtlSettings:
        """The store's TTL settings."""
        return self._ttl

    @property
    def counts(self) -> TtlCounts:
        """Expiry counts since the store was opened (:class:`TtlCounts`)."""
        return self._decoder.counts

    def expiry_cutoff_ms(self) -> int:
        """The current cutoff: a value stamped at or before it has expired."""
        return self._decoder.cutoff()

    # ------------------------------------------------------------- writes

    def put(self, key: K, value: V | None, *, timestamp_ms: int | None = None) -> None:
        """Set ``key`` to ``value`` (``None`` deletes) at the next commit.

        ``timestamp_ms``: only with ``TtlSettings(timestamp="record")`` (default:
        the clock); a value whose timestamp has already expired is buffered and
        never seen.
        """
        self._check("put")
        key_bytes = self._key_bytes(key)
        if value is None:
            self._inner.put(key_bytes, None)
            return
        stamp = self._stamp(timestamp_ms)
        self._inner.put(key_bytes, join_timestamp(stamp, self._value_bytes(value)))

    def _stamp(self, timestamp_ms: int | None) -> int:
        if timestamp_ms is not None and self._ttl.timestamp == "wall-clock":
            raise UnsupportedStoreOperationError(
                self._name,
                "put with timestamp_ms",
                "its TTL counts from the wall clock at put (TtlSettings(timestamp='record') "
                "takes record timestamps)",
            )
        return self._timestamp("timestamp_ms", timestamp_ms)

    def __setitem__(self, key: K, value: V) -> None:
        """:meth:`put` at the clock's time."""
        self.put(key, value)

    def put_all(self, entries: Iterable[tuple[K, V | None]] | dict[K, V]) -> None:
        """:meth:`put` every ``(key, value)`` at the clock's time; all or nothing is buffered."""
        self._check("put_all")
        pairs = entries.items() if isinstance(entries, dict) else entries
        stamp = self._timestamp("timestamp_ms", None)
        encoded = [
            (
                self._key_bytes(key),
                None if value is None else join_timestamp(stamp, self._value_bytes(value)),
            )
            for key, value in pairs
        ]
        self._inner.put_all(encoded)

    def encode_entries(
        self, entries: Iterable[tuple[K, V | None]] | dict[K, V]
    ) -> list[tuple[bytes, bytes | None]]:
        """Serialize ``entries`` as :meth:`put_all` does (stamped with the clock), buffering nothing.

        With :meth:`put_encoded`, the asyncio API's way to buffer a large write at once
        (:meth:`KeyValueStore.encode_entries`).
        """
        self._check("put_all")
        pairs = entries.items() if isinstance(entries, dict) else entries
        stamp = self._timestamp("timestamp_ms", None)
        return self._inner.encode_entries(
            [
                (
                    self._key_bytes(key),
                    None if value is None else join_timestamp(stamp, self._value_bytes(value)),
                )
                for key, value in pairs
            ]
        )

    def put_encoded(self, encoded: list[tuple[bytes, bytes | None]]) -> None:
        """Buffer ``encoded`` (from :meth:`encode_entries`), all of it, in one step."""
        self._inner.put_encoded(encoded)

    def put_if_absent(self, key: K, value: V, *, timestamp_ms: int | None = None) -> V | None:
        """Put ``value`` only if ``key`` has no live value; returns the live value (``None``: written)."""
        found = self.get_with_timestamp(key)
        if found is not None:
            return found.value
        self.put(key, value, timestamp_ms=timestamp_ms)
        return None

    def delete(self, key: K) -> V | None:
        """Delete ``key`` (a tombstone at the next commit); returns its live value or ``None``."""
        found = self.get_with_timestamp(key)
        self._inner.put(self._key_bytes(key), None)
        return None if found is None else found.value

    def __delitem__(self, key: K) -> None:
        """Delete ``key``; ``KeyError`` if it has no live value."""
        if self.get_with_timestamp(key) is None:
            raise KeyError(key)
        self.delete(key)

    # ------------------------------------------------------------- reads

    def get_with_timestamp(self, key: K) -> ValueAndTimestamp[V] | None:
        """The live value of ``key`` and its timestamp, or ``None`` (buffered writes included)."""
        self._check("get")
        decoder = self._decoder
        data = decoder.live(self._inner.get(self._key_bytes(key)), decoder.cutoff())
        if data is None:
            return None
        return ValueAndTimestamp(decoder.value(data), _unpack_stamp(data))

    @overload
    def get(self, key: K, default: None = None) -> V | None: ...
    @overload
    def get(self, key: K, default: V) -> V: ...
    def get(self, key: K, default: V | None = None) -> V | None:
        """The live value of ``key``, or ``default``."""
        found = self.get_with_timestamp(key)
        return default if found is None else found.value

    def __getitem__(self, key: K) -> V:
        """The live value of ``key``; ``KeyError`` if absent or expired."""
        found = self.get_with_timestamp(key)
        if found is None:
            raise KeyError(key)
        return found.value

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` has a live value."""
        return self.get_with_timestamp(key) is not None  # type: ignore[arg-type]

    def get_many(self, keys: Iterable[K], default: V | None = None) -> list[V | None]:
        """The live values of ``keys`` in order (``default`` where absent or expired)."""
        self._check("get_many")
        found = self._inner.get_many([self._key_bytes(key) for key in keys])
        return self._decoder.values(found, default)

    def range(
        self, lo: K | None = None, hi: K | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[K, V]]:
        """Live entries with ``lo <= key < hi`` by serialized key order (``None``: unbounded)."""
        self._check("range")
        lo_bytes = None if lo is None else self._key_bytes(lo)
        hi_bytes = None if hi is None else self._key_bytes(hi)
        return self._decoder.entries(self._inner.range(lo_bytes, hi_bytes, reverse=reverse))

    def reverse_range(self, lo: K | None = None, hi: K | None = None) -> Iterator[tuple[K, V]]:
        """:meth:`range` in descending key order."""
        return self.range(lo, hi, reverse=True)

    def prefix_scan(
        self, prefix: Any, prefix_serde: Serde[Any] | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[K, V]]:
        """Live entries whose serialized key starts with the serialized ``prefix``."""
        self._check("prefix_scan")
        raw = self._decoder.key_bytes(prefix, prefix_serde)
        return self._decoder.entries(self._inner.prefix_scan(raw, reverse=reverse))

    def items(self) -> Iterator[tuple[K, V]]:
        """All live entries in serialized key order."""
        return self.range()

    def keys(self) -> Iterator[K]:
        """All keys with a live value."""
        return (key for key, _value in self.range())

    def values(self) -> Iterator[V]:
        """All live values in key order."""
        return (value for _key, value in self.range())

    def __iter__(self) -> Iterator[K]:
        """Same as :meth:`keys`."""
        return self.keys()

    def __len__(self) -> int:
        """Exact number of live entries (walks the store)."""
        self._check("len")
        cutoff = self._decoder.cutoff()
        live = self._decoder.live
        return sum(1 for _key, data in self._inner.range() if live(data, cutoff) is not None)

    def reader(self) -> TtlStoreReader[K, V]:
        """A reader of committed live state for other threads (:class:`TtlStoreReader`)."""
        self._check("reader")
        return TtlStoreReader(self._inner.reader(), self._decoder)

    # ------------------------------------------------------------- the sweep

    def expire(self) -> int:
        """Buffer a tombstone for each key whose value has expired; returns how many.

        Walks the store (committed entries merged with buffered writes, so a
        key written since the last commit is judged by its new value); the
        tombstones go out with the next commit, through the normal commit
        path.  Keys already deleted are not touched.  One sweep buffers
        tombstones worth at most a quarter of the changelog's
        ``max_message_bytes`` (a commit is one record batch, and the caller's
        own writes share it); when it stops there, the next commit sweeps again,
        from the key where it stopped.
        """
        self._check("expire")
        counts = self._decoder.counts
        cutoff = self._decoder.cutoff()
        budget = self._sweep_budget_bytes
        expired: list[bytes] = []
        size = 0
        full = False
        source = self._inner.range(self._sweep_from, None)
        while not full and (chunk := list(itertools.islice(source, _SWEEP_CHUNK))):
            for key, data in chunk:
                if len(data) >= TIMESTAMP_BYTES and _unpack_stamp(data) <= cutoff:
                    size += len(key) + _TOMBSTONE_OVERHEAD_BYTES
                    if size > budget:
                        full = True
                        self._sweep_from = key  # the next sweep goes on from here
                        break
                    expired.append(key)
        if not full:
            self._sweep_from = None  # the walk reached the end: the next starts over
        if expired:
            self._inner.put_all([(key, None) for key in expired])
        counts.expired_swept += len(expired)
        counts.sweeps += 1
        counts.last_sweep_ms = now = self._now_ms()
        self._next_sweep_ms = now if full else now + self._ttl.sweep_interval_ms
        return len(expired)

    def sweep_due(self) -> bool:
        """Whether ``sweep_interval_ms`` has passed since the last sweep (or since the open)."""
        return self._now_ms() >= self._next_sweep_ms


class TtlStoreReader(Generic[K, V]):
    """Committed, live state of a TTL store for any thread: a :class:`StoreReader` that skips expired values.

    Each call takes its own RocksDB snapshot (as :class:`StoreReader`) and
    one ``now``.  Thread-safe.
    """

    def __init__(self, inner: StoreReader[bytes, bytes], decoder: _Decoder[K, V]) -> None:
        """Read through ``inner`` (the bytes store's reader), decoding with ``decoder``."""
        self._inner = inner
        self._decoder = decoder

    @property
    def name(self) -> str:
        """The store's name."""
        return self._decoder.name

    @overload
    def get(self, key: K, default: None = None) -> V | None: ...
    @overload
    def get(self, key: K, default: V) -> V: ...
    def get(self, key: K, default: V | None = None) -> V | None:
        """The committed live value of ``key``, or ``default``."""
        decoder = self._decoder
        data = decoder.live(self._inner.get(decoder.key_bytes(key)), decoder.cutoff())
        return default if data is None else decoder.value(data)

    def __getitem__(self, key: K) -> V:
        """The committed live value of ``key``; ``KeyError`` if absent or expired."""
        decoder = self._decoder
        data = decoder.live(self._inner.get(decoder.key_bytes(key)), decoder.cutoff())
        if data is None:
            raise KeyError(key)
        return decoder.value(data)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` has a committed live value."""
        decoder = self._decoder
        data = self._inner.get(decoder.key_bytes(key))
        return decoder.live(data, decoder.cutoff()) is not None

    def get_many(self, keys: Iterable[K], default: V | None = None) -> list[V | None]:
        """Committed live values of ``keys``, all from one snapshot."""
        decoder = self._decoder
        found = self._inner.get_many([decoder.key_bytes(key) for key in keys])
        return decoder.values(found, default)

    def range(
        self, lo: K | None = None, hi: K | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[K, V]]:
        """Committed live entries with ``lo <= key < hi``, as of this call."""
        decoder = self._decoder
        lo_bytes = None if lo is None else decoder.key_bytes(lo)
        hi_bytes = None if hi is None else decoder.key_bytes(hi)
        return decoder.entries(self._inner.range(lo_bytes, hi_bytes, reverse=reverse))

    def reverse_range(self, lo: K | None = None, hi: K | None = None) -> Iterator[tuple[K, V]]:
        """:meth:`range` in descending key order."""
        return self.range(lo, hi, reverse=True)

    def prefix_scan(
        self, prefix: Any, prefix_serde: Serde[Any] | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[K, V]]:
        """Committed live entries whose serialized key starts with the serialized ``prefix``."""
        decoder = self._decoder
        raw = decoder.key_bytes(prefix, prefix_serde)
        return decoder.entries(self._inner.prefix_scan(raw, reverse=reverse))

    def items(self) -> Iterator[tuple[K, V]]:
        """Every committed live entry, as of this call."""
        return self.range()

    def keys(self) -> Iterator[K]:
        """Every key with a committed live value."""
        return (key for key, _value in self.range())

    def values(self) -> Iterator[V]:
        """Every committed live value in key order."""
        return (value for _key, value in self.range())
