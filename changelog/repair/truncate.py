"""Operator remedies that remove the end of a log: truncate at an offset, drop a torn tail.

The loader never removes data it cannot prove was unacknowledged (``docs/recovery.md``):
damage in a closed segment, below the recovery point, followed by a valid
batch, or a torn tail after a clean shutdown refuses the open.  When the
operator decides that the data from some offset on is lost anyway, these
functions remove it *explicitly*: :func:`plan_truncation` (read-only) says
exactly what goes (files, byte ranges, offsets, the acknowledged records and
what each affected key becomes), and :func:`apply_truncation` does it.
:func:`plan_torn_tail_drop` is the same remedy at the one offset where a
damaged tail of the last segment begins.

Batches are never split (as in ``Log.truncate_to``): an offset inside a
batch removes the whole batch, and the log then ends at that batch's base
offset.  A cut that would separate a transaction's data from its marker is
refused (its data would stay undecided); the error names the offsets that
keep or remove the whole transaction.

The truncation protocol (each step a fault point of :mod:`changelog.fs.files`;
a crash after any step leaves a directory that the remedy run again finishes,
and that an open either loads or refuses with a typed error, as before):

- **K1** delete ``.kafka_cleanshutdown`` and fsync the directory: from now on
  every open re-validates from the recovery point.
- **K2** write ``recovery-point-offset-checkpoint`` = the base offset of the
  segment that will end the log (if it was above, missing or unreadable), so
  that segment is re-validated and the checkpoint is never above the log end.
- **K3** lower ``cleaner-offset-checkpoint`` and ``cleaner-swap-offset-checkpoint``
  to the new log end offset (if above): the first says where the next cleaning pass
  starts, the second which holes between segments compaction made (a stale value above
  the new end would explain holes in segments appended after the cut).
- **K4** rename the files of every segment wholly above the cut to
  ``.deleted``, newest first, an fsync of the directory after each segment
  (a crash leaves a prefix of the log, never a hole) [loader L2, L6].
- **K5** delete the cut segment's ``.index``, ``.timeindex`` and ``.txnindex``
  (derived data, rebuilt at K7; an index left pointing past the new end would
  make the loader refuse the open as evidence of lost data) and fsync.
- **K6** truncate the cut segment's ``.log`` at the cut position and fsync it.
- **K7** delete the ``.deleted`` files and fsync; open the log (the loader
  re-validates the cut segment and rebuilds its indexes, L8, and every
  ``.txnindex``, L10) and close it (checkpoints and the clean-shutdown marker,
  C1-C5).

Thread-safety: the caller keeps every writer out (``apply_truncation`` takes
the partition directory's lock for K1-K6 and ``Log.open`` takes it for K7).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Literal

import attrs

from changelog.config import LogConfig
from changelog.errors import CorruptDataError, LogStorageError, RepairRefusedError
from changelog.fs import files
from changelog.fs.checkpoint import (
    CLEANER_CHECKPOINT,
    CLEANER_SWAP_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
    write_offset_checkpoint,
)
from changelog.fs.lock import DirectoryLock
from changelog.log.log import Log
from changelog.log.log_dir import parse_topic_partition
from changelog.repair.scan import (
    Batch,
    Committer,
    Damage,
    SegmentFile,
    keys_of,
    protocol_leftovers,
    segment_files,
    walk,
)

__all__ = [
    "KeyChange",
    "RemovedTransaction",
    "TruncationPlan",
    "apply_truncation",
    "plan_torn_tail_drop",
    "plan_truncation",
]

logger = logging.getLogger(__name__)

State = Literal["value", "tombstone", "absent"]


@attrs.frozen
class KeyChange:
    """What one key becomes: its latest committed record removed (``before``) and kept (``after``)."""

    key: bytes | None
    before: State
    after: State

    @property
    def effect(self) -> str:
        """``reverts to an older value``, ``disappears``, ``comes back`` or ``stays deleted``."""
        if self.before == "value":
            return "reverts to an older value" if self.after == "value" else "disappears"
        if self.after == "value":
            return "comes back (its delete is removed)"
        return "stays deleted"


@attrs.frozen(kw_only=True)
class RemovedTransaction:
    """A transaction whose data in this partition the truncation removes.

    A transactional batch is only written by a commit over two or more
    partitions (a one-partition commit is a plain batch), so removing a
    committed one here splits it: the other partitions keep theirs.  Which
    partitions those are is not in this directory (the state directory's
    coordinator log may still say: ``statestore repair truncate`` looks).
    """

    producer_id: int
    producer_epoch: int
    first_offset: int
    """The first offset of its data here."""
    marker_offset: int | None
    """Its COMMIT marker's offset (removed too); ``None``: undecided here (no marker)."""
    records: int


