"""What the transaction coordinator needs of one store partition: :class:`Participant`.

A commit covers a set of participants (store partitions); the coordinator
(:mod:`statestore.txn.coordinator`) takes their pending writes under their
commit locks and then either writes them as one ordinary batch (one
partition: :meth:`Participant.write`) or runs its transaction protocol over
them (:meth:`Participant.append_transactional`, :meth:`Participant.append_marker`,
:meth:`Participant.apply`).  The top per-partition layer of a store
implements it: the write buffer, or the metered layer over it.

Thread-safety: :attr:`Participant.commit_lock` serializes commits of the
partition; every other method is called by the coordinator while it holds
that lock (writes from the store's user thread may go on meanwhile: see
:mod:`statestore.stores.buffer`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from changelog import AppendInfo, Log
from changelog.record.control import ControlRecordType
from statestore.txn.commit_lock import CommitLock

__all__ = [
    "Committer",
    "ForwardedIdentity",
    "ForwardedSteps",
    "Participant",
    "PartitionIdentity",
    "Records",
    "TransactionSteps",
]

Records = Mapping[bytes, bytes | None]
"""A commit's records: serialized key -> serialized value (``None``: a tombstone), one per key,
in write order; :meth:`Participant.take`'s snapshot of the pending dict (a copy, no tuple per
record: the encoder, the ``WriteBatch`` fill and ``forget`` walk it in C)."""


class TransactionSteps(Protocol):
    """T1, T2 and T4 of the coordinator's transaction protocol on one partition: what every
    layer from the write buffer down to the changelog offers (:class:`ForwardedSteps` passes
    them on)."""

    def append_transactional(
        self, records: Records, *, producer_id: int, producer_epoch: int
    ) -> AppendInfo:
        """Append ``records`` as one transactional batch, not fsynced (see :meth:`sync_to`)."""
        ...

    def sync_to(self, offset: int) -> bool:
        """fsync the changelog below ``offset`` (group commit); a failure fails the partition."""
        ...

    def append_marker(
        self,
        marker: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        defer_flush: bool,
    ) -> AppendInfo:
        """Append a COMMIT or ABORT marker."""
        ...


class ForwardedSteps:
    """:class:`TransactionSteps` passed on unchanged to the layer below, ``_inner``: for a layer
    that acts at other steps only (it keeps its own ``apply``, ``write``, ...)."""

    _inner: TransactionSteps

    def append_transactional(
        self, records: Records, *, producer_id: int, producer_epoch: int
    ) -> AppendInfo:
        """T1 of the layer below."""
        return self._inner.append_transactional(
            records, producer_id=producer_id, producer_epoch=producer_epoch
        )

    def sync_to(self, offset: int) -> bool:
        """T2 of the layer below."""
        return self._inner.sync_to(offset)

    def append_marker(
        self,
        marker: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        defer_flush: bool,
    ) -> AppendInfo:
        """T4 (or an ABORT) of the layer below."""
        return self._inner.append_marker(
            marker, producer_id=producer_id, producer_epoch=producer_epoch, defer_flush=defer_flush
        )


class PartitionIdentity(Protocol):
    """Which partition a layer serves, and whether it is failed: what every layer from the
    write buffer down to the changelog offers (:class:`ForwardedIdentity` passes it on)."""

    @property
    def store(self) -> str:
        """The store's name."""
        ...

    @property
    def partition(self) -> int:
        """The partition number."""
        ...

    @property
    def changelog(self) -> Log:
        """The partition's changelog."""
        ...

    @property
    def failed(self) -> bool:
        """Whether the partition is failed (reopen the store)."""
        ...


class ForwardedIdentity:
    """:class:`PartitionIdentity` of the layer below, ``_inner``: for a layer that serves the
    same partition and fails only with it."""

    _inner: PartitionIdentity

    @property
    def store(self) -> str:
        """The store's name."""
        return self._inner.store

    @property
    def partition(self) -> int:
        """The partition number."""
        return self._inner.partition

    @property
    def changelog(self) -> Log:
        """The layer below's changelog (refused there when it is a broker's topic)."""
        return self._inner.changelog

    @property
    def failed(self) -> bool:
        """Whether the layer below is failed."""
        return self._inner.failed


class Participant(TransactionSteps, PartitionIdentity, Protocol):
    """One store partition as a member of a commit (see the module docstring)."""

    @property
    def commit_lock(self) -> CommitLock:
        """Held by whoever commits this partition (one commit at a time, in arrival order)."""
        ...

    @property
    def pending_count(self) -> int:
        """Writes buffered since the last commit."""
        ...

    def take(self) -> dict[bytes, bytes | None]:
        """A snapshot of the pending writes (they stay buffered until :meth:`forget`)."""
        ...

    def forget(self, records: Records) -> None:
        """Drop exactly the committed ``records`` from the buffer (writes made since stay)."""
        ...

    def write(self, records: Records) -> int:
        """The one-partition commit: one ordinary batch, then RocksDB; returns the count."""
        ...

    def commit_alone(self) -> int:
        """A commit of this partition alone: its commit lock (group commit), :meth:`take`,
        :meth:`write`; returns the records committed (0: nothing pending, or carried by another
        thread's commit, durable).  A failed partition raises ``CommitFailedError``."""
        ...

    def apply(
        self, records: Records, applied_offset: int, *, meta: Mapping[bytes, bytes] | None = None
    ) -> None:
        """Apply committed ``records`` to RocksDB with ``applied_offset`` (and ``meta``, one WriteBatch)."""
        ...


class Committer(Protocol):
    """Commits participants (the manager's transaction coordinator); what a typed store calls."""

    def commit(self, participants: Sequence[Participant]) -> int:
        """Commit the pending writes of ``participants`` atomically; returns the records committed."""
        ...

    def in_transaction(self) -> bool:
        """Whether the calling thread is inside the manager's ``transaction()`` block."""
        ...

    def enlist(self, store: str) -> bool:
        """Enlist ``store`` in the calling thread's ``transaction()`` block; whether there is one."""
        ...
