"""Operator remedy: rebuild every segment's ``.index``, ``.timeindex`` and ``.txnindex``.

The loader rebuilds an index that is missing, unreadable or whose last entry
disagrees with its ``.log`` (pass L7), but it does not read every entry of a
flushed segment's indexes (that would cost a pass over the log at every
open).  An entry damaged in the middle misleads lookups until this remedy
rebuilds the files from the ``.log``, with the very code recovery uses
(:meth:`~changelog.segment.indexes.SegmentIndexes.rebuild`, the loader's L7/L8,
and L10 for ``.txnindex``).

:func:`plan_index_rebuild` (read-only) builds the new files in a temporary
directory outside the partition and compares them byte for byte with the
current ones.  It refuses (:class:`~changelog.errors.RepairRefusedError`) a
partition the loader refuses or would cut (indexes are the evidence the
loader uses to refuse a cut ``.log``: deleting them would hide a loss), and
any ``.log`` that is not whole valid batches (truncate first).

The protocol of :func:`apply_index_rebuild`:

- **X1** delete each segment's ``.index``, ``.timeindex`` and ``.txnindex``,
  oldest segment first, an fsync of the directory after each segment.  A crash
  here leaves some indexes missing, which the loader rebuilds (L7): a missing
  index is routine, never an error.
- **X2** open the log (L7 rebuilds every missing index from its CRC-checked
  ``.log``, L10 writes each ``.txnindex``) and close it cleanly.

Thread-safety: the caller keeps every writer out (X1 runs under the partition
directory's lock; ``Log.open`` takes it for X2).
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import attrs

from changelog.config import LogConfig
from changelog.errors import ChangelogError, CorruptRecordError, LogStorageError, RepairRefusedError
from changelog.fs import files
from changelog.fs.lock import DirectoryLock
from changelog.log.load_plan import plan_load
from changelog.log.log import Log
from changelog.log.log_dir import parse_topic_partition
from changelog.log.producer_state import ProducerState, replay_segment
from changelog.repair.scan import protocol_leftovers, segment_files
from changelog.segment.indexes import SegmentIndexes
from changelog.segment.offset_index import OffsetIndex
from changelog.segment.reader import SegmentReader
from changelog.segment.time_index import TimeIndex
from changelog.segment.txn_index import ABORTED_TXN

__all__ = ["IndexFilePlan", "IndexRebuildPlan", "apply_index_rebuild", "plan_index_rebuild"]

_REBUILT: tuple[tuple[str, int], ...] = (
    (files.INDEX_SUFFIX, OffsetIndex.entry_size()),
    (files.TIME_INDEX_SUFFIX, TimeIndex.entry_size()),
    (files.TXN_INDEX_SUFFIX, ABORTED_TXN.size),
)


@attrs.frozen(kw_only=True)
class IndexFilePlan:
    """One index file: what it holds now and what the rebuild writes."""

    path: Path
    exists: bool
    size_before_bytes: int
    size_after_bytes: int
    entry_size: int
    first_difference: int | None
    """The first byte position where the files differ (``None``: identical)."""

    @property
    def entries_before(self) -> int:
        """Whole entries in the file now."""
        return self.size_before_bytes // self.entry_size

    @property
    def entries_after(self) -> int:
        """Entries after the rebuild."""
        return self.size_after_bytes // self.entry_size

    @property
    def changes(self) -> bool:
        """Whether the rebuild changes the file (a ``.txnindex`` with no entry is not written)."""
        if not self.exists:
            return self.size_after_bytes > 0
        return self.first_difference is not None


@attrs.frozen
class IndexRebuildPlan:
    """Every index file of the partition, before and after; made by :func:`plan_index_rebuild`."""

    directory: Path
    segments: tuple[int, ...]
    files: tuple[IndexFilePlan, ...]

    def steps(self) -> list[str]:
        """The protocol steps (module docstring), one line each."""
        out = [
            f"X1 delete the .index, .timeindex and .txnindex of {len(self.segments)} segment(s)"
            " (fsync after each segment)"
        ]
        out.append("X2 open the log (the loader rebuilds them: L7, L10) and close it cleanly")
        return out


def _first_difference(a: bytes, b: bytes) -> int | None:
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LogStorageError(path, "read", exc) from exc


def _reader(path: Path, base: int) -> SegmentReader:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        size = os.fstat(fd).st_size
    except OSError as exc:
        raise LogStorageError(path, "open", exc) from exc
    return SegmentReader(fd, path, base, size, functools.partial(os.close, fd))


def plan_index_rebuild(directory: Path, *, config: LogConfig | None = None) -> IndexRebuildPlan:
    """Build the new index files aside and compare them with the current ones (read-only)."""
    directory = Path(directory)
    config = config if config is not None else LogConfig()
    topic, partition = parse_topic_partition(directory)
    leftovers = protocol_leftovers(directory)
    if leftovers:
        raise RepairRefusedError(
            leftovers[0],
            "an interrupted segment replace (.swap/.cleaned files): open the log once so that"
            " the loader completes it, then rebuild",
        )
    try:
        load = plan_load(directory, topic=topic, partition=partition, config=config)
    except ChangelogError as exc:
        raise RepairRefusedError(
            directory,
            f"the loader refuses this partition ({type(exc).__name__}: {exc}); rebuilding the"
            " indexes would not change that (and would delete the indexes the loader holds as"
            " evidence): use truncate or drop-torn-tail first (docs/recovery.md)",
        ) from exc
    cut = [step for step in load.steps if step.action == "truncate"]
    if cut:
        raise RepairRefusedError(
            cut[0].path,
            f"the next open cuts a torn tail here ({cut[0].reason}); open the log once (or"
            " drop-torn-tail), then rebuild",
        )
    plans: list[IndexFilePlan] = []
    segments = segment_files(directory)
    state = ProducerState()
    with tempfile.TemporaryDirectory(prefix="statestore-rebuild-") as staging:
        stage = Path(staging)
        for segment in segments:
            base = segment.base_offset
            indexes = SegmentIndexes.open(stage, base, suffix="", config=config)
            try:
                with _reader(segment.path, base) as reader:
                    try:
                        valid = indexes.rebuild(
                            reader.batches(), base_offset=base, prefix=f"[{directory.name}] "
                        )
                    except CorruptRecordError as exc:  # pragma: no cover - rebuild catches it
                        valid = exc.position or 0
                    if valid != segment.size_bytes:
                        raise RepairRefusedError(
                            segment.path,
                            f"only {valid} of its {segment.size_bytes} bytes are whole valid"
                            " batches; the indexes of a damaged .log cannot be rebuilt:"
                            " truncate first (docs/recovery.md)",
                        )
                    aborted = replay_segment(state, reader)
            finally:
                indexes.close()
            rebuilt = {
                files.INDEX_SUFFIX: _read(
                    stage / files.segment_file_name(base, files.INDEX_SUFFIX)
                ),
                files.TIME_INDEX_SUFFIX: _read(
                    stage / files.segment_file_name(base, files.TIME_INDEX_SUFFIX)
                ),
                files.TXN_INDEX_SUFFIX: b"".join(txn.pack() for txn in aborted),
            }
            for suffix, entry_size in _REBUILT:
                path = directory / files.segment_file_name(base, suffix)
                now = _read(path)
                new = rebuilt[suffix] or b""
                plans.append(
                    IndexFilePlan(
                        path=path,
                        exists=now is not None,
                        size_before_bytes=0 if now is None else len(now),
                        size_after_bytes=len(new),
                        entry_size=entry_size,
                        first_difference=None if now is None else _first_difference(now, new),
                    )
                )
    return IndexRebuildPlan(directory, tuple(s.base_offset for s in segments), tuple(plans))


def apply_index_rebuild(plan: IndexRebuildPlan, *, config: LogConfig | None = None) -> None:
    """Run X1-X2 (module docstring); I/O errors raise :class:`LogStorageError`."""
    directory = plan.directory
    with DirectoryLock(directory):
        for base in plan.segments:  # X1, oldest first
            for suffix, _size in _REBUILT:
                files.delete_file(
                    directory / files.segment_file_name(base, suffix), "repair.X1.delete"
                )
            files.fsync_dir(directory, "repair.X1.fsync_dir")
    Log.open(directory, config=config).close()  # X2