@attrs.frozen(kw_only=True)
class TruncationPlan:
    """Everything a truncation removes and changes; made by :func:`plan_truncation`, read-only."""

    directory: Path
    requested_offset: int
    log_end_offset_before: int
    """The next offset after the last valid batch found (removed part included)."""
    log_end_offset_after: int
    cut_path: Path
    cut_position: int
    cut_size_bytes: int
    """The cut ``.log``'s size now (checked again before anything changes)."""
    deleted_segments: tuple[SegmentFile, ...]
    removed_batches: int
    removed_records: int
    """Records of data batches that a read_committed reader returns (acknowledged commits)."""
    aborted_records: int
    undecided_records: int
    """Records of transactions with no marker (never acknowledged)."""
    control_batches: int
    first_removed_offset: int | None
    last_removed_offset: int | None
    damage: tuple[Damage, ...]
    """Damaged ranges in the removed part (their records cannot be listed)."""
    key_changes: tuple[KeyChange, ...]
    transactions: tuple[RemovedTransaction, ...]
    """Committed (and undecided) transactions whose data here is removed, in log order."""
    had_clean_shutdown: bool
    recovery_point_before: int | None
    recovery_point_after: int
    cleaner_checkpoint_before: int | None
    cleaner_checkpoint_after: int | None
    swap_checkpoint_before: int | None
    swap_checkpoint_after: int | None

    @property
    def nothing_to_do(self) -> bool:
        """Whether no byte would be removed."""
        return not self.deleted_segments and self.cut_position >= self.cut_size_bytes

    @property
    def removed_bytes(self) -> int:
        """Bytes of ``.log`` data removed."""
        return (self.cut_size_bytes - self.cut_position) + sum(
            s.size_bytes for s in self.deleted_segments
        )

    def steps(self) -> list[str]:
        """The protocol steps (module docstring) this plan runs, one line each."""
        d = self.directory
        out = []
        if self.had_clean_shutdown:
            out.append(f"K1 delete {d / files.CLEAN_SHUTDOWN_FILE}")
        base = self.cut_path.name
        if self.recovery_point_before != self.recovery_point_after:
            out.append(
                f"K2 write {d / RECOVERY_POINT_CHECKPOINT}: {self.recovery_point_before} ->"
                f" {self.recovery_point_after} (re-validate {base} at the next open)"
            )
        if self.cleaner_checkpoint_after != self.cleaner_checkpoint_before:
            out.append(
                f"K3 write {d / CLEANER_CHECKPOINT}: {self.cleaner_checkpoint_before} ->"
                f" {self.cleaner_checkpoint_after}"
            )
        if self.swap_checkpoint_after != self.swap_checkpoint_before:
            out.append(
                f"K3 write {d / CLEANER_SWAP_CHECKPOINT}: {self.swap_checkpoint_before} ->"
                f" {self.swap_checkpoint_after}"
            )
        for segment in reversed(self.deleted_segments):
            out.append(
                f"K4 delete segment {segment.path.name} ({segment.size_bytes} bytes) and its"
                " indexes (renamed .deleted first)"
            )
        if self.cut_position < self.cut_size_bytes:
            out.append(f"K5 delete the indexes of {base} (rebuilt at K7)")
            out.append(
                f"K6 truncate {self.cut_path} from {self.cut_size_bytes} to {self.cut_position}"
                f" bytes (remove bytes [{self.cut_position}, {self.cut_size_bytes}))"
            )
        out.append("K7 open the log (indexes rebuilt, L8/L10) and close it cleanly")
        return out


def _checkpoint_or_none(path: Path) -> int | None:
    try:
        entries = read_checkpoint(path)
    except CorruptDataError:
        return None
    return max(entries.values()) if entries else None


def _apply_keys(state: dict[bytes | None, bool], batch: Batch) -> int:
    entries = keys_of(batch)
    for key, tombstone in entries:
        state[key] = tombstone
    return len(entries)


@attrs.define
class _Removed:
    batches: int = 0
    records: int = 0
    aborted: int = 0
    control: int = 0
    first: int | None = None
    last: int | None = None
    damage: list[Damage] = attrs.field(factory=list)
    state: dict[bytes | None, bool] = attrs.field(factory=dict)


