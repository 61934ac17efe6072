"""The aborted transaction index of one segment: ``<base offset>.txnindex`` (Kafka's ``TransactionIndex``).

One fixed-width entry per transaction that was ABORTED by a marker in this
segment and still had data in the log; a reader in ``read_committed`` skips
the aborted producer's transactional batches in ``[first_offset, last_offset]``.
All integers big-endian, no header, no checksum (Kafka's format exactly)::

    offset | size | type  | field              | notes
    -------+------+-------+--------------------+-------------------------------------------
         0 |    2 | int16 | version            | 0 (Kafka's AbortedTxn.CURRENT_VERSION)
         2 |    8 | int64 | producer_id        | the aborted transaction's producer
        10 |    8 | int64 | first_offset       | offset of its first data batch (may lie in
           |      |       |                    | an earlier segment)
        18 |    8 | int64 | last_offset        | offset of its ABORT marker (in this segment)
        26 |    8 | int64 | last_stable_offset | the partition's LSO once the marker was
           |      |       |                    | written: first offset of the earliest other
           |      |       |                    | open transaction, else last_offset + 1
        34 |      |       |                    | (entry size)

Entries are in the order their markers were written, so ``last_offset``
increases through the file.  As in Kafka the file is created only when a
segment gets its first entry: most segments have none.

After a crash (and at every open) the index is **rebuilt, never trusted**:
the loader re-derives every segment's entries from the batches themselves
(:mod:`changelog.log.producer_state`) and rewrites a file that differs.  The file
is only an accelerator of reads and Kafka's tools' view of our segments.

Thread-safety: not thread-safe; the owning segment (under ``Log.lock``) calls it.
Readers get :meth:`TransactionIndex.entries` (an immutable tuple) under that lock.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import attrs

from changelog.errors import CorruptIndexError, IndexOperationError, LogStorageError
from changelog.fs import files

__all__ = [
    "ABORTED_TXN",
    "ABORTED_TXN_VERSION",
    "AbortedTxn",
    "TransactionIndex",
    "collect_aborted",
]

ABORTED_TXN: Final = struct.Struct(
    ">"
    "h"  # version
    "q"  # producer_id
    "q"  # first_offset
    "q"  # last_offset
    "q"  # last_stable_offset
)
"""One entry: 34 bytes."""
ABORTED_TXN_VERSION: Final = 0


@attrs.frozen(slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, its offset range ``[first, last]`` and the LSO after it.

    Immutable and thread-safe.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        """The 34 bytes of the entry."""
        return ABORTED_TXN.pack(
            ABORTED_TXN_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


def _parse(path: Path, data: bytes) -> tuple[list[AbortedTxn], str | None]:
    """The entries of a file's bytes, and why the file cannot be trusted (``None``: it can)."""
    entries: list[AbortedTxn] = []
    whole = len(data) - len(data) % ABORTED_TXN.size
    for version, producer_id, first, last, lso in ABORTED_TXN.iter_unpack(data[:whole]):
        if version != ABORTED_TXN_VERSION:
            return entries, f"entry {len(entries)} has version {version}"
        entries.append(AbortedTxn(producer_id, first, last, lso))
    if whole != len(data):
        return entries, f"{len(data) - whole} bytes of a partial entry at the end"
    del path
    return entries, None


