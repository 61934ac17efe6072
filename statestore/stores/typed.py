"""The typed key-value store applications use: serialization once, at the top.

:class:`KeyValueStore` turns keys and values into bytes with its serdes and
hands them to the bytes layer below (one logged partition, or a partitioned
router over several); it never looks further down.  Operations are Kafka
Streams' ``KeyValueStore`` ones plus the Python mapping protocol.

Semantics worth knowing:

* Writes are buffered until :meth:`KeyValueStore.commit`; reads see them
  (read-your-writes).  ``commit()`` is atomic over the store's partitions
  (one batch for one partition, a transaction for several: see
  :mod:`statestore.txn.coordinator`) and returns when it is durable under the
  changelog's flush policy.  ``manager.commit()`` and ``with
  manager.transaction():`` are atomic over every store.
* ``put(key, None)`` deletes ``key`` (a tombstone), as in Kafka Streams.
* Ranges are half-open, ``lo <= key < hi`` (Kafka Streams' ``range`` is
  inclusive at both ends), and ordered by the *serialized* key bytes
  (unsigned lexicographic).  ``None`` means unbounded.  ``lo > hi`` yields
  nothing (with a warning), as in Kafka Streams.
* ``len(store)`` is exact and walks the store; :meth:`approximate_num_entries`
  is RocksDB's cheap estimate.

Lifecycle (:mod:`statestore.stores.lifecycle`): the builder creates the
typed store over partitions it has already restored, so a typed store starts
``open``; -> ``failed`` when a commit or flush leaves the changelog and
RocksDB out of step (the store must then be reopened, which restores from the
changelog); -> ``closed`` by :meth:`~KeyValueStore.close` or
:meth:`~KeyValueStore.abandon`.  Every operation checks the state on entry and
raises :class:`~statestore.errors.InvalidStateStoreError` unless the store is
open.

Invariants: ``_state`` is one of :class:`StoreState` and only moves along
:func:`statestore.stores.lifecycle.move`; ``_inner`` is open while ``_state``
is ``open`` and is closed (or abandoned) exactly when ``_state`` becomes
``closed``.

Thread-safety: not thread-safe; one thread, the store's writer, uses a store
at a time (like a Kafka Streams stream thread), and its reads include its
buffered writes.  Other threads read the committed state through
:meth:`KeyValueStore.reader` (thread-safe, never the pending writes:
:mod:`statestore.stores.reader`).  Only the state check is read from other
threads (by the manager at close).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, overload

from changelog import Log
from changelog.native import compiled
from statestore.errors import (
    CommitFailedError,
    DeserializationError,
    InvalidStateStoreError,
    RecordTooLargeForLogError,
    SerializationError,
    StateStoreError,
    StoreEngineError,
    UnsupportedStoreOperationError,
)
from statestore.serdes import BytesSerde, IntSerde, MsgpackSerde, Serde, StringSerde
from statestore.stores.bytes_store import BytesStore, prefix_upper_bound
from statestore.stores.lifecycle import StoreState, move
from statestore.stores.reader import StoreReader
from statestore.txn.participant import Committer, Participant

if TYPE_CHECKING:
    from statestore.stores._put import Pending

__all__ = ["KeyValueStore", "compiled_get_available", "compiled_put_available"]

logger = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Final[Any] = object()


_OPEN: Final = StoreState.OPEN


def _load_putter() -> Callable[..., Callable[[Any, Any], None]] | None:
    """The compiled put (``statestore/stores/_put.c``), or ``None`` if it was not built."""
    return compiled("statestore.stores._put", "Putter")  # type: ignore[no-any-return]


_PUTTER: Final = _load_putter()


def _load_getter() -> Callable[..., Callable[..., Any]] | None:
    """The compiled get (``statestore/stores/_put.c``), or ``None`` if it was not built."""
    return compiled("statestore.stores._put", "Getter")  # type: ignore[no-any-return]


_GETTER: Final = _load_getter()


def compiled_get_available() -> bool:
    """Whether the compiled get is built (else every get runs the Python path)."""
    return _GETTER is not None


def compiled_put_available() -> bool:
    """Whether the compiled put is built (else ``KeyValueStore.put`` runs as Python)."""
    return _PUTTER is not None


_INT64_ORDERED: Final[Callable[[Any], bytes] | None] = compiled(
    "statestore.stores._put", "int64_ordered"
)
""":class:`IntSerde`'s ``serialize`` in C (``_put.c``: the same bytes, checks and messages)."""
_INT64_FROM_ORDERED: Final[Callable[[bytes], int] | None] = compiled(
    "statestore.stores._put", "int64_from_ordered"
)
""":class:`IntSerde`'s ``deserialize`` in C."""


