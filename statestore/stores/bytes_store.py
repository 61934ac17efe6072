"""The contract between the typed store and the layers under it: serialized keys and values.

:class:`BytesStore` is what :class:`~statestore.stores.typed.KeyValueStore`
calls.  One partition's write buffer
(:class:`~statestore.stores.buffer.WriteBuffer`) and the partitioned router
(:class:`~statestore.stores.partitioned.PartitionedStore`) implement it.

Thread-safety: :func:`prefix_upper_bound` is pure; implementations of
:class:`BytesStore` are not thread-safe (see their modules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from changelog import Log
from statestore.stores.participant import Participant

__all__ = ["BytesStore", "prefix_upper_bound"]


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
        self, lo: bytes | None = None, hi: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key < hi`` in key byte order (or reversed)."""
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


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``.

    ``None`` when there is none (empty prefix, or all ``0xff``).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
