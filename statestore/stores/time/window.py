"""The window store (Kafka Streams' ``WindowStore``, in its timestamped form).

A window store keeps, per key, one value per window (``put(key, value,
window_start_ms)``) and answers time-range fetches.  Each value carries a
timestamp (``timestamp_ms``, default the clock) as in Kafka Streams'
``TimestampedWindowStore``, the default store of its windowed aggregations.

Layout (:mod:`statestore.stores.time.layout`): the changelog key is Kafka
Streams' windowed key ``key | window start (int64 BE) | seqnum (int32 BE)``,
the changelog value the serialized value, the record's CreateTime the
timestamp; RocksDB is segmented by window start
(:mod:`statestore.stores.time.segments`).

Semantics (Kafka Streams' ``RocksDBWindowStore`` over its segmented store):

* time bounds (``time_from_ms``, ``time_to_ms``) are inclusive window
  starts, as are key bounds of :meth:`WindowStore.fetch_range`; ``None`` key
  bounds are unbounded;
* the *stream time* is the largest window start put so far (committed, or
  buffered in the current commit);  a window with
  ``start <= stream time - retention_ms`` has *expired*: no fetch returns it,
  a put of it is dropped (counted in :attr:`WindowStore.expired_records_dropped`),
  and its RocksDB segment is removed whole once every window in it has expired;
* without ``retain_duplicates`` a put replaces the key's value for that
  window and ``None`` deletes it (a tombstone); with it every put is kept
  under a new sequence number (1, 2, ... in this process, as Kafka Streams
  counts them) and a ``None`` put is ignored;
* results come in windowed-key order: by serialized key bytes, then window
  start (fetches of one key: by window start); the ``backward_`` variants
  reverse it;
* :meth:`WindowStore.fetch_all` and :meth:`WindowStore.all` read every live
  segment.

Thread-safety: not thread-safe (one thread uses a store at a time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import attrs

from statestore.errors import DeserializationError
from statestore.serdes import Serde
from statestore.stores.lifecycle import StoreState
from statestore.stores.time.base import StreamTimeStore
from statestore.stores.time.layout import (
    TIMESTAMP,
    TIMESTAMP_BYTES,
    WINDOW_SUFFIX,
    WINDOW_SUFFIX_BYTES,
    key_range_upper_bound,
    split_timestamp,
    split_windowed_key,
    windowed_key,
)
from statestore.stores.time.settings import TimeSettings
from statestore.stores.time.timestamped import ValueAndTimestamp
from statestore.stores.typed import KeyValueStore

__all__ = ["WindowStore", "Windowed"]

K = TypeVar("K")
V = TypeVar("V")

_SEQNUM_MAX = 0x7FFFFFFF
_OPEN = StoreState.OPEN
_TIME_MAX = 2**63 - 1


@attrs.frozen
class Windowed(Generic[K]):
    """A key and its window ``[start_ms, end_ms)`` (Kafka Streams' ``Windowed``).  Immutable."""

    key: K
    start_ms: int
    end_ms: int


class WindowStore(StreamTimeStore[K, V]):
    """Kafka Streams' window store (see the module docstring).

    Obtain one from :meth:`statestore.StateManager.window_store`.
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
        """A window store over ``inner`` (its layers built for ``settings``, restored)."""
        super().__init__(inner, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms)
        self._settings = settings
        self._window_size = settings.window_size_ms
        self._retention = settings.retention_ms
        self._retain_duplicates = settings.retain_duplicates
        self._seqnum = 0
        self._serialize_key = self.key_serde.serialize
        self._serialize_value = self.value_serde.serialize
        self.expired_records_dropped = 0
        """Puts dropped because their window had expired."""

    @property
    def settings(self) -> TimeSettings:
        """Window size, retention, segment interval, duplicates."""
        return self._settings

    def _oldest_visible(self) -> int:
        """The smallest window start that has not expired."""
        stream_time = self._stream_time()
        return 0 if stream_time < 0 else max(0, stream_time - self._retention + 1)

    # ----------------------------------------------------------------- writes

    def put(
        self, key: K, value: V | None, window_start_ms: int, *, timestamp_ms: int | None = None
    ) -> None:
        """Put ``value`` for ``key``'s window starting at ``window_start_ms`` (``None``: delete).

        ``timestamp_ms`` (default: the clock) is the value's timestamp and the
        changelog record's CreateTime.
        """
        if self._inner.state is not _OPEN:
            self._check("put")
        # the common case (plain ints in range, serdes that work) inline: once per record
        start = (
            window_start_ms
            if window_start_ms.__class__ is int and 0 <= window_start_ms <= _TIME_MAX
            else self._timestamp("window_start_ms", window_start_ms)
        )
        if key is None:
            self._key_bytes(key)  # raises
        try:
            key_bytes = self._serialize_key(key)
        except Exception:  # noqa: BLE001 - the typed error comes from _key_bytes
            key_bytes = self._key_bytes(key)
        if value is None and self._retain_duplicates:
            return
        # the stream time, committed and buffered (_stream_time), one engine read per commit
        stream_time = self._stream_time_cache if self._inner.pending_count else self._stream_time()
        if start <= (start if start > stream_time else stream_time) - self._retention:
            self.expired_records_dropped += 1
            return
        if self._retain_duplicates:
            self._seqnum = (self._seqnum + 1) & _SEQNUM_MAX
        if value is None:
            data = None
        else:
            stamp = (
                timestamp_ms
                if timestamp_ms.__class__ is int and 0 <= timestamp_ms <= _TIME_MAX
                else self._timestamp("timestamp_ms", timestamp_ms)
            )
            try:
                value_bytes = self._serialize_value(value)
            except Exception:  # noqa: BLE001 - the typed error comes from _value_bytes
                value_bytes = self._value_bytes(value)
            data = TIMESTAMP.pack(stamp) + value_bytes
        self._inner.put(key_bytes + WINDOW_SUFFIX.pack(start, self._seqnum), data)
        if start > self._stream_time_cache:  # noqa: PLR1730 - no call, once per put
            self._stream_time_cache = start  # _advance, inline

    # ------------------------------------------------------------------ reads

    def fetch_window(self, key: K, window_start_ms: int) -> V | None:
        """The value of ``key``'s window starting at ``window_start_ms`` (Kafka's ``fetch(key, time)``)."""
        found = self.fetch_window_with_timestamp(key, window_start_ms)
        return None if found is None else found.value

    def fetch_window_with_timestamp(
        self, key: K, window_start_ms: int
    ) -> ValueAndTimestamp[V] | None:
        """The value and timestamp of ``key``'s window starting at ``window_start_ms``, or ``None``."""
        self._check("fetch")
        start = self._timestamp("window_start_ms", window_start_ms)
        if start < self._oldest_visible():
            return None
        key_bytes = self._key_bytes(key)
        if not self._retain_duplicates:
            data = self._inner.get(windowed_key(key_bytes, start, 0))
            return None if data is None else self._decode(data)
        for _key, _start, data in self._scan(key_bytes, key_bytes, start, start, reverse=False):
            return self._decode(data)
        return None

    def fetch(self, key: K, time_from_ms: int, time_to_ms: int) -> Iterator[tuple[int, V]]:
        """``(window start, value)`` of ``key``'s windows starting in ``[time_from_ms, time_to_ms]``."""
        return self._fetch(key, time_from_ms, time_to_ms, reverse=False)

    def backward_fetch(self, key: K, time_from_ms: int, time_to_ms: int) -> Iterator[tuple[int, V]]:
        """:meth:`fetch`, latest window first."""
        return self._fetch(key, time_from_ms, time_to_ms, reverse=True)

    def fetch_range(
        self, key_from: K | None, key_to: K | None, time_from_ms: int, time_to_ms: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """Windows of keys in ``[key_from, key_to]`` (serialized order; ``None``: unbounded) starting in the time range."""
        return self._fetch_range(key_from, key_to, time_from_ms, time_to_ms, reverse=False)

    def backward_fetch_range(
        self, key_from: K | None, key_to: K | None, time_from_ms: int, time_to_ms: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """:meth:`fetch_range` in reverse order."""
        return self._fetch_range(key_from, key_to, time_from_ms, time_to_ms, reverse=True)

    def fetch_all(self, time_from_ms: int, time_to_ms: int) -> Iterator[tuple[Windowed[K], V]]:
        """Every window starting in ``[time_from_ms, time_to_ms]``."""
        return self._fetch_range(None, None, time_from_ms, time_to_ms, reverse=False)

    def backward_fetch_all(
        self, time_from_ms: int, time_to_ms: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """:meth:`fetch_all` in reverse order."""
        return self._fetch_range(None, None, time_from_ms, time_to_ms, reverse=True)

    def all(self) -> Iterator[tuple[Windowed[K], V]]:
        """Every window that has not expired."""
        return self._fetch_range(None, None, 0, TIMESTAMP_MAX, reverse=False)

    def backward_all(self) -> Iterator[tuple[Windowed[K], V]]:
        """:meth:`all` in reverse order."""
        return self._fetch_range(None, None, 0, TIMESTAMP_MAX, reverse=True)

    def _fetch(
        self, key: K, time_from_ms: int, time_to_ms: int, *, reverse: bool
    ) -> Iterator[tuple[int, V]]:
        self._check("fetch")
        key_bytes = self._key_bytes(key)
        low, high = self._times(time_from_ms, time_to_ms)
        if low > high:
            return iter(())
        lo = key_bytes + WINDOW_SUFFIX.pack(low, 0)
        hi = key_bytes + WINDOW_SUFFIX.pack(high, _SEQNUM_MAX) + b"\x00"
        size = len(key_bytes) + WINDOW_SUFFIX_BYTES
        entries = self._inner.range(lo, hi, reverse=reverse, key_size_bytes=size)
        return self._fetch_one(len(key_bytes), entries)

    def _fetch_one(
        self, at: int, entries: Iterator[tuple[bytes, bytes]]
    ) -> Iterator[tuple[int, V]]:
        """``(window start, value)`` of one key's windowed keys (``at``: the key's length).

        ``entries`` are the keys of that key's length plus the suffix in a
        range of its windowed keys: all of them are that key's, with starts
        in the range (seqnums are never negative).  Per window one unpack
        and one call of the value serde.
        """
        unpack = TIMESTAMP.unpack_from
        deserialize = self._value_serde.deserialize
        for stored, data in entries:
            if len(data) < TIMESTAMP_BYTES:
                self._decode(data)  # raises the DeserializationError
            raw = data[TIMESTAMP_BYTES:]
            try:
                value = deserialize(raw)
            except Exception as exc:  # as TimeStoreBase._value, one frame less per window
                raise DeserializationError(self._name, "value", raw, str(exc)) from exc
            yield unpack(stored, at)[0], value

    def _fetch_range(
        self,
        key_from: K | None,
        key_to: K | None,
        time_from_ms: int,
        time_to_ms: int,
        *,
        reverse: bool,
    ) -> Iterator[tuple[Windowed[K], V]]:
        self._check("fetch")
        first = None if key_from is None else self._key_bytes(key_from)
        last = None if key_to is None else self._key_bytes(key_to)
        low, high = self._times(time_from_ms, time_to_ms)
        size = self._window_size
        return (
            (Windowed(self._key(key), start, start + size), self._value_of(data))
            for key, start, data in self._scan(first, last, low, high, reverse=reverse)
        )

    def _times(self, time_from_ms: int, time_to_ms: int) -> tuple[int, int]:
        low = self._timestamp("time_from_ms", time_from_ms)
        high = self._timestamp("time_to_ms", time_to_ms)
        return max(low, self._oldest_visible()), high

    def _scan(
        self,
        first: bytes | None,
        last: bytes | None,
        low: int,
        high: int,
        *,
        reverse: bool,
    ) -> Iterator[tuple[bytes, int, bytes]]:
        """``(key, start, stored value)`` of windows with ``first <= key <= last``, ``low <= start <= high``."""
        if low > high or (first is not None and last is not None and first > last):
            return
        size: int | None = None
        if first is not None and first == last:
            lo: bytes | None = windowed_key(first, low, 0)
            hi: bytes | None = windowed_key(first, high, _SEQNUM_MAX) + b"\x00"
            size = len(first) + WINDOW_SUFFIX_BYTES  # a time-bounded scan
        else:
            lo = first
            hi = (
                None
                if last is None
                else key_range_upper_bound(last, windowed_key(b"", high, _SEQNUM_MAX))
            )
        for stored_key, data in self._inner.range(lo, hi, reverse=reverse, key_size_bytes=size):
            if len(stored_key) < WINDOW_SUFFIX_BYTES:
                raise DeserializationError(
                    self._name, "key", stored_key, "shorter than a windowed key's suffix"
                )
            key, start, _seqnum = split_windowed_key(stored_key)
            if (
                low <= start <= high
                and (first is None or key >= first)
                and (last is None or key <= last)
            ):
                yield key, start, data

    def _value_of(self, data: bytes) -> V:
        """The value of a stored ``timestamp | value`` (its timestamp not decoded)."""
        if len(data) < TIMESTAMP_BYTES:
            self._decode(data)  # raises the DeserializationError
        return self._value(data[TIMESTAMP_BYTES:])

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


TIMESTAMP_MAX = 2**63 - 1
