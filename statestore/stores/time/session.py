"""The session store (Kafka Streams' ``SessionStore``) and session merging.

A session of a key is a window ``[start_ms, end_ms]`` (both inclusive: the
times of its first and last record) with an aggregate.  ``put(session,
aggregate)`` stores one, ``remove(session)`` deletes it (a tombstone),
``find_sessions(key, earliest_session_end_ms, latest_session_start_ms)``
returns the sessions that end at or after the first bound and start at or
before the second, the query a session-window aggregation makes to find the
sessions a new record may merge with.  :meth:`SessionStore.merge` does that
whole step (Kafka Streams' ``KStreamSessionWindowAggregate``): the sessions
within the inactivity gap of a record are merged into one, each merged one
removed (a tombstone in the changelog), the new one put.

Layout (:mod:`statestore.stores.time.layout`): the changelog key is Kafka
Streams' session key ``key | end (int64 BE) | start (int64 BE)``, the value
the serialized aggregate (session stores are not timestamped: the record's
CreateTime is the clock's); RocksDB is segmented by session *end*
(:mod:`statestore.stores.time.segments`).

Semantics: the stream time is the largest session end put so far (committed
or buffered); a session with ``end <= stream time - retention_ms`` has
expired: no read returns it and a put of it is dropped
(:attr:`SessionStore.expired_records_dropped`); segments go whole.  Results
come in session-key order: serialized key bytes, then end, then start.

Thread-safety: not thread-safe (one thread uses a store at a time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from statestore.errors import DeserializationError, InvalidTimestampError
from statestore.serdes import Serde
from statestore.stores.time.base import StreamTimeStore
from statestore.stores.time.layout import (
    SESSION_SUFFIX_BYTES,
    key_range_upper_bound,
    session_key,
    split_session_key,
)
from statestore.stores.time.settings import TimeSettings
from statestore.stores.time.window import Windowed
from statestore.stores.typed import KeyValueStore

__all__ = ["SessionStore"]

K = TypeVar("K")
V = TypeVar("V")

_TIME_MAX = 2**63 - 1


class SessionStore(StreamTimeStore[K, V]):
    """Kafka Streams' session store (see the module docstring).

    Obtain one from :meth:`statestore.StateManager.session_store`.  Sessions
    are :class:`~statestore.stores.time.window.Windowed` values (``key``,
    ``start_ms``, ``end_ms``).
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
        """A session store over ``inner`` (its layers built for ``settings``, restored)."""
        super().__init__(inner, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms)
        self._settings = settings
        self._retention = settings.retention_ms
        self.expired_records_dropped = 0
        """Puts and removes dropped because their session had expired."""

    @property
    def settings(self) -> TimeSettings:
        """Retention and segment interval."""
        return self._settings

    def _oldest_visible_end(self) -> int:
        stream_time = self._stream_time()
        return 0 if stream_time < 0 else max(0, stream_time - self._retention + 1)

    def _session_bytes(self, session: Windowed[K]) -> tuple[bytes, int, int]:
        start = self._timestamp("start_ms", session.start_ms)
        end = self._timestamp("end_ms", session.end_ms)
        if end < start:
            raise InvalidTimestampError(self._name, "end_ms", end)
        return self._key_bytes(session.key), start, end

    # ----------------------------------------------------------------- writes

    def put(self, session: Windowed[K], aggregate: V | None) -> None:
        """Store ``aggregate`` for ``session`` (``None``: remove it) at the next commit."""
        self._check("put")
        key, start, end = self._session_bytes(session)
        if end <= max(self._stream_time(), end) - self._retention:
            self.expired_records_dropped += 1
            return
        data = None if aggregate is None else self._value_bytes(aggregate)
        self._inner.put(session_key(key, start, end), data)
        self._advance(end)

    def remove(self, session: Windowed[K]) -> None:
        """Remove ``session`` (a tombstone in the changelog)."""
        self.put(session, None)

    def merge(
        self,
        key: K,
        timestamp_ms: int,
        *,
        inactivity_gap_ms: int,
        aggregate: Callable[[V | None], V],
        merger: Callable[[V, V], V],
    ) -> tuple[Windowed[K], V]:
        """Add a record of ``key`` at ``timestamp_ms`` to its session; returns the session and aggregate.

        The sessions of ``key`` within ``inactivity_gap_ms`` of the record are
        merged with ``merger`` (oldest first) into one whose window spans them
        all and the record; ``aggregate`` then adds the record to the merged
        aggregate (``None``: a new session).  Each merged session other than
        the result is removed.  Kafka Streams' session-window aggregation step.
        """
        self._check("merge")
        stamp = self._timestamp("timestamp_ms", timestamp_ms)
        gap = self._timestamp("inactivity_gap_ms", inactivity_gap_ms)
        start = end = stamp
        merged: V | None = None
        overlapping = list(self.find_sessions(key, max(0, stamp - gap), stamp + gap))
        for session, value in overlapping:
            merged = value if merged is None else merger(merged, value)
            start = min(start, session.start_ms)
            end = max(end, session.end_ms)
        result = Windowed(key, start, end)
        for session, _value in overlapping:
            if (session.start_ms, session.end_ms) != (start, end):
                self.remove(session)
        value = aggregate(merged)
        self.put(result, value)
        return result, value

    # ------------------------------------------------------------------ reads

    def fetch_session(self, key: K, start_ms: int, end_ms: int) -> V | None:
        """The aggregate of ``key``'s session ``[start_ms, end_ms]``, or ``None``."""
        self._check("fetch")
        key_bytes, start, end = self._session_bytes(Windowed(key, start_ms, end_ms))
        if end < self._oldest_visible_end():
            return None
        data = self._inner.get(session_key(key_bytes, start, end))
        return None if data is None else self._value(data)

    def find_sessions(
        self, key: K, earliest_session_end_ms: int, latest_session_start_ms: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """Sessions of ``key`` with ``end >= earliest_session_end_ms`` and ``start <= latest_session_start_ms``."""
        return self._find(key, key, earliest_session_end_ms, latest_session_start_ms, False)

    def backward_find_sessions(
        self, key: K, earliest_session_end_ms: int, latest_session_start_ms: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """:meth:`find_sessions` in reverse order."""
        return self._find(key, key, earliest_session_end_ms, latest_session_start_ms, True)

    def find_sessions_range(
        self,
        key_from: K | None,
        key_to: K | None,
        earliest_session_end_ms: int,
        latest_session_start_ms: int,
    ) -> Iterator[tuple[Windowed[K], V]]:
        """:meth:`find_sessions` over keys in ``[key_from, key_to]`` (``None``: unbounded)."""
        return self._find(key_from, key_to, earliest_session_end_ms, latest_session_start_ms, False)

    def fetch(self, key: K) -> Iterator[tuple[Windowed[K], V]]:
        """Every live session of ``key``."""
        return self._find(key, key, 0, _TIME_MAX, False)

    def backward_fetch(self, key: K) -> Iterator[tuple[Windowed[K], V]]:
        """:meth:`fetch` in reverse order."""
        return self._find(key, key, 0, _TIME_MAX, True)

    def all(self) -> Iterator[tuple[Windowed[K], V]]:
        """Every live session."""
        return self._find(None, None, 0, _TIME_MAX, False)

    def _find(
        self,
        key_from: K | None,
        key_to: K | None,
        earliest_end: int,
        latest_start: int,
        reverse: bool,
    ) -> Iterator[tuple[Windowed[K], V]]:
        self._check("fetch")
        first = None if key_from is None else self._key_bytes(key_from)
        last = None if key_to is None else self._key_bytes(key_to)
        low_end = max(
            self._timestamp("earliest_session_end_ms", earliest_end), self._oldest_visible_end()
        )
        high_start = self._timestamp("latest_session_start_ms", latest_start)
        return (
            (Windowed(self._key(key), start, end), self._value(data))
            for key, start, end, data in self._scan(first, last, low_end, high_start, reverse)
        )

    def _scan(
        self,
        first: bytes | None,
        last: bytes | None,
        low_end: int,
        high_start: int,
        reverse: bool,
    ) -> Iterator[tuple[bytes, int, int, bytes]]:
        if first is not None and last is not None and first > last:
            return
        max_suffix = session_key(b"", _TIME_MAX, _TIME_MAX)
        size: int | None = None
        if first is not None and first == last:
            lo: bytes | None = session_key(first, 0, low_end)
            hi: bytes | None = first + max_suffix + b"\x00"
            size = len(first) + SESSION_SUFFIX_BYTES  # a time-bounded scan: ends from low_end
        else:
            lo = first
            hi = None if last is None else key_range_upper_bound(last, max_suffix)
        for stored, data in self._inner.range(lo, hi, reverse=reverse, key_size_bytes=size):
            if len(stored) < SESSION_SUFFIX_BYTES:
                raise DeserializationError(
                    self._name, "key", stored, "shorter than a session key's suffix"
                )
            key, start, end = split_session_key(stored)
            if (
                end >= low_end
                and start <= high_start
                and (first is None or key >= first)
                and (last is None or key <= last)
            ):
                yield key, start, end, data
