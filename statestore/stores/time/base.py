"""What every store in time shares: it wraps the typed store of raw bytes and serializes once.

:class:`TimeStoreBase` holds a :class:`~statestore.stores.typed.KeyValueStore`
of ``bytes`` keys and values (built by :func:`statestore.stores.builder.build_store`
over the layers :class:`~statestore.stores.time.settings.TimeSettings` picked)
and forwards lifecycle, commit and transaction calls to it unchanged: a store
in time commits, aborts, fails and closes exactly as a key-value store does,
and the manager commits it with every other store.  Subclasses add the key
and value layout and the serdes (once, here at the top: the typed store below
has :class:`~statestore.serdes.BytesSerde` on both sides).

Lifecycle: the wrapped store's (:mod:`statestore.stores.lifecycle`); every
operation checks it on entry.

Thread-safety: not thread-safe, like the typed store it wraps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from changelog import Log
from statestore.errors import (
    DeserializationError,
    InvalidStateStoreError,
    InvalidTimestampError,
    SerializationError,
)
from statestore.serdes import Serde
from statestore.stores.lifecycle import StoreState
from statestore.stores.time.layout import TIMESTAMP
from statestore.stores.time.segments import STREAM_TIME_KEY
from statestore.stores.typed import KeyValueStore
from statestore.txn.participant import Participant

__all__ = ["StreamTimeStore", "TimeStoreBase"]

K = TypeVar("K")
V = TypeVar("V")

_INT64_MAX = 2**63 - 1


class TimeStoreBase(Generic[K, V]):
    """The typed top of a store in time over a :class:`KeyValueStore` of bytes (owned).

    Thread-safety and lifecycle: see the module docstring.
    """

    def __init__(
        self,
        inner: KeyValueStore[bytes, bytes],
        *,
        key_serde: Serde[K],
        value_serde: Serde[V],
        now_ms: Callable[[], int],
    ) -> None:
        """Serialize with the serdes over ``inner`` (open, restored); ``now_ms`` is the default timestamp."""
        self._inner = inner
        self._name = inner.name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._now_ms = now_ms

    # ------------------------------------------------------------- lifecycle

    @property
    def name(self) -> str:
        """The store's name."""
        return self._name

    @property
    def state(self) -> StoreState:
        """The lifecycle state (the wrapped store's)."""
        return self._inner.state

    @property
    def inner(self) -> KeyValueStore[bytes, bytes]:
        """The wrapped store of raw bytes (for tools and tests)."""
        return self._inner

    @property
    def key_serde(self) -> Serde[K]:
        """The key serde."""
        return self._key_serde

    @property
    def value_serde(self) -> Serde[V]:
        """The value serde."""
        return self._value_serde

    @property
    def partitions(self) -> int:
        """Number of changelog partitions."""
        return self._inner.partitions

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """The changelog partitions, by partition number."""
        return self._inner.changelogs

    @property
    def pending_count(self) -> int:
        """Writes buffered since the last commit."""
        return self._inner.pending_count

    @property
    def participants(self) -> tuple[Participant, ...]:
        """The store's partitions as members of a commit."""
        return self._inner.participants

    def _check(self, operation: str) -> None:
        if self._inner.state is not StoreState.OPEN:
            raise InvalidStateStoreError(self._name, self._inner.state.value, operation)

    def commit(self) -> int:
        """Commit the buffered writes (:meth:`KeyValueStore.commit`)."""
        return self._inner.commit()

    def abort(self) -> int:
        """Discard the buffered writes; returns how many."""
        return self._inner.abort()

    def flush(self) -> None:
        """Flush RocksDB (:meth:`KeyValueStore.flush`)."""
        self._inner.flush()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """This store's writes as one atomic commit (:meth:`KeyValueStore.transaction`)."""
        with self._inner.transaction():
            yield self

    def close(self, *, flush: bool = True) -> None:
        """Close the store (:meth:`KeyValueStore.close`); idempotent."""
        self._inner.close(flush=flush)

    def abandon(self) -> None:
        """Release everything as ``kill -9`` would (:meth:`KeyValueStore.abandon`)."""
        self._inner.abandon()

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate of the number of entries."""
        return self._inner.approximate_num_entries()

    # ------------------------------------------------------------- serdes

    def _key_bytes(self, key: K) -> bytes:
        if key is None:
            raise SerializationError(self._name, "key", "NoneType", "keys must not be None")
        try:
            return self._key_serde.serialize(key)
        except Exception as exc:
            raise SerializationError(self._name, "key", type(key).__name__, str(exc)) from exc

    def _value_bytes(self, value: V) -> bytes:
        try:
            return self._value_serde.serialize(value)
        except Exception as exc:
            raise SerializationError(self._name, "value", type(value).__name__, str(exc)) from exc

    def _key(self, data: bytes) -> K:
        try:
            return self._key_serde.deserialize(data)
        except Exception as exc:
            raise DeserializationError(self._name, "key", data, str(exc)) from exc

    def _value(self, data: bytes) -> V:
        try:
            return self._value_serde.deserialize(data)
        except Exception as exc:
            raise DeserializationError(self._name, "value", data, str(exc)) from exc

    def _timestamp(self, name: str, value: int | None) -> int:
        """``value`` checked as a timestamp (``None``: now); :class:`InvalidTimestampError` if bad."""
        if value is None:
            return self._now_ms()
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT64_MAX:
            raise InvalidTimestampError(self._name, name, value)
        return value

    def __repr__(self) -> str:
        """Type, name and state."""
        return f"{type(self).__name__}({self._name!r}, state={self.state.value})"


class StreamTimeStore(TimeStoreBase[K, V]):
    """A store in time over the segmented engine: it has a stream time (window, session, versioned).

    Thread-safety and lifecycle: as :class:`TimeStoreBase`.
    """

    def __init__(
        self,
        inner: KeyValueStore[bytes, bytes],
        *,
        key_serde: Serde[K],
        value_serde: Serde[V],
        now_ms: Callable[[], int],
    ) -> None:
        """As :class:`TimeStoreBase`; ``inner``'s engine is a segmented one."""
        super().__init__(inner, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms)
        self._stream_time_cache = -1
        """The stream time, committed and buffered: valid while writes are pending (see :meth:`_stream_time`)."""

    # ------------------------------------------------------------- stream time

    @property
    def stream_time_ms(self) -> int:
        """The largest segment time put so far (``-1``: none), buffered puts included.

        A window's start, a session's end, a version's timestamp.
        """
        self._check("stream_time")
        return self._stream_time()

    def _stream_time(self) -> int:
        """The stream time; read from the engine only when nothing is pending.

        With nothing pending, the last commit (or abort) has settled it: the
        segmented engine answers :data:`STREAM_TIME_KEY` with the committed
        one.  While writes are pending it is that value raised by each
        buffered put (:meth:`_advance`), so a put costs no engine read.
        """
        if not self._inner.pending_count:
            raw = self._inner.get(STREAM_TIME_KEY)
            self._stream_time_cache = -1 if raw is None else int(TIMESTAMP.unpack(raw)[0])
        return self._stream_time_cache

    def _advance(self, time_ms: int) -> None:
        """A put at ``time_ms`` was buffered."""
        self._stream_time_cache = max(self._stream_time_cache, time_ms)
