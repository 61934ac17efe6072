"""The contract between a typed store and the layers under it, and the lifecycle states.

:class:`BytesStore` is what :class:`~statestore.store.KeyValueStore` calls:
serialized keys and values, buffered writes, commit.  A single logged
partition (:class:`~statestore.logged.LoggedPartition`) and the partitioned
router (:class:`~statestore.partitioned.PartitionedStore`) implement it.

Thread-safety: the enum and the helpers are immutable/pure; implementations of
:class:`BytesStore` are not thread-safe (see their modules).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from typing import Final, Protocol

__all__ = ["UNATTACHED", "BytesStore", "StoreState", "prefix_upper_bound"]


class StoreState(enum.Enum):
    """Lifecycle state of a store or manager (immutable enum members)."""

    CREATED = "created"
    RESTORING = "restoring"
    OPEN = "open"
    CLOSED = "closed"
    FAILED = "failed"


class BytesStore(Protocol):
    """The layer under a typed store: serialized keys and values, buffered writes.

    Implementations are not thread-safe: the typed store's single user thread calls them.
    """

    @property
    def failed(self) -> bool:
        """Whether a commit left the changelog and RocksDB out of step."""
        ...

    @property
    def pending_count(self) -> int:
        """Writes buffered since the last commit."""
        ...

    def get(self, key: bytes) -> bytes | None:
        """Value or ``None`` (uncommitted writes included)."""
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

    def commit(self) -> int:
        """Make the buffered writes durable; returns how many."""
        ...

    def abort(self) -> int:
        """Drop the buffered writes; returns how many."""
        ...

    def flush(self) -> None:
        """Flush the engine(s)."""
        ...

    def close(self, *, flush: bool = True) -> None:
        """Release the engine(s)."""
        ...


class _Unattached:
    """Stands in for the bytes layer until the builder attaches it (never reached: state checks)."""

    failed = False
    pending_count = 0

    def __init__(self) -> None:
        self.put: Callable[[bytes, bytes | None], None] = self._refuse_put

    def get(self, key: bytes) -> bytes | None:
        raise AssertionError("store used before it was opened")

    def _refuse_put(self, key: bytes, value: bytes | None) -> None:
        raise AssertionError("store used before it was opened")

    def put_many(self, pairs: Sequence[tuple[bytes, bytes | None]]) -> None:
        raise AssertionError("store used before it was opened")

    def items(
        self, lo: bytes | None = None, hi: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        raise AssertionError("store used before it was opened")

    def approximate_num_entries(self) -> int:
        raise AssertionError("store used before it was opened")

    def commit(self) -> int:
        raise AssertionError("store used before it was opened")

    def abort(self) -> int:
        return 0

    def flush(self) -> None:
        pass

    def close(self, *, flush: bool = True) -> None:
        pass


UNATTACHED: Final = _Unattached()
"""The placeholder bytes layer of a store that is not open yet."""


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``.

    ``None`` when there is none (empty prefix, or all ``0xff``).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
