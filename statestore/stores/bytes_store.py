"""The contracts between the store layers: serialized keys and values.

:class:`BytesStore` is what :class:`~statestore.stores.typed.KeyValueStore`
calls.  One partition's write buffer
(:class:`~statestore.stores.buffer.WriteBuffer`), the metered layer and the
partitioned router (:class:`~statestore.stores.partitioned.PartitionedStore`)
implement it.

:class:`ChangeLogging` is what the write buffer wraps: one partition's
committed state and the way its commits reach the changelog.  The local
:class:`~statestore.stores.change_logging.ChangeLoggingStore` (a Kafka-format
:class:`~changelog.Log` on disk) and distributed mode's
:class:`~statestore.kafka.store.TopicChangeLoggingStore` (a changelog topic
partition, written by the runtime's Kafka transaction) implement it; every
layer above is the same object in both modes.

Thread-safety: :func:`prefix_upper_bound` is pure; implementations of
:class:`BytesStore` are not thread-safe (see their modules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from changelog import Log
from statestore.errors import StateStoreError
from statestore.txn.participant import Participant, Records, TransactionSteps

__all__ = ["BytesStore", "ChangeLogging", "prefix_upper_bound"]


class BytesStore(Protocol):
    """The layer under a typed store: serialized keys and values, buffered writes.

    Implementations are not thread-safe: the typed store's single user thread calls them.
    """

    @property
    def failed(self) -> bool:
        """Whether a commit or flush left the changelog and RocksDB out of step."""
        ...

    @property
    def pending_count(self) -> int:
        """Writes buffered since the last commit."""
        ...

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """The changelog partitions underneath, by partition number."""
        ...

    def get(self, key: bytes) -> bytes | None:
        """Value or ``None`` (uncommitted writes included)."""
        ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values (or ``None``) of ``keys``, in order, uncommitted writes included (one multi-get)."""
        ...

    put: Callable[[bytes, bytes | None], None]
    """Buffer a put (``None``: tombstone); an attribute so that it can be a bound ``dict`` method."""

    def put_many(self, pairs: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Buffer several puts."""
        ...

    def items(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key < hi`` in key byte order (or reversed); with ``key_size_bytes``,
        only the keys of exactly that length."""
        ...

    def approximate_num_entries(self) -> int:
        """Cheap estimate of the number of entries."""
        ...

    @property
    def participants(self) -> tuple[Participant, ...]:
        """The partitions as members of a commit (the coordinator commits them), by number."""
        ...

    def abort(self) -> int:
        """Drop the buffered writes; returns how many."""
        ...

    def flush(self) -> None:
        """Flush the engine(s)."""
        ...

    def close(self, *, flush: bool = True) -> None:
        """Release the engine(s) and close the changelog(s) cleanly; idempotent."""
        ...

    def abandon(self) -> None:
        """Release everything as a crash would: no flush, no changelog checkpoints; idempotent."""
        ...


class ChangeLogging(TransactionSteps, Protocol):
    """One partition under its write buffer: committed reads, and commits to its changelog.

    Not thread-safe: the write buffer serializes reads (its user thread) and
    commits (the committer, holding the buffer's commit lock).
    """

    @property
    def store(self) -> str:
        """The store's name."""
        ...

    @property
    def partition(self) -> int:
        """The partition number."""
        ...

    @property
    def failed(self) -> bool:
        """Whether a commit or flush left the changelog and RocksDB out of step."""
        ...

    @property
    def changelog(self) -> Log:
        """The local changelog partition (refused where the changelog is a broker's topic)."""
        ...

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """The local changelog partition as a one-element tuple (empty: a broker's topic)."""
        ...

    @property
    def lookup(self) -> Callable[[bytes], bytes | None]:
        """The committed value of a key, errors unmapped (see :attr:`read_error`)."""
        ...

    read_error: Callable[[Exception, str], StateStoreError]
    """The typed error for a failed :attr:`lookup`."""

    get_many: Callable[[list[bytes]], list[bytes | None]]
    """The committed values of keys, in order."""

    def items(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Committed entries with ``lo <= key < hi`` in key order (or reversed); with
        ``key_size_bytes``, only the keys of exactly that length."""
        ...

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate."""
        ...

    def write(self, records: Records) -> int:
        """A one-partition commit of ``records``: changelog, then RocksDB; returns the count."""
        ...

    def apply(
        self, records: Records, applied: int, *, meta: Mapping[bytes, bytes] | None = None
    ) -> None:
        """Committed ``records`` into RocksDB with the applied offset (and ``meta``), one WriteBatch."""
        ...

    def flush(self) -> None:
        """Flush RocksDB."""
        ...

    def close(self, *, flush: bool = True) -> None:
        """Release RocksDB (and the changelog); idempotent."""
        ...

    def abandon(self) -> None:
        """Release everything as a crash would; idempotent."""
        ...


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``.

    ``None`` when there is none (empty prefix, or all ``0xff``).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
