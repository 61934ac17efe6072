"""The versioned key-value store (KIP-889, Kafka Streams' ``VersionedKeyValueStore``).

Every put is a version of its key valid from its timestamp until the next
version's: ``put(key, value, timestamp_ms)``, ``delete(key, timestamp_ms)``
(a tombstone version), ``get(key)`` (the latest version), ``get(key,
as_of_timestamp_ms)`` (the version valid at that time).

History retention, as KIP-889: the stream time is the largest timestamp put so
far (committed or buffered); a put or delete older than ``stream time -
history_retention_ms`` is dropped (:attr:`VersionedKeyValueStore.expired_records_dropped`),
and an as-of read older than that returns ``None``.  The latest version of a
key is returned by ``get(key)`` however old it is.

Layout (:mod:`statestore.stores.time.layout`): RocksDB holds ``key |
timestamp`` -> ``flag | value``; the changelog holds Kafka Streams' versioned
changelog: ``key`` -> ``value`` (a tombstone for a delete) with the version's
timestamp as CreateTime.  The changelog's ``min_compaction_lag_ms`` is the
history retention + 1 day, so the cleaner keeps every version a restore
within the history retention needs.  Versions no read can return any more
are pruned from RocksDB by the engine as the stream time moves
(:mod:`statestore.stores.time.segments`, "History pruning"); reads return the
same with or without them.

Thread-safety: not thread-safe (one thread uses a store at a time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import attrs

from statestore.errors import DeserializationError
from statestore.serdes import Serde
from statestore.stores.time.base import StreamTimeStore
from statestore.stores.time.layout import (
    TIMESTAMP,
    TIMESTAMP_BYTES,
    TOMBSTONE_VERSION,
    VALUE_VERSION,
    versioned_key,
)
from statestore.stores.time.settings import TimeSettings
from statestore.stores.typed import KeyValueStore

__all__ = ["VersionedKeyValueStore", "VersionedRecord"]

K = TypeVar("K")
V = TypeVar("V")

_TIME_MAX = 2**63 - 1


@attrs.frozen
class VersionedRecord(Generic[V]):
    """A version: its value, the time it is valid from, and until (``None``: still valid).  Immutable."""

    value: V
    timestamp_ms: int
    valid_to_ms: int | None = None


class VersionedKeyValueStore(StreamTimeStore[K, V]):
    """KIP-889's versioned key-value store (see the module docstring).

    Obtain one from :meth:`statestore.StateManager.versioned_store`.
    """

    def __init__(
        self,
        inner: KeyValueStore[bytes, bytes],
        settings: TimeSettings,
        *,
        key_serde: Serde[K],
        value_serde: Serde[V],
        now_ms: Callable[[], int],
    ) -> None:
        """A versioned store over ``inner`` (its layers built for ``settings``, restored)."""
        super().__init__(inner, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms)
        self._settings = settings
        self._history = settings.retention_ms
        self.expired_records_dropped = 0
        """Puts and deletes dropped because they were older than the history retention."""

    @property
    def history_retention_ms(self) -> int:
        """How far behind the stream time versions stay readable (``as_of``) and writable."""
        return self._history

    # ----------------------------------------------------------------- writes

    def put(self, key: K, value: V | None, timestamp_ms: int) -> bool:
        """Add a version of ``key`` valid from ``timestamp_ms`` (``None``: a delete); whether it was kept.

        A version older than ``stream time - history_retention_ms`` is dropped
        (``False``), as KIP-889's grace period.
        """
        self._check("put")
        stamp = self._timestamp("timestamp_ms", timestamp_ms)
        key_bytes = self._key_bytes(key)
        data = TOMBSTONE_VERSION if value is None else VALUE_VERSION + self._value_bytes(value)
        if stamp < max(self._stream_time(), stamp) - self._history:
            self.expired_records_dropped += 1
            return False
        self._inner.put(versioned_key(key_bytes, stamp), data)
        self._advance(stamp)
        return True

    def delete(self, key: K, timestamp_ms: int) -> VersionedRecord[V] | None:
        """Delete ``key`` from ``timestamp_ms`` on; returns the version valid at that time (or ``None``)."""
        previous = self.get(key, timestamp_ms)
        self.put(key, None, timestamp_ms)
        return previous

    # ------------------------------------------------------------------ reads

    def get(self, key: K, as_of_timestamp_ms: int | None = None) -> VersionedRecord[V] | None:
        """The latest version of ``key`` or, with ``as_of_timestamp_ms``, the one valid then.

        ``None`` when there is none, when it is a delete, or when
        ``as_of_timestamp_ms`` is older than the history retention.
        """
        self._check("get")
        key_bytes = self._key_bytes(key)
        if as_of_timestamp_ms is None:
            high = _TIME_MAX
        else:
            high = self._timestamp("as_of_timestamp_ms", as_of_timestamp_ms)
            if high < self._stream_time() - self._history:
                return None
        found = next(self._versions(key_bytes, 0, high, reverse=True), None)
        if found is None:
            return None
        stamp, data = found
        if data[:1] != VALUE_VERSION:
            return None
        valid_to = None
        if stamp < _TIME_MAX:
            after = next(self._versions(key_bytes, stamp + 1, _TIME_MAX, reverse=False), None)
            valid_to = None if after is None else after[0]
        return VersionedRecord(self._value(data[1:]), stamp, valid_to)

    def _versions(
        self, key: bytes, low: int, high: int, *, reverse: bool
    ) -> Iterator[tuple[int, bytes]]:
        """``(timestamp, flag | value)`` of ``key``'s versions in ``[low, high]``."""
        size = len(key) + TIMESTAMP_BYTES
        lo = versioned_key(key, low)
        hi = versioned_key(key, high) + b"\x00"
        for stored, data in self._inner.range(lo, hi, reverse=reverse):
            if len(stored) != size or not stored.startswith(key):
                continue  # another key with this key's bytes as a prefix
            if not data:
                raise DeserializationError(self._name, "value", data, "an empty version")
            yield int(TIMESTAMP.unpack_from(stored, len(key))[0]), data