def _fast_serialize(serde: Serde[Any]) -> Callable[[Any], bytes]:
    """The serde's ``serialize``, or an equivalent builtin for the built-in serdes.

    ``str.encode`` rejects a non-``str`` with ``TypeError`` just as
    :class:`StringSerde` does, :class:`MsgpackSerde` is its packer's
    ``pack``, and :class:`IntSerde` the compiled ``int64_ordered``: each saves a
    Python call per record.
    """
    if type(serde) is StringSerde:
        return str.encode
    if type(serde) is MsgpackSerde:
        return serde.pack
    if type(serde) is IntSerde and _INT64_ORDERED is not None:
        return _INT64_ORDERED
    return serde.serialize


def _is_bytes_serde(serde: Serde[Any]) -> bool:
    """Exactly :class:`BytesSerde` (a subclass may serialize differently)."""
    return type(serde) is BytesSerde


def _fast_deserialize(serde: Serde[Any]) -> Callable[[bytes], Any]:
    """The serde's ``deserialize``, or an equivalent builtin for the built-in serdes.

    ``bytes.decode`` is :class:`StringSerde`'s strict UTF-8 decode without the
    Python frame around it.
    """
    if type(serde) is MsgpackSerde:
        return serde.unpack
    if type(serde) is StringSerde:
        return bytes.decode
    if type(serde) is IntSerde and _INT64_FROM_ORDERED is not None:
        return _INT64_FROM_ORDERED
    return serde.deserialize


def _first_try_deserialize(serde: Serde[Any]) -> Callable[[bytes], Any]:
    """A decoder that equals the serde's wherever it succeeds, possibly cheaper.

    :attr:`MsgpackSerde.try_unpack` (a bare C call; it rejects maps with
    non-string keys, which the serde accepts); for other serdes
    :func:`_fast_deserialize`.
    """
    if type(serde) is MsgpackSerde:
        return serde.try_unpack
    return _fast_deserialize(serde)


def _batch_deserialize(serde: Serde[Any]) -> Callable[[list[bytes]], list[Any]] | None:
    """A function decoding a list of values in order, ``None`` for :class:`BytesSerde` (identity).

    :class:`MsgpackSerde` decodes a list with its loop in C
    (:attr:`MsgpackSerde.unpack_many`); any other serde is mapped over the list.
    """
    if _is_bytes_serde(serde):
        return None
    if type(serde) is MsgpackSerde:
        return serde.unpack_many
    one = _fast_deserialize(serde)

    def many(values: list[bytes]) -> list[Any]:
        return list(map(one, values))

    return many


_ENTRY_KEY: Final = itemgetter(0)
_ENTRY_VALUE: Final = itemgetter(1)

_READAHEAD_FIRST: Final = 8
"""Entries a scan reads from RocksDB before it yields its first one (then doubling)."""
_READAHEAD_MAX: Final = 1024
"""The most entries a scan reads and decodes ahead of its consumer."""


def _readahead(
    source: Iterator[tuple[bytes, bytes]], store: str
) -> Iterator[list[tuple[bytes, bytes]]]:
    """``source`` in lists of 8, 16, 32, ... up to 1,024 entries (the last may be shorter).

    A scan that is stopped after its first entry reads 8 (not 1,024); a long
    scan pays the per-list cost once per 1,024 entries.  An error of the source
    that is not a :class:`~statestore.errors.StateStoreError` is raised as a
    :class:`DeserializationError` of the entry after the last one read (as the
    per-entry decoder did before).
    """
    size = _READAHEAD_FIRST
    last = b""
    while True:
        try:
            chunk = list(itertools.islice(source, size))
        except StateStoreError:
            raise
        except Exception as exc:
            raise DeserializationError(store, "entry", last, str(exc)) from exc
        if chunk:
            last = chunk[-1][0]
            yield chunk
        if len(chunk) < size:
            return
        size = min(size * 2, _READAHEAD_MAX)


