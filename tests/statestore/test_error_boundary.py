"""The error boundary: damaged state directories of every kind, opened through the public API.

Every refusal is a :class:`~statestore.StateStoreError` (one ``except`` catches
them all) naming the damaged file and, where there is one, the byte position;
the changelog's own error stays the ``__cause__``; the refused open changes
nothing on disk.  Indexes are rebuilt, never trusted, so a damaged index is
not a refusal: the store opens with every committed value.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from changelog import ChangelogError
from changelog.fs import files
from statestore import (
    ChangelogFailedError,
    CorruptChangelogError,
    RestoreError,
    StateManager,
    StateStoreError,
    StoreLayoutError,
)
from statestore.txn.coordinator import TRANSACTION_LOG_DIR
from tests.statestore.helpers import NO_CLEANER, TINY_LOG

KEYS = 300


def _build(state_dir: Path) -> None:
    """A store whose changelog has several closed segments, and a two-partition store committed
    in a transaction (so the coordinator's log has records)."""
    with StateManager(state_dir, config=NO_CLEANER) as manager:
        store = manager.store("s", log_config=TINY_LOG)
        for i in range(KEYS):
            store[f"k{i}"] = "v" * 50
            if i % 20 == 19:
                store.commit()
        other = manager.store("t", partitions=2)
        other.put_all([("a", 1), ("b", 2), ("c", 3)])
        manager.commit()


def _segments(state_dir: Path) -> list[Path]:
    segments = sorted((state_dir / "s-changelog-0").glob("*.log"))
    assert len(segments) >= 4, "the fixture must roll several segments"
    return segments


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def _delete_middle_segment(state_dir: Path) -> Path:
    segment = _segments(state_dir)[2]
    segment.unlink()
    return segment


def _flip_a_byte_in_a_closed_segment(state_dir: Path) -> Path:
    segment = _segments(state_dir)[1]
    _flip(segment, 100)  # inside the first batch's CRC-covered bytes
    return segment


def _truncate_the_checkpoint(state_dir: Path) -> Path:
    checkpoint = state_dir / "s-changelog-0" / "recovery-point-offset-checkpoint"
    checkpoint.write_bytes(checkpoint.read_bytes()[:5])
    return checkpoint


def _damage_the_coordinators_log(state_dir: Path) -> Path:
    (log,) = sorted((state_dir / TRANSACTION_LOG_DIR).glob("*.log"))
    _flip(log, 70)
    return log


def _remove_the_changelog_dir(state_dir: Path) -> Path:
    directory = state_dir / "s-changelog-0"
    shutil.rmtree(directory)
    return directory


def _files(state_dir: Path) -> dict[str, bytes]:
    """The damaged store's changelog and metadata files (the coordinator's log is left out: every
    manager open appends its epoch bump, step O2, before any store is asked for)."""
    return {
        str(path.relative_to(state_dir)): path.read_bytes()
        for path in sorted(state_dir.rglob("*"))
        if path.is_file() and (path.parent.name == "s-changelog-0" or path.name.startswith("s."))
    }


@pytest.mark.parametrize(
    ("damage", "expected", "cause", "has_position"),
    [
        (_delete_middle_segment, CorruptChangelogError, ChangelogError, False),
        (_flip_a_byte_in_a_closed_segment, RestoreError, ChangelogError, True),
        (_truncate_the_checkpoint, CorruptChangelogError, ChangelogError, True),
        (_damage_the_coordinators_log, CorruptChangelogError, ChangelogError, True),
        (_remove_the_changelog_dir, StoreLayoutError, None, False),
    ],
    ids=[
        "deleted-middle-segment",
        "flipped-byte-in-closed-segment",
        "truncated-checkpoint",
        "damaged-coordinator-log",
        "missing-changelog-dir",
    ],
)
def test_a_damaged_directory_is_refused_with_a_state_store_error_naming_the_file(
    tmp_path: Path,
    damage: Callable[[Path], Path],
    expected: type[StateStoreError],
    cause: type[BaseException] | None,
    has_position: bool,
) -> None:
    state_dir = tmp_path / "state"
    _build(state_dir)
    damaged = damage(state_dir)
    before = _files(state_dir)
    assert before or damage is _remove_the_changelog_dir
    with pytest.raises(StateStoreError) as caught:
        with StateManager(state_dir, config=NO_CLEANER) as manager:
            manager.store("s", log_config=TINY_LOG)
    error = caught.value
    assert type(error) is expected, repr(error)
    assert error.path is not None  # type: ignore[attr-defined]
    assert Path(error.path) == damaged or Path(error.path).parent == damaged.parent  # type: ignore[attr-defined]
    if has_position:
        assert isinstance(error.position, int) and error.position >= 0  # type: ignore[attr-defined]
    if cause is None:
        assert error.__cause__ is None
    else:
        assert isinstance(error.__cause__, cause)
        if isinstance(error, ChangelogFailedError):
            assert error.error == type(error.__cause__).__name__
    assert _files(state_dir) == before, "the refused open changed files on disk"


def test_a_damaged_index_is_rebuilt_and_the_store_opens_whole(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _build(state_dir)
    index = sorted((state_dir / "s-changelog-0").glob("*.index"))[1]
    data = bytearray(index.read_bytes())
    data[0:8] = b"\xff" * 8
    index.write_bytes(bytes(data))
    with StateManager(state_dir, config=NO_CLEANER) as manager:
        store = manager.store("s", log_config=TINY_LOG)
        assert len(store) == KEYS
        assert all(store[f"k{i}"] == "v" * 50 for i in range(KEYS))


def test_a_changelog_failing_at_close_is_a_state_store_error(tmp_path: Path) -> None:
    """An I/O error while a changelog writes its checkpoints at close leaves the manager as a
    ChangelogFailedError naming the store partition, the changelog's error as the cause."""
    state_dir = tmp_path / "state"
    manager = StateManager(state_dir, config=NO_CLEANER)
    store = manager.store("s")
    store["a"] = 1
    store.commit()
    steps: list[str] = []

    def hook(step: str, path: Path) -> None:
        if "s-changelog-0" in path.parts and step.startswith("close."):
            steps.append(step)
            raise OSError(errno.EIO, "injected")

    with files.inject_faults(hook), pytest.raises(StateStoreError) as caught:
        manager.close()
    assert steps, "the hook never ran: the close wrote nothing under s-changelog-0"
    error = caught.value
    assert isinstance(error, ChangelogFailedError), repr(error)
    assert (error.store, error.partition, error.operation) == ("s", 0, "close")
    assert isinstance(error.__cause__, ChangelogError)
    assert error.error == type(error.__cause__).__name__
    with StateManager(state_dir, config=NO_CLEANER) as again:  # the next open recovers
        assert again.store("s")["a"] == 1
