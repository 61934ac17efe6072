"""The ``.timeindex`` file: a sparse map from timestamp to the offset where it was reached.

Entries are 12 bytes, big-endian, as in Kafka's ``TimeIndex``::

    offset | size | type  | field           | notes
    -------+------+-------+-----------------+-------------------------------------------
         0 |    8 | int64 | timestamp       | largest record timestamp (ms) seen up to the entry
         8 |    4 | int32 | relative_offset | offset - segment base offset of the record
           |      |       |                 | carrying that timestamp

An entry ``(timestamp, offset)`` says: the largest timestamp in the segment up
to ``offset`` is ``timestamp``, so any record with a larger timestamp comes
after ``offset``.  Timestamps strictly increase (an entry is added only when
the timestamp grows: Kafka's rule); offsets never decrease.  There is no
checksum: after a crash the file is rebuilt from the ``.log``, never trusted.
The file holds exactly its entries (no preallocation; see :mod:`changelog.segment.index`).
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from changelog.limits import NO_TIMESTAMP
from changelog.segment.index import FixedWidthIndex, IndexOperationError

__all__ = ["TimeIndex", "TimestampOffset"]


_FIELDS: Final = (
    ("timestamp", "q"),
    ("relative_offset", "i"),
)


class TimestampOffset(NamedTuple):
    """A timestamp (ms) and the offset of the record where the segment reached it."""

    timestamp_ms: int
    offset: int


class TimeIndex(FixedWidthIndex):
    """The sparse time index of one segment (Kafka's ``TimeIndex``).

    Invariants (besides :class:`~changelog.segment.index.FixedWidthIndex`'s):
    timestamps strictly increase and are ``>= 0``; offsets never decrease.
    The last slot is kept for the entry written when the segment is rolled
    (:meth:`is_full` is true one entry early, as in Kafka).

    Thread-safety: thread-safe (the base class's lock guards everything).
    """

    ENTRY = struct.Struct(">" + "".join(code for _, code in _FIELDS))
    _KEY_TYPE = "q"
    _VALUE_TYPE = "i"
    _KEY_NAME = "timestamp"
    _VALUE_NAME = "relative offset"
    _KEY_MIN = 0
    _VALUE_MIN = 0
    _OFFSETS_ARE_KEYS = False
    _KIND = "time index"

    def is_full(self) -> bool:
        """Full one entry early: the last slot is for the entry written on roll."""
        return len(self._keys) >= self._max_entries - 1

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp ``<= target_timestamp``, or ``(-1, base_offset)``."""
        with self._lock:
            slot = self._floor_slot(self._keys, target_timestamp)
            if slot < 0:
                return TimestampOffset(NO_TIMESTAMP, self._base_offset)
            return TimestampOffset(self._keys[slot], self._base_offset + self._values[slot])

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry; :class:`IndexOperationError` if there is none."""
        with self._lock:
            timestamp, relative = self._entry_at(n)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(NO_TIMESTAMP, base_offset)`` when the index is empty."""
        with self._lock:
            return self._last_entry_locked()

    def _last_entry_locked(self) -> TimestampOffset:
        if not self._keys:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        return TimestampOffset(self._keys[-1], self._base_offset + self._values[-1])

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` exceeds the last entry's (Kafka's rule).

        A timestamp equal to the last one is ignored (that happens when a
        segment is closed or rolled twice).  Raises :class:`IndexOperationError`
        (and writes nothing) if the index is full (unless ``skip_full_check``,
        used on roll), the offset goes back or does not fit relative to the
        base offset, or the timestamp goes back.
        """
        with self._lock:
            if not skip_full_check and self.is_full():
                raise IndexOperationError(
                    self._path, f"time index is full ({len(self._keys)} of {self._max_entries})"
                )
            relative = self._relative(offset)
            last = self._last_entry_locked()
            if self._keys and offset < last.offset:
                raise IndexOperationError(
                    self._path,
                    f"attempt to append offset {offset} to slot {len(self._keys)}, "
                    f"smaller than the last offset appended ({last.offset})",
                )
            if self._keys and timestamp < last.timestamp_ms:
                raise IndexOperationError(
                    self._path,
                    f"attempt to append timestamp {timestamp} to slot {len(self._keys)}, "
                    f"smaller than the last timestamp appended ({last.timestamp_ms})",
                )
            if timestamp > last.timestamp_ms:
                self._append_entry(timestamp, relative)
