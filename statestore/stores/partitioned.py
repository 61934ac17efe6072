"""A bytes store over N partitions (each a write buffer), routed like Kafka's default partitioner.

A key goes to partition ``toPositive(murmur2(serialized key)) % N``
(:func:`statestore.partitioner.partition_for`), the partition Kafka's producer
would pick for the same bytes, so the layout matches a Kafka topic with N
partitions.  Each partition has its own changelog and RocksDB and restores on
its own.  A store in time routes by the plain key instead (a :class:`KeyRoute`
granted by the builder, :class:`~statestore.stores.time.layout.SuffixRoute`):
the partition of ``murmur2(routing key)``, and a key without a routing key is
read from every partition and the answers combined.

Scans merge the partitions' sorted iterators, so order is global serialized
key order, as with one partition.

Commits are not this layer's: the store hands :attr:`PartitionedStore.participants`
to the transaction coordinator (:mod:`statestore.txn.coordinator`), which
commits the partitions that have pending writes atomically, as one
transaction when there are several.

Invariants: ``_partitions[i]`` is partition ``i``; a key's pending write lives in
exactly the partition :func:`partition_for` picks.

Thread-safety: not thread-safe, like :class:`~statestore.stores.buffer.WriteBuffer`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Protocol

from changelog import Log
from statestore.partitioner import murmur2
from statestore.stores.bytes_store import BytesStore
from statestore.txn.participant import Participant

__all__ = ["KeyRoute", "PartitionedStore"]

_KEY = itemgetter(0)


class KeyRoute(Protocol):
    """Which bytes of a key pick its partition (a store in time: the plain key)."""

    def routing_key(self, key: bytes) -> bytes | None:
        """The bytes to hash (``None``: a key every partition answers, see :meth:`combine`)."""
        ...

    def combine(self, answers: Iterable[bytes | None]) -> bytes | None:
        """The answer for such a key, from every partition's ``get``."""
        ...


class PartitionedStore:
    """N partitions (owned: write buffers, metered or not) behind the :class:`~statestore.stores.bytes_store.BytesStore` protocol.

    Thread-safety and invariants: see the module docstring.
    """

    def __init__(self, partitions: Sequence[BytesStore], route: KeyRoute | None = None) -> None:
        """Route over ``partitions`` (indexed by partition number); closing this closes them.

        ``route``: route by part of each key (``None``: by the whole key).
        """
        self._partitions = tuple(partitions)
        self._count = len(partitions)
        self._route = route
        self.put: Callable[[bytes, bytes | None], None] = self._put
        """Buffer a put in the key's partition."""

    @property
    def partitions(self) -> tuple[BytesStore, ...]:
        """The partitions, by number."""
        return self._partitions

    def _number(self, key: bytes) -> int | None:
        """The partition number of ``key`` (``None``: every partition answers it)."""
        if self._route is not None:
            routed = self._route.routing_key(key)
            if routed is None:
                return None
            key = routed
        return (murmur2(key) & 0x7FFFFFFF) % self._count

    def partition_of(self, key: bytes) -> BytesStore:
        """The partition that owns the serialized ``key``."""
        number = self._number(key)
        if number is None:
            raise ValueError(f"key {key!r:.60} belongs to no single partition")
        return self._partitions[number]

    @property
    def failed(self) -> bool:
        """Whether any partition failed."""
        return any(p.failed for p in self._partitions)

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """Every partition's changelog, by partition number."""
        return tuple(log for p in self._partitions for log in p.changelogs)

    @property
    def pending_count(self) -> int:
        """Buffered writes over all partitions."""
        return sum(p.pending_count for p in self._partitions)

    def get(self, key: bytes) -> bytes | None:
        """Value of ``key`` from its partition (or every partition's, combined by the route)."""
        number = self._number(key)
        if number is None:
            assert self._route is not None  # only a route leaves a key without a partition
            return self._route.combine(p.get(key) for p in self._partitions)
        return self._partitions[number].get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values of ``keys`` in order: one multi-get per partition that owns some of them."""
        by_partition: dict[int, list[int]] = {}
        values: list[bytes | None] = [None] * len(keys)
        for index, key in enumerate(keys):
            number = self._number(key)
            if number is None:
                values[index] = self.get(key)
            else:
                by_partition.setdefault(number, []).append(index)
        for number, indices in by_partition.items():
            found = self._partitions[number].get_many([keys[i] for i in indices])
            for index, value in zip(indices, found, strict=True):
                values[index] = value
        return values

    def _put(self, key: bytes, value: bytes | None) -> None:
        self.partition_of(key).put(key, value)

    def put_many(self, pairs: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Buffer several puts, each in its partition."""
        for key, value in pairs:
            self.partition_of(key).put(key, value)

    def items(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries of every partition merged into one key order."""
        sources = [
            p.items(lo, hi, reverse=reverse, key_size_bytes=key_size_bytes)
            for p in self._partitions
        ]
        return heapq.merge(*sources, key=_KEY, reverse=reverse)

    def approximate_num_entries(self) -> int:
        """Sum of the partitions' estimates."""
        return sum(p.approximate_num_entries() for p in self._partitions)

    @property
    def participants(self) -> tuple[Participant, ...]:
        """Every partition as a member of a commit, by partition number."""
        return tuple(member for p in self._partitions for member in p.participants)

    def abort(self) -> int:
        """Drop every partition's buffered writes."""
        return sum(p.abort() for p in self._partitions)

    def flush(self) -> None:
        """Flush every partition's RocksDB."""
        for p in self._partitions:
            p.flush()

    def close(self, *, flush: bool = True) -> None:
        """Close every partition (all are attempted; the first error is raised)."""
        first: BaseException | None = None
        for p in self._partitions:
            try:
                p.close(flush=flush)
            except Exception as exc:  # noqa: BLE001 - keep closing the others, then re-raise
                first = first or exc
        if first is not None:
            raise first

    def abandon(self) -> None:
        """Abandon every partition as a crash would (all are attempted; the first error is raised)."""
        first: BaseException | None = None
        for p in self._partitions:
            try:
                p.abandon()
            except Exception as exc:  # noqa: BLE001 - keep abandoning the others, then re-raise
                first = first or exc
        if first is not None:
            raise first