class TransactionIndex:
    """The ``.txnindex`` of one segment: its entries in memory and the file that mirrors them.

    Invariants: ``entries`` is what the file holds (when the file exists);
    ``last_offset`` strictly increases through the entries; every entry's
    ``last_offset`` is ``>= base_offset`` (checked by :meth:`sanity_check`).

    Thread-safety: see the module docstring.
    """

    def __init__(
        self, path: Path, base_offset: int, entries: list[AbortedTxn], problem: str | None
    ) -> None:
        """Use :meth:`open`."""
        self._path = path
        self._base_offset = base_offset
        self._entries = entries
        self._fd: int | None = None
        self.problem = problem
        """Why the file on disk was not readable as a whole (``None``: it was); the loader rewrites it."""

    @classmethod
    def open(cls, path: Path, base_offset: int) -> TransactionIndex:
        """Load ``path`` if it exists (a missing file is an empty index; nothing is created)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path, base_offset, [], None)
        except OSError as exc:
            raise LogStorageError(path, "read", exc) from exc
        entries, problem = _parse(path, data)
        return cls(path, base_offset, entries, problem)

    # ----------------------------------------------------------------- reading

    @property
    def path(self) -> Path:
        """The file's current path (it may not exist)."""
        return self._path

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        """The entries, in file order."""
        return tuple(self._entries)

    def __len__(self) -> int:
        """Number of entries."""
        return len(self._entries)

    def sanity_check(self) -> None:
        """Kafka's ``sanityCheck`` plus the order: :class:`CorruptIndexError` naming the entry."""
        if self.problem is not None:
            raise CorruptIndexError(self._path, None, self.problem)
        previous = -1
        for n, entry in enumerate(self._entries):
            where = n * ABORTED_TXN.size
            if entry.last_offset < self._base_offset:
                raise CorruptIndexError(
                    self._path,
                    where,
                    f"aborted transaction {n}: last offset below the segment's base offset",
                    expected=f">= {self._base_offset}",
                    actual=entry.last_offset,
                )
            if entry.last_offset <= previous or entry.first_offset > entry.last_offset:
                raise CorruptIndexError(
                    self._path,
                    where,
                    f"aborted transaction {n}: offsets out of order",
                    expected=f"first <= last, last > {previous}",
                    actual=(entry.first_offset, entry.last_offset),
                )
            previous = entry.last_offset

    # ----------------------------------------------------------------- writing

    def _require_fd(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                os.lseek(self._fd, 0, os.SEEK_END)
            except OSError as exc:
                raise LogStorageError(self._path, "open", exc) from exc
        return self._fd

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry (written at once, not fsynced); ``last_offset`` must increase."""
        if self._entries and entry.last_offset <= self._entries[-1].last_offset:
            raise IndexOperationError(
                self._path,
                f"aborted transaction last offset {entry.last_offset} is not above "
                f"{self._entries[-1].last_offset}",
            )
        files.write_fd(self._require_fd(), entry.pack(), self._path, "txnindex.append")
        self._entries.append(entry)

    def replace_entries(self, entries: Sequence[AbortedTxn]) -> bool:
        """Make the file hold exactly ``entries`` (the loader's rebuild); returns whether it changed.

        An unchanged, readable file is not touched; an index that becomes
        empty has its file deleted (as Kafka never keeps an empty one).
        """
        wanted = list(entries)
        if wanted == self._entries and self.problem is None:
            return False
        self.problem = None
        if not wanted:
            self.close()
            files.delete_file(self._path, "txnindex.rebuild.delete")
            self._entries = []
            return True
        fd = self._require_fd()
        files.truncate_fd(fd, 0, self._path, "txnindex.rebuild.truncate")
        os.lseek(fd, 0, os.SEEK_SET)
        self._entries = []
        for entry in wanted:
            self.append(entry)
        files.fsync_fd(fd, self._path, "txnindex.rebuild.fsync")
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose marker is at or above ``offset`` (Kafka's ``truncateTo``)."""
        keep = [entry for entry in self._entries if entry.last_offset < offset]
        if len(keep) == len(self._entries):
            return
        fd = self._require_fd()
        files.truncate_fd(fd, len(keep) * ABORTED_TXN.size, self._path, "txnindex.truncate")
        os.lseek(fd, 0, os.SEEK_END)
        self._entries = keep

    def flush(self) -> None:
        """fsync the file, if it exists."""
        if self._fd is not None:
            files.fsync_fd(self._fd, self._path, "txnindex.fsync")

    def close(self) -> None:
        """Close the file. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def delete(self) -> None:
        """Close and delete the file (a missing file is fine)."""
        self.close()
        files.delete_file(self._path, "txnindex.delete")

    def set_path(self, new_path: Path) -> None:
        """The owning segment renamed the file (with its other files): remember the new name."""
        self._path = new_path


def collect_aborted(
    indexes: Iterable[Sequence[AbortedTxn]], fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` (Kafka's
    ``collectAbortedTxns`` over consecutive segments, from the one holding ``fetch_offset``).

    The walk stops at the first entry whose ``last_stable_offset`` reaches the
    upper bound: no later entry can overlap the range.
    """
    found: list[AbortedTxn] = []
    for entries in indexes:
        for entry in entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found
    return found