def plan_truncation(directory: Path, offset: int) -> TruncationPlan:
    """Plan removing every batch holding an offset ``>= offset`` (read-only; module docstring).

    Raises :class:`RepairRefusedError` (nothing changed) for an offset below
    the log start offset or beyond the log end offset, an offset beyond a
    damaged range (the error names the offset where the damage starts, the
    highest one a truncation can use), a cut through a transaction, and a
    directory holding an unfinished cleaner swap.
    """
    directory = Path(directory)
    leftovers = protocol_leftovers(directory)
    if leftovers:
        raise RepairRefusedError(
            leftovers[0],
            "an interrupted segment replace (.swap/.cleaned files) is in the directory; open the"
            " log once so that the loader completes it, then plan the truncation again",
        )
    segments = segment_files(directory)
    if not segments:
        raise RepairRefusedError(directory, "no segment (.log) files: nothing to truncate")
    first_base = segments[0].base_offset
    log_start = max(_checkpoint_or_none(directory / LOG_START_OFFSET_CHECKPOINT) or 0, first_base)
    if offset < log_start:
        raise RepairRefusedError(
            directory,
            f"offset {offset} is below the log start offset {log_start}; the lowest offset a"
            f" truncation can use is {log_start} (which empties the log)",
            offset=log_start,
        )
    kept_state: dict[bytes | None, bool] = {}
    committer = Committer()

    def keep(batch: Batch) -> None:
        for item, counts in committer.feed(batch):
            if counts:
                _apply_keys(kept_state, item)

    # Walk from the first segment to the cut: the first batch holding an offset >= offset,
    # or damage where offset is the next one to come (the damage holds it), or the end of
    # the segment before one that starts above offset.  Damage before that point refuses (module docstring).
    cut_index = len(segments) - 1
    cut_position: int | None = None
    next_offset = first_base
    removed_items: list[Batch | Damage] = []
    for index, segment in enumerate(segments):
        if segment.base_offset > offset:  # offset lies in a gap: the log ends before it
            cut_index, cut_position = index - 1, segments[index - 1].size_bytes
            break
        next_offset = segment.base_offset
        items = walk(segment.path)
        for item in items:
            if isinstance(item, Damage):
                if offset > next_offset:
                    raise RepairRefusedError(
                        item.path,
                        f"offset {offset} lies beyond damage at position {item.position}"
                        f" ({item.reason}); the records after offset {next_offset - 1} cannot"
                        f" be read, so the highest offset a truncation can use here is"
                        f" {next_offset}",
                        offset=next_offset,
                    )
            elif item.header.last_offset < offset:
                next_offset = item.header.next_offset
                keep(item)
                continue
            cut_index, cut_position = index, item.position
            removed_items.append(item)
            removed_items.extend(items)
            break
        if cut_position is not None:
            break
    cut_segment = segments[cut_index]
    if cut_position is None:
        cut_position = cut_segment.size_bytes
    above = segments[cut_index + 1 :]
    if not above and cut_position >= cut_segment.size_bytes and offset > next_offset:
        raise RepairRefusedError(
            directory,
            f"offset {offset} is beyond the log end offset {next_offset}: nothing to remove",
            offset=next_offset,
        )
    below_ids = {id(batch) for batches in committer.pending.values() for batch in batches}
    removed = _Removed()
    transactions: list[RemovedTransaction] = []

    def remove(item: Batch | Damage) -> None:
        if isinstance(item, Damage):
            removed.damage.append(item)
            return
        header = item.header
        removed.batches += 1
        removed.first = header.base_offset if removed.first is None else removed.first
        removed.last = header.last_offset
        if header.is_control:
            removed.control += 1
            pid = header.producer_id
            waiting = committer.pending.get(pid, [])
            if any(id(batch) in below_ids for batch in waiting):
                first = waiting[0].header.base_offset
                raise RepairRefusedError(
                    item.path,
                    f"offset {offset} cuts through a transaction of producer {pid}: its data"
                    f" starts at offset {first}, below the cut, and its marker is at offset"
                    f" {header.base_offset}, above it; truncate at {first} (removes the whole"
                    f" transaction) or at {header.next_offset} (keeps it)",
                    offset=first,
                )
        decisions = committer.feed(item)
        for decided, counts in decisions:
            if counts:
                removed.records += _apply_keys(removed.state, decided)
            else:
                removed.aborted += decided.header.records_count
        if header.is_control and decisions and decisions[0][1]:
            head = decisions[0][0].header
            transactions.append(
                RemovedTransaction(
                    producer_id=head.producer_id,
                    producer_epoch=head.producer_epoch,
                    first_offset=head.base_offset,
                    marker_offset=header.base_offset,
                    records=sum(d.header.records_count for d, _c in decisions),
                )
            )

    for item in removed_items:
        remove(item)
    for segment in above:
        for item in walk(segment.path):
            remove(item)
    undecided = sum(
        batch.header.records_count
        for batches in committer.pending.values()
        for batch in batches
        if id(batch) not in below_ids
    )
    for batches in committer.pending.values():
        above_cut = [batch for batch in batches if id(batch) not in below_ids]
        if above_cut:
            head = above_cut[0].header
            transactions.append(
                RemovedTransaction(
                    producer_id=head.producer_id,
                    producer_epoch=head.producer_epoch,
                    first_offset=head.base_offset,
                    marker_offset=None,
                    records=sum(batch.header.records_count for batch in above_cut),
                )
            )
    changes = tuple(
        KeyChange(
            key,
            "tombstone" if tombstone else "value",
            "absent" if key not in kept_state else ("tombstone" if kept_state[key] else "value"),
        )
        for key, tombstone in sorted(removed.state.items(), key=lambda kv: (kv[0] is None, kv[0]))
    )
    log_end_before = next_offset
    if removed.last is not None:
        log_end_before = removed.last + 1
    rp_before = _checkpoint_or_none(directory / RECOVERY_POINT_CHECKPOINT)
    rp_after = (
        cut_segment.base_offset if rp_before is None else min(rp_before, cut_segment.base_offset)
    )
    cleaner_before = _checkpoint_or_none(directory / CLEANER_CHECKPOINT)
    cleaner_after = cleaner_before
    if cleaner_before is not None and cleaner_before > next_offset:
        cleaner_after = next_offset
    swap_before = _checkpoint_or_none(directory / CLEANER_SWAP_CHECKPOINT)
    swap_after = swap_before
    if swap_before is not None and swap_before > next_offset:
        swap_after = next_offset
    return TruncationPlan(
        directory=directory,
        requested_offset=offset,
        log_end_offset_before=max(log_end_before, next_offset),
        log_end_offset_after=next_offset,
        cut_path=cut_segment.path,
        cut_position=cut_position,
        cut_size_bytes=cut_segment.size_bytes,
        deleted_segments=tuple(above),
        removed_batches=removed.batches,
        removed_records=removed.records,
        aborted_records=removed.aborted,
        undecided_records=undecided,
        control_batches=removed.control,
        first_removed_offset=removed.first,
        last_removed_offset=removed.last,
        damage=tuple(removed.damage),
        key_changes=changes,
        transactions=tuple(sorted(transactions, key=lambda t: t.first_offset)),
        had_clean_shutdown=(directory / files.CLEAN_SHUTDOWN_FILE).exists(),
        recovery_point_before=rp_before,
        recovery_point_after=rp_after,
        cleaner_checkpoint_before=cleaner_before,
        cleaner_checkpoint_after=cleaner_after,
        swap_checkpoint_before=swap_before,
        swap_checkpoint_after=swap_after,
    )


