"""The ``.index`` file: a sparse map from offset to the ``.log`` position of its batch.

Entries are 8 bytes, big-endian, as in Kafka's ``OffsetIndex``::

    offset | size | type  | field           | notes
    -------+------+-------+-----------------+-------------------------------------------
         0 |    4 | int32 | relative_offset | offset - segment base offset, >= 0
         4 |    4 | int32 | position        | byte position of a batch in the ``.log``

An entry ``(offset, position)`` says: the batch at ``position`` holds
``offset`` (the segment writes each batch's last offset), so a reader looking
for any offset ``>= offset`` may start scanning there.  Entries increase in
both columns.  There is no checksum: after a crash the file is rebuilt from
the ``.log``, never trusted.  The file holds exactly its entries (no
preallocation; see :mod:`changelog.segment.index`).
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from changelog.limits import INT32_MAX
from changelog.segment.index import FixedWidthIndex, IndexOperationError

__all__ = ["OffsetIndex", "OffsetPosition"]

_FIELDS: Final = (
    ("relative_offset", "i"),
    ("position", "i"),
)


class OffsetPosition(NamedTuple):
    """An offset and the ``.log`` position where the scan for it starts."""

    offset: int
    position: int


class OffsetIndex(FixedWidthIndex):
    """The sparse offset index of one segment (Kafka's ``OffsetIndex``).

    Invariants (besides :class:`~changelog.segment.index.FixedWidthIndex`'s): offsets
    strictly increase; positions never decrease and lie in ``[0, INT32_MAX]``.

    Thread-safety: thread-safe (the base class's lock guards everything).
    """

    ENTRY = struct.Struct(">" + "".join(code for _, code in _FIELDS))
    _KEY_TYPE = "i"
    _VALUE_TYPE = "i"
    _KEY_NAME = "relative offset"
    _VALUE_NAME = "position"
    _KEY_MIN = 0
    _VALUE_MIN = 0
    _OFFSETS_ARE_KEYS = True
    _KIND = "offset index"

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset ``<= target_offset``, or ``(base_offset, 0)``."""
        with self._lock:
            slot = self._floor_slot(self._keys, target_offset - self._base_offset)
            if slot < 0:
                return OffsetPosition(self._base_offset, 0)
            return OffsetPosition(self._base_offset + self._keys[slot], self._values[slot])

    def fetch_upper_bound_offset(
        self, start: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """The first entry at or past ``start.position + fetch_size`` (Kafka's
        ``fetchUpperBoundOffset``), bounding a read of ``fetch_size`` bytes; ``None`` if none."""
        with self._lock:
            slot = self._ceiling_slot(self._values, start.position + fetch_size)
            if slot < 0:
                return None
            return OffsetPosition(self._base_offset + self._keys[slot], self._values[slot])

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry; :class:`IndexOperationError` if there is none."""
        with self._lock:
            relative, position = self._entry_at(n)
        return OffsetPosition(self._base_offset + relative, position)

    def last_entry(self) -> OffsetPosition:
        """The last entry, or ``(base_offset, 0)`` when the index is empty."""
        with self._lock:
            if not self._keys:
                return OffsetPosition(self._base_offset, 0)
            return OffsetPosition(self._base_offset + self._keys[-1], self._values[-1])

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when the index is empty."""
        return self.last_entry().offset

    def append(self, offset: int, position: int) -> None:
        """Add ``(offset, position)``; the offset must exceed the last one.

        Raises :class:`IndexOperationError` (and writes nothing) if the index
        is full, the offset does not increase or does not fit relative to the
        base offset, or the position is outside ``[0, INT32_MAX]`` or goes back.
        """
        with self._lock:
            relative = self._relative(offset)
            if not 0 <= position <= INT32_MAX:
                raise IndexOperationError(self._path, f"position {position} is not an int32")
            if self._keys and relative <= self._keys[-1]:
                raise IndexOperationError(
                    self._path,
                    f"attempt to append offset {offset} to slot {len(self._keys)}, no larger "
                    f"than the last offset appended ({self._base_offset + self._keys[-1]})",
                )
            if self._values and position < self._values[-1]:
                raise IndexOperationError(
                    self._path,
                    f"attempt to append position {position} before the last one "
                    f"({self._values[-1]})",
                )
            self._append_entry(relative, position)