class KeyValueStore(Generic[K, V]):
    """A persistent key-value store whose every mutation goes to its changelog.

    Obtain one from :meth:`statestore.StateManager.store`.  See the module
    docstring for ordering, buffering, lifecycle and thread-safety.
    """

    def __init__(
        self,
        *,
        name: str,
        inner: BytesStore,
        key_serde: Serde[K],
        value_serde: Serde[V],
        max_record_bytes: int,
        committer: Committer | None,
        reader: StoreReader[K, V],
        fast_path: Pending | None = None,
    ) -> None:
        """An open store over ``inner`` (restored; owned from here on: :meth:`close` closes it).

        ``committer`` (the manager's transaction coordinator) commits it;
        ``None`` in distributed mode, where the runtime commits every store in
        its Kafka transaction and :meth:`commit`, :meth:`abort` and
        :meth:`transaction` raise
        :class:`~statestore.errors.UnsupportedStoreOperationError`.
        ``reader`` is handed out by :meth:`reader`.
        ``fast_path`` is the compiled put and get of the write buffer that
        ``inner`` is or passes every put and get straight to (its
        :meth:`~statestore.stores.buffer.WriteBuffer.fast_path`), granted by
        the builder: this store's compiled put and get then do the buffer's
        put and get without a call.  Without it the compiled put calls
        ``inner.put`` and every get runs the Python path.
        Built by :func:`statestore.stores.builder.build_store`.
        """
        self._name = name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._ser_key = _fast_serialize(key_serde)
        self._bytes_keys = _is_bytes_serde(key_serde)
        """``bytes`` keys are their own serialized form: put/get skip the serde call for them."""
        self._ser_value = _fast_serialize(value_serde)
        self._de_key: Callable[[bytes], K] = _fast_deserialize(key_serde)
        self._de_value: Callable[[bytes], V] = _fast_deserialize(value_serde)
        self._try_value: Callable[[bytes], V] = _first_try_deserialize(value_serde)
        """``get``'s decoder: tried first; on any error :meth:`_value_after_try` decides."""
        self._try_cell: list[Callable[[bytes], V]] = [self._try_value]
        """``[_try_value]``, kept by :meth:`_value_after_try`: what the compiled get decodes with."""
        self._de_keys = _batch_deserialize(key_serde)
        self._de_values = _batch_deserialize(value_serde)
        self._max_record_bytes = max_record_bytes
        self._inner = inner
        self._committer = committer
        self._reader = reader
        self._inner_get = inner.get
        self._inner_put: Callable[[bytes, bytes | None], None] = inner.put
        self._changelogs: tuple[Log, ...] = inner.changelogs
        self._partitions = len(inner.participants)
        self._state = StoreState.OPEN
        self._open_cell = [True]
        """``[state is OPEN]``, kept by :meth:`_move`: what the compiled get checks."""
        self._writer: int | None = None
        """The thread of the scoped block that owns the store (:meth:`own_writes`), or ``None``."""
        self._write_cell = [True]
        """``[state is OPEN and no block owns the store]``: what the compiled put checks (else
        it calls :meth:`put` below, which checks the owner)."""
        if _PUTTER is not None and type(self).put is KeyValueStore.put:
            # The compiled put: the fast path of put() below in C, this put() for the rest.
            self.put = _PUTTER(  # type: ignore[method-assign,assignment]
                self._write_cell,
                None if self._bytes_keys else self._ser_key,
                self._ser_value,
                self._max_record_bytes,
                self._inner_put if fast_path is None else fast_path,
                types.MethodType(KeyValueStore.put, self),
            )
        if _GETTER is not None and fast_path is not None and type(self).get is KeyValueStore.get:
            # The compiled get: the fast path of get() below (and the write buffer's) in C.
            self.get = _GETTER(  # type: ignore[method-assign]
                self._open_cell,
                None if self._bytes_keys else self._ser_key,
                fast_path,
                self._try_cell,
                types.MethodType(KeyValueStore.get, self),
            )

    # ------------------------------------------------------------- lifecycle

    @property
    def name(self) -> str:
        """The store's name."""
        return self._name

    @property
    def state(self) -> StoreState:
        """The lifecycle state."""
        return self._state

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
        return self._partitions

    @property
    def changelog(self) -> Log | tuple[Log, ...]:
        """The changelog :class:`changelog.Log` (a tuple of them for a partitioned store).

        In distributed mode the changelog is a topic on the broker:
        :class:`~statestore.errors.UnsupportedStoreOperationError`.
        """
        if not self._changelogs:
            raise self._runtime_commits("read its local changelog")
        return self._changelogs[0] if len(self._changelogs) == 1 else self._changelogs

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """The changelog partitions, indexed by partition number (always a tuple; empty in
        distributed mode, where the changelog is a topic on the broker)."""
        return self._changelogs

    def reader(self) -> StoreReader[K, V]:
        """The store's committed state for other threads: thread-safe, never the pending writes.

        Any number of threads may read through it while this store's writer
        buffers and commits; each call is consistent as of one moment and
        never waits for a commit's fsync (:mod:`statestore.stores.reader`).
        The store's own reads (:meth:`get`, :meth:`range`, ...) are the
        writer's: they include its buffered writes.
        """
        if self._state is not _OPEN:
            raise self._not_open("reader")
        return self._reader

    def _move(self, state: StoreState, operation: str) -> None:
        self._state = move(self._name, self._state, state, operation)
        self._open_cell[0] = self._state is _OPEN
        self._write_cell[0] = self._state is _OPEN and self._writer is None

    def _not_open(self, operation: str) -> InvalidStateStoreError:
        return InvalidStateStoreError(self._name, self._state.value, operation)

    def own_writes(self, thread: int | None) -> None:
        """Only ``thread`` may write from now on (``None``: any thread again).

        Called by the manager's transaction scopes (:mod:`statestore.txn.scope`) when a
        scoped ``manager.transaction(...)`` block on ``thread`` claims this store, and
        with ``None`` when it releases it: a write from another thread meanwhile raises
        :class:`~statestore.errors.InvalidStateStoreError` before anything is buffered
        (it would join that block, and its abort would discard it).  Reads are not
        affected.  While a block owns the store, its own thread's puts take the Python
        path (not the compiled one).
        """
        self._writer = thread
        self._write_cell[0] = self._state is _OPEN and thread is None

    def _check_writable(self, operation: str) -> None:
        """Raise unless the store is open and no other thread's block owns it."""
        if self._state is not _OPEN:
            raise self._not_open(operation)
        writer = self._writer
        if writer is not None and writer != threading.get_ident():
            raise InvalidStateStoreError(
                self._name, "owned by another thread's transaction block", operation
            )

    def _runtime_commits(self, operation: str) -> UnsupportedStoreOperationError:
        return UnsupportedStoreOperationError(
            self._name,
            operation,
            "in distributed mode the processor commits every store of the process in its "
            "Kafka transaction (the changelog is a topic on the broker); writes are committed "
            "at the processor's next commit and dropped if its transaction aborts",
        )

    def close(self, *, flush: bool = True) -> None:
        """Release RocksDB and close the changelogs cleanly; uncommitted writes are discarded
        (with a warning).  Idempotent.

        RocksDB is flushed first unless ``flush=False`` or the store failed.
        The manager closes its stores; closing one by hand ends its use (asking
        the manager for it again reopens and restores it).
        """
        if self._state is StoreState.CLOSED:
            return
        failed = self._state is StoreState.FAILED
        self._move(StoreState.CLOSED, "close")
        self._inner.close(flush=flush and not failed)

    def abandon(self) -> None:
        """Release everything as ``kill -9`` would: no flush, no changelog checkpoints.  Idempotent.

        A public hook for in-process crash tests: :meth:`statestore.StateManager.crash`
        (and :func:`statestore.testing.simulate_crash`) call it.  Uncommitted
        writes are lost; committed ones are in the changelogs, and the next
        open recovers and restores them.
        """
        if self._state is StoreState.CLOSED:
            return
        self._move(StoreState.CLOSED, "abandon")
        self._inner.abandon()

    # ------------------------------------------------------------- serdes

    def _key_bytes(self, key: K) -> bytes:
        if key is None:
            raise SerializationError(self._name, "key", "NoneType", "keys must not be None")
        try:
            return self._ser_key(key)
        except Exception as exc:
            raise SerializationError(self._name, "key", type(key).__name__, str(exc)) from exc

    def _value_bytes(self, value: V) -> bytes:
        try:
            return self._ser_value(value)
        except Exception as exc:
            raise SerializationError(self._name, "value", type(value).__name__, str(exc)) from exc

    def _key(self, data: bytes) -> K:
        try:
            return self._de_key(data)
        except Exception as exc:
            raise DeserializationError(self._name, "key", data, str(exc)) from exc

    def _value(self, data: bytes) -> V:
        try:
            return self._de_value(data)
        except Exception as exc:
            raise DeserializationError(self._name, "value", data, str(exc)) from exc

    def _check_size(self, key: bytes, value: bytes | None) -> None:
        size = len(key) + (0 if value is None else len(value))
        if size > self._max_record_bytes:
            raise RecordTooLargeForLogError(self._name, size, self._max_record_bytes)

    # ------------------------------------------------------------- reads

    @overload
    def get(self, key: K, default: None = None) -> V | None: ...
    @overload
    def get(self, key: K, default: V) -> V: ...
    def get(self, key: K, default: V | None = None) -> V | None:
        """The value of ``key`` (uncommitted writes included), or ``default``."""
        if self._state is not _OPEN:
            raise self._not_open("get")
        if type(key) is bytes and self._bytes_keys:
            data = self._inner_get(key)  # type: ignore[arg-type]  # K is bytes here
        else:
            data = self._inner_get(self._key_bytes(key))
        if data is None:
            return default
        try:
            return self._try_value(data)
        except Exception:  # noqa: BLE001 - decided by the serde's own decoder
            return self._value_after_try(data)

    def _value_after_try(self, data: bytes) -> V:
        """The serde's value of ``data`` after ``_try_value`` failed on it.

        Once the serde's own decoder succeeds where the first try failed (msgpack
        maps with non-string keys), the store holds such values, and ``get``
        uses the serde's decoder from then on (no exception per get).
        """
        value = self._value(data)  # DeserializationError if the value is bad
        self._try_value = self._de_value
        self._try_cell[0] = self._de_value
        return value

    def get_many(self, keys: Iterable[K], default: V | None = None) -> list[V | None]:
        """The values of ``keys`` in order (``default`` where absent), uncommitted writes included.

        One RocksDB multi-get per partition instead of one ``get`` per key: for
        batches of lookups (hundreds to thousands of keys) it is the faster read.
        A pending put or delete of a key in this store is seen, exactly as by
        :meth:`get`.
        """
        if self._state is not _OPEN:
            raise self._not_open("get")
        wanted = keys if isinstance(keys, list) else list(keys)
        if not (self._bytes_keys and set(map(type, wanted)) <= {bytes}):
            wanted = [self._key_bytes(key) for key in wanted]
        found = self._inner.get_many(wanted)  # type: ignore[arg-type]  # K is bytes here
        many = self._de_values
        if None not in found:  # every key present
            if many is None:
                return found  # type: ignore[return-value]  # V is bytes here
            present: list[bytes] = found  # type: ignore[assignment]
        else:
            present = [data for data in found if data is not None]
        try:
            decoded: list[Any] = present if many is None else many(present)
        except Exception:
            self._raise_bad_value(present)
            raise
        if len(present) == len(found):
            return decoded
        values = iter(decoded)
        return [default if data is None else next(values) for data in found]

    def _raise_bad_value(self, values: Iterable[bytes]) -> None:
        """Raise the :class:`DeserializationError` of the first of ``values`` that fails to decode."""
        de = self._de_value
        for data in values:
            try:
                de(data)
            except Exception as exc:
                raise DeserializationError(self._name, "value", data, str(exc)) from exc

    def __getitem__(self, key: K) -> V:
        """The value of ``key``; ``KeyError`` if absent."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` has a value."""
        if self._state is not _OPEN:
            raise self._not_open("get")
        return self._inner_get(self._key_bytes(key)) is not None  # type: ignore[arg-type]

    def range(
        self,
        lo: K | None = None,
        hi: K | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[K, V]]:
        """Entries with ``lo <= key < hi`` by serialized key order (``None``: unbounded).

        With ``key_size_bytes``, only the entries whose serialized key has
        exactly that many bytes (a store in time reads one key's windows so:
        the segmented engine then opens only the segments of their times).
        """
        if self._state is not _OPEN:
            raise self._not_open("range")
        lo_bytes = None if lo is None else self._key_bytes(lo)
        hi_bytes = None if hi is None else self._key_bytes(hi)
        if lo_bytes is not None and hi_bytes is not None and lo_bytes > hi_bytes:
            logger.warning(
                "[%s] range with lo > hi (serialized) returns nothing; note that serdes may "
                "not preserve order",
                self._name,
            )
            return iter(())
        return self._decode_items(
            self._inner.items(lo_bytes, hi_bytes, reverse=reverse, key_size_bytes=key_size_bytes)
        )

    def reverse_range(self, lo: K | None = None, hi: K | None = None) -> Iterator[tuple[K, V]]:
        """:meth:`range` in descending key order (Kafka Streams' ``reverseRange``)."""
        return self.range(lo, hi, reverse=True)

    def prefix_scan(
        self, prefix: Any, prefix_serde: Serde[Any] | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[K, V]]:
        """Entries whose serialized key starts with the serialized ``prefix``.

        ``prefix`` is serialized with ``prefix_serde`` (default: the key serde),
        as Kafka Streams' ``prefixScan(prefix, prefixKeySerializer)``.
        """
        if self._state is not _OPEN:
            raise self._not_open("prefix_scan")
        if prefix_serde is None:
            lo = self._key_bytes(prefix)
        else:
            try:
                lo = prefix_serde.serialize(prefix)
            except Exception as exc:
                raise SerializationError(
                    self._name, "prefix", type(prefix).__name__, str(exc)
                ) from exc
        hi = prefix_upper_bound(lo)
        return self._decode_items(self._inner.items(lo, hi, reverse=reverse))

    def _decode_items(self, source: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[K, V]]:
        """Decoded ``source``, read ahead in growing lists and decoded a list at a time.

        Per entry no Python code runs: the lists come from ``islice``, keys and
        values are split with ``itemgetter`` and decoded by the serdes' batch
        decoders, and ``zip``/``chain`` hand the entries out.  A scan reads (and
        decodes) at most 1,024 entries ahead of its consumer, 8 before the first
        one.  A value or key that fails raises :class:`DeserializationError`
        naming its entry's key when its list is decoded, i.e. up to 1,024 entries
        before the consumer reaches it.
        """
        return itertools.chain.from_iterable(
            map(self._decode_chunk, _readahead(source, self._name))
        )

    def _decode_chunk(self, chunk: list[tuple[bytes, bytes]]) -> Iterator[tuple[K, V]]:
        de_keys, de_values = self._de_keys, self._de_values
        try:
            keys = (
                map(_ENTRY_KEY, chunk) if de_keys is None else de_keys(list(map(_ENTRY_KEY, chunk)))
            )
            values = (
                map(_ENTRY_VALUE, chunk)
                if de_values is None
                else de_values(list(map(_ENTRY_VALUE, chunk)))
            )
        except Exception:
            self._raise_bad_entry(chunk)
            raise
        return zip(keys, values, strict=True)

    def _raise_bad_entry(self, chunk: list[tuple[bytes, bytes]]) -> None:
        """Raise the :class:`DeserializationError` of the first entry of ``chunk`` that fails."""
        de_key, de_value = self._de_key, self._de_value
        for key, value in chunk:
            try:
                de_key(key)
                de_value(value)
            except Exception as exc:
                raise DeserializationError(self._name, "entry", key, str(exc)) from exc

    def items(self) -> Iterator[tuple[K, V]]:
        """All entries in serialized key order (Kafka Streams' ``all``)."""
        return self.range()

    def keys(self) -> Iterator[K]:
        """All keys in serialized key order."""
        if self._state is not _OPEN:
            raise self._not_open("keys")
        return itertools.chain.from_iterable(
            map(self._decode_chunk_keys, _readahead(self._inner.items(), self._name))
        )

    def _decode_chunk_keys(self, chunk: list[tuple[bytes, bytes]]) -> Iterable[K]:
        keys = list(map(_ENTRY_KEY, chunk))
        de_keys = self._de_keys
        if de_keys is None:
            return keys  # K is bytes here
        try:
            return de_keys(keys)
        except Exception:
            for key in keys:
                self._key(key)
            raise

    def values(self) -> Iterator[V]:
        """All values in serialized key order."""
        if self._state is not _OPEN:
            raise self._not_open("values")
        return itertools.chain.from_iterable(
            map(self._decode_chunk_values, _readahead(self._inner.items(), self._name))
        )

    def _decode_chunk_values(self, chunk: list[tuple[bytes, bytes]]) -> Iterable[V]:
        values = list(map(_ENTRY_VALUE, chunk))
        de_values = self._de_values
        if de_values is None:
            return values  # V is bytes here
        try:
            return de_values(values)
        except Exception:
            self._raise_bad_value(values)
            raise

    def __iter__(self) -> Iterator[K]:
        """Iterate over the keys."""
        return self.keys()

    def __len__(self) -> int:
        """Exact number of entries (walks the store: O(n)); see :meth:`approximate_num_entries`."""
        if self._state is not _OPEN:
            raise self._not_open("len")
        return sum(1 for _ in self._inner.items())

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate of the number of entries (fast; ignores uncommitted writes)."""
        if self._state is not _OPEN:
            raise self._not_open("approximate_num_entries")
        return self._inner.approximate_num_entries()

    # ------------------------------------------------------------- writes

    def put(self, key: K, value: V | None) -> None:
        """Set ``key`` to ``value`` (``None`` deletes it) at the next commit.

        The hot path: serialization and the size check are inlined, and a
        ``bytes`` key under :class:`~statestore.serdes.BytesSerde` is used as is.
        """
        if self._state is not _OPEN or self._writer is not None:
            self._check_writable("put")
        if type(key) is bytes and self._bytes_keys:
            key_bytes: bytes = key  # type: ignore[assignment]  # K is bytes here
        else:
            key_bytes = self._key_bytes(key)
        if value is None:
            self._inner_put(key_bytes, None)
            return
        try:
            value_bytes = self._ser_value(value)
        except Exception as exc:
            raise SerializationError(self._name, "value", type(value).__name__, str(exc)) from exc
        if len(key_bytes) + len(value_bytes) > self._max_record_bytes:
            raise RecordTooLargeForLogError(
                self._name, len(key_bytes) + len(value_bytes), self._max_record_bytes
            )
        self._inner_put(key_bytes, value_bytes)

    def __setitem__(self, key: K, value: V) -> None:
        """Same as :meth:`put`."""
        self.put(key, value)

    def put_if_absent(self, key: K, value: V) -> V | None:
        """Put ``value`` only if ``key`` has none; returns the existing value (``None``: written).

        Only an actual write is logged.
        """
        if self._state is not _OPEN or self._writer is not None:
            self._check_writable("put_if_absent")
        key_bytes = self._key_bytes(key)
        existing = self._inner_get(key_bytes)
        if existing is not None:
            return self._value(existing)
        if value is None:
            return None
        value_bytes = self._value_bytes(value)
        self._check_size(key_bytes, value_bytes)
        self._inner_put(key_bytes, value_bytes)
        return None

    def put_all(self, entries: Iterable[tuple[K, V | None]] | dict[K, V]) -> None:
        """Put every ``(key, value)`` (or every item of a dict); all or nothing is buffered."""
        if self._state is not _OPEN or self._writer is not None:
            self._check_writable("put_all")
        self._inner.put_many(self.encode_entries(entries))

    def encode_entries(
        self, entries: Iterable[tuple[K, V | None]] | dict[K, V]
    ) -> list[tuple[bytes, bytes | None]]:
        """Serialize and size-check ``entries`` as :meth:`put_all` does, buffering nothing.

        For a caller that encodes a large write in parts (the asyncio API, between
        turns of its event loop) and buffers it at once with :meth:`put_encoded`.
        Raises what :meth:`put_all` raises for a bad key or value.
        """
        pairs = entries.items() if isinstance(entries, dict) else entries
        encoded: list[tuple[bytes, bytes | None]] = []
        for key, value in pairs:
            key_bytes = self._key_bytes(key)
            value_bytes = None if value is None else self._value_bytes(value)
            self._check_size(key_bytes, value_bytes)
            encoded.append((key_bytes, value_bytes))
        return encoded

    def put_encoded(self, encoded: list[tuple[bytes, bytes | None]]) -> None:
        """Buffer ``encoded`` (from this store's :meth:`encode_entries`), all of it, in one step."""
        if self._state is not _OPEN or self._writer is not None:
            self._check_writable("put_all")
        self._inner.put_many(encoded)

    def delete(self, key: K) -> V | None:
        """Delete ``key`` (a tombstone at the next commit); returns the old value or ``None``."""
        if self._state is not _OPEN or self._writer is not None:
            self._check_writable("delete")
        key_bytes = self._key_bytes(key)
        old = self._inner_get(key_bytes)
        self._inner_put(key_bytes, None)
        return None if old is None else self._value(old)

    def __delitem__(self, key: K) -> None:
        """Delete ``key``; ``KeyError`` if it has no value."""
        if self._state is not _OPEN or self._writer is not None:
            self._check_writable("delete")
        key_bytes = self._key_bytes(key)
        if self._inner_get(key_bytes) is None:
            raise KeyError(key)
        self._inner_put(key_bytes, None)

    # ------------------------------------------------------------- commit

    @property
    def pending_count(self) -> int:
        """Writes buffered since the last commit (one per distinct key)."""
        return self._inner.pending_count

    @property
    def participants(self) -> tuple[Participant, ...]:
        """The store's partitions as members of a commit (what the coordinator commits)."""
        return self._inner.participants

    def commit(self) -> int:
        """Commit this store's buffered writes, atomically over all its partitions.

        One partition with writes: one changelog batch.  Several: one
        transaction (:mod:`statestore.txn.coordinator`).  Returns when they are
        durable, with the number of records committed.  Inside the manager's
        ``with manager.transaction():`` on this thread it raises
        :class:`~statestore.errors.InvalidStateStoreError` (the block commits
        every store at its end; committing one store early would split it).
        On :class:`~statestore.errors.CommitFailedError` with ``written=False``
        nothing was written and the writes stay buffered; otherwise the store
        is failed and must be reopened.
        """
        if self._state is not _OPEN:
            raise self._not_open("commit")
        if self._committer is None:
            raise self._runtime_commits("commit")
        if self._committer.in_transaction():
            raise InvalidStateStoreError(
                self._name, "inside manager.transaction()", "commit one store alone"
            )
        try:
            return self._committer.commit(self._inner.participants)
        except (CommitFailedError, StoreEngineError):
            self.check_failed()
            raise

    def check_failed(self) -> bool:
        """Move to ``failed`` if a partition below failed (after a commit error); whether it did."""
        if self._state is _OPEN and self._inner.failed:
            self._move(StoreState.FAILED, "commit")
        return self._state is StoreState.FAILED

    def abort(self) -> int:
        """Discard the buffered writes; returns how many were dropped.

        In distributed mode the runtime's transaction owns them:
        :class:`~statestore.errors.UnsupportedStoreOperationError`.
        """
        if self._state is not _OPEN:
            raise self._not_open("abort")
        if self._committer is None:
            raise self._runtime_commits("abort")
        return self._inner.abort()

    def flush(self) -> None:
        """Flush RocksDB's memtables (and, with incremental restore, raise the cleaning barrier)."""
        if self._state is not _OPEN:
            raise self._not_open("flush")
        try:
            self._inner.flush()
        except StoreEngineError:
            self._move(StoreState.FAILED, "flush")
            raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[KeyValueStore[K, V]]:
        """This store's writes as one atomic commit: commit on success, abort on an exception.

        Covers everything buffered in this store since its last commit.
        Inside ``with manager.transaction():`` on this thread it **joins**
        the manager's transaction instead (and enlists this store in it when
        that block is scoped, see :meth:`statestore.StateManager.transaction`):
        nothing is committed or aborted at the end of this block (an exception
        propagates and the manager's block discards what it covers).
        """
        if self._state is not _OPEN:
            raise self._not_open("transaction")
        if self._committer is None:
            raise self._runtime_commits("open its own transaction")
        if self._committer.enlist(self._name):
            yield self
            return
        try:
            yield self
        except BaseException:
            if self._state is _OPEN:
                self._inner.abort()
            raise
        self.commit()

    def __repr__(self) -> str:
        """Name, partitions and state."""
        return f"KeyValueStore({self._name!r}, partitions={self.partitions}, state={self._state.value})"