def plan_torn_tail_drop(directory: Path) -> TruncationPlan:
    """Plan cutting the last segment where its valid batches end (read-only).

    For the tail the loader refuses because the log was closed cleanly (a clean
    shutdown promised a complete log), or because it is not shaped like an
    interrupted write.  Raises :class:`RepairRefusedError` when the last
    segment has no damaged tail, or when a valid batch follows the damage
    (then it is not a tail: plan a truncation at the offset the error names).
    """
    directory = Path(directory)
    segments = segment_files(directory)
    if not segments:
        raise RepairRefusedError(directory, "no segment (.log) files")
    last = segments[-1]
    next_offset = last.base_offset
    damage: Damage | None = None
    for item in walk(last.path):
        if isinstance(item, Damage):
            if damage is None:
                damage = item
            continue
        if damage is not None:
            raise RepairRefusedError(
                last.path,
                f"the damage at position {damage.position} ({damage.reason}) is followed by a"
                f" valid batch at position {item.position} (offsets"
                f" {item.header.base_offset}..{item.header.last_offset}), so it is not a torn"
                f" tail; to give up everything from the damage on, truncate at offset"
                f" {next_offset}",
                offset=next_offset,
            )
        next_offset = item.header.next_offset
    if damage is None:
        raise RepairRefusedError(
            last.path, "the last segment ends with a whole, valid batch: there is no torn tail"
        )
    return plan_truncation(directory, next_offset)


