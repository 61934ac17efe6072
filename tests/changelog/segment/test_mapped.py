"""A ``.log`` read whole past damage: the read-only map and the positions where a batch may start."""

from __future__ import annotations

from pathlib import Path

import pytest

from changelog.errors import LogStorageError
from changelog.record.batch import BATCH_HEADER_SIZE, encode_batch
from changelog.segment.mapped import MappedFile, batch_candidates


def _batches(count: int) -> list[bytes]:
    return [encode_batch(i, [(b"k%d" % i, b"v" * i)], timestamp_ms=1_000 + i) for i in range(count)]


def test_the_map_is_the_file_and_an_empty_file_is_empty_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(_batches(3)))
    with MappedFile(path) as data:
        assert bytes(data) == path.read_bytes()
    path.write_bytes(b"")
    with MappedFile(path) as data:
        assert data == b""


def test_a_missing_file_is_a_typed_read_error(tmp_path: Path) -> None:
    with pytest.raises(LogStorageError) as info, MappedFile(tmp_path / "gone.log"):
        pass
    assert info.value.path == tmp_path / "gone.log"


def test_every_batch_start_after_a_position_is_a_candidate() -> None:
    batches = _batches(4)
    data = b"".join(batches)
    starts = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    found = list(batch_candidates(data, 0))
    assert set(starts[1:]) <= set(found)  # the first batch is at 0, not after it
    assert starts[0] not in found
    assert all(p + BATCH_HEADER_SIZE <= len(data) for p in found)
    assert all(p > starts[2] for p in batch_candidates(data, starts[2]))
    # a header cut short at the end is no candidate
    assert starts[3] not in list(batch_candidates(data[: starts[3] + BATCH_HEADER_SIZE - 1], 0))
