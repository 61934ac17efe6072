"""A ``.log`` file read whole, past damage: a read-only map and where the next batch may start.

Two readers look beyond a bad batch: the load plan (:mod:`changelog.log.load_plan`)
asks whether a valid batch follows a damaged one (then the damage is not a
torn tail), and the remedies' walk (:mod:`changelog.repair.scan`) resumes there.
Both map the whole file with :class:`MappedFile` and search it with
:func:`batch_candidates`: the positions where the magic byte stands where a
batch header has it and a whole header fits.  Whether a candidate *is* a batch
(its CRC-32C, its format) is the caller's check (``decode_header`` with
``validate``): the two readers treat a batch of an unsupported format
differently.

Nothing here writes.  Thread-safety: a :class:`MappedFile` belongs to one
``with`` block; :func:`batch_candidates` is a pure generator.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from changelog.errors import LogStorageError
from changelog.record.batch import BATCH_HEADER_SIZE, MAGIC
from changelog.record.header import field_offset

__all__ = ["MappedFile", "batch_candidates"]

_MAGIC_POSITION: Final = field_offset("magic")
_MAGIC_BYTE: Final = bytes([MAGIC])


class MappedFile:
    """``with MappedFile(path) as data``: the whole file, read-only (an empty file is ``b""``).

    Raises :class:`~changelog.errors.LogStorageError` (operation ``read``) if
    the file cannot be opened or mapped; the map is closed on exit.
    """

    def __init__(self, path: Path) -> None:
        """Map ``path`` when the ``with`` block is entered."""
        self._path = path
        self._map: mmap.mmap | None = None

    def __enter__(self) -> bytes | mmap.mmap:
        """The file's bytes."""
        try:
            with self._path.open("rb") as handle:
                if os.fstat(handle.fileno()).st_size == 0:
                    return b""
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise LogStorageError(self._path, "read", exc) from exc
        return self._map

    def __exit__(self, *_exc: object) -> None:
        """Close the map."""
        if self._map is not None:
            self._map.close()


def batch_candidates(data: bytes | mmap.mmap, after: int) -> Iterator[int]:
    """Positions ``> after``, in order, where a batch may start: the magic byte in place, a whole header in ``data``."""
    candidate = after + 1
    while True:
        found = data.find(_MAGIC_BYTE, candidate + _MAGIC_POSITION)
        if found < 0:
            return
        candidate = found - _MAGIC_POSITION
        if candidate + BATCH_HEADER_SIZE <= len(data):
            yield candidate
        candidate += 1