def _check_unchanged(plan: TruncationPlan) -> None:
    now = {s.path: s.size_bytes for s in segment_files(plan.directory)}
    expected = {s.path: s.size_bytes for s in plan.deleted_segments}
    expected[plan.cut_path] = plan.cut_size_bytes
    for path, size in expected.items():
        if now.get(path) != size:
            raise RepairRefusedError(
                path,
                f"changed since the plan was made ({size} bytes then, {now.get(path)} now);"
                " plan again",
            )


def apply_truncation(plan: TruncationPlan, *, config: LogConfig | None = None) -> int:
    """Run steps K1-K7 of ``plan`` (module docstring); returns the log end offset after K7.

    Takes the partition directory's lock for K1-K6 (a second owner gets
    :class:`~changelog.errors.LogLockedError`, nothing changed) and checks first
    that the files are still the sizes the plan saw.  I/O errors raise
    :class:`~changelog.errors.LogStorageError`; running the plan made again
    afterwards finishes the job.
    """
    directory = plan.directory
    topic, partition = parse_topic_partition(directory)
    prefix = f"[{topic}-{partition}] "
    with DirectoryLock(directory):
        _check_unchanged(plan)
        marker = directory / files.CLEAN_SHUTDOWN_FILE
        if files.delete_file(marker, "repair.K1.delete_marker"):
            files.fsync_dir(directory, "repair.K1.fsync_dir")
        if plan.recovery_point_before != plan.recovery_point_after:
            write_offset_checkpoint(
                directory / RECOVERY_POINT_CHECKPOINT, topic, partition, plan.recovery_point_after
            )  # K2
        if (
            plan.cleaner_checkpoint_after is not None
            and plan.cleaner_checkpoint_after != plan.cleaner_checkpoint_before
        ):
            write_offset_checkpoint(
                directory / CLEANER_CHECKPOINT, topic, partition, plan.cleaner_checkpoint_after
            )  # K3
        if (
            plan.swap_checkpoint_after is not None
            and plan.swap_checkpoint_after != plan.swap_checkpoint_before
        ):
            write_offset_checkpoint(
                directory / CLEANER_SWAP_CHECKPOINT, topic, partition, plan.swap_checkpoint_after
            )  # K3
        for segment in reversed(plan.deleted_segments):  # K4, newest first
            for suffix in files.SEGMENT_SUFFIXES:
                path = directory / files.segment_file_name(segment.base_offset, suffix)
                if path.exists():
                    files.rename_file(
                        path,
                        path.with_name(path.name + files.DELETED_SUFFIX),
                        "repair.K4.rename",
                        sync_dir=False,
                    )
            files.fsync_dir(directory, "repair.K4.fsync_dir")
        if plan.cut_position < plan.cut_size_bytes:
            cut_base = files.parse_base_offset(plan.cut_path.name)[0]  # type: ignore[index]
            for suffix in (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX):
                files.delete_file(
                    directory / files.segment_file_name(cut_base, suffix), "repair.K5.delete"
                )
            files.fsync_dir(directory, "repair.K5.fsync_dir")
            _truncate_file(plan.cut_path, plan.cut_position)  # K6
        logger.warning(
            "%struncated by an operator at offset %s: %s bytes, %s acknowledged records removed",
            prefix,
            plan.log_end_offset_after,
            plan.removed_bytes,
            plan.removed_records,
        )
    for path in sorted(directory.iterdir()):  # K7
        if path.name.endswith(files.DELETED_SUFFIX):
            files.delete_file(path, "repair.K7.delete")
    files.fsync_dir(directory, "repair.K7.fsync_dir")
    log = Log.open(directory, config=config)
    try:
        return log.log_end_offset
    finally:
        log.close()


def _truncate_file(path: Path, size: int) -> None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise LogStorageError(path, "open", exc) from exc
    try:
        files.truncate_fd(fd, size, path, "repair.K6.truncate")
        files.fsync_fd(fd, path, "repair.K6.fsync")
    finally:
        os.close(fd)
