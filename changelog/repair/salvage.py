"""Operator remedy: salvage a damaged log, keeping every valid batch around the damage.

:func:`plan_salvage` (read-only) walks every segment of the partition the way
:func:`changelog.repair.scan.walk` does: where a batch fails its framing or
CRC-32C check, it resynchronizes on the next position where a whole batch
with a valid header and CRC starts, and goes on.  Each damaged segment is
rewritten with its valid batches only, byte for byte; offsets never change.
What cannot be kept is named:

- every unreadable byte range, with the offsets it held (the offsets between
  the last valid batch before it and the first valid batch after it) and the
  keys that the damaged batch still yields when read without its CRC
  (``unverified``: they may be wrong, a person decides what they mean);
- a valid batch whose offsets do not fit between its neighbours (the 8-byte
  base offset is not covered by the CRC) is treated as damage;
- transactions (Kafka's model, :mod:`changelog.repair.scan`) that the damage
  splits.  A COMMIT marker found after damage with no data of its producer
  waiting has lost its data here (:attr:`TransactionLoss.certain` when the
  damaged offsets were never cleaned, so the data cannot have been compacted
  away).  Data of a transaction followed by damage and then by the *next*
  data batch of the same producer (with no marker between) has lost its
  marker: its outcome cannot be read here, and salvage drops that data rather
  than let the next marker decide it (a statestore commit writes one
  transactional batch per partition, so a second data batch of the producer
  starts the next transaction).  The other partitions of a cross-store
  transaction are not in this directory: the CLI names them from the
  coordinator's log (``statestore repair salvage``).

Damage at the end of the last segment with nothing valid after it (a torn
tail) is removed too; a transaction whose data precedes it stays open, for
the coordinator to decide at the next open as after any crash.

A closed segment whose last batch is lost (so that it would end before the
next segment's base offset) gets an empty batch covering the missing offsets, as Kafka's
cleaner keeps an emptied last batch (``DefaultRecordBatch.writeEmptyHeader``):
segments stay contiguous, and no checkpoint has to explain a hole.

The salvage protocol (each step a fault point of :mod:`changelog.fs.files`),
built on the cleaner's swap so that the loader finishes or undoes it
(``docs/recovery.md``, passes L3-L5):

- **V0** delete what an undecided segment replace left (``.cleaned`` files, the
  ``.swap`` files at or above them, ``*.tmp``), as the loader's L1 and L3 would:
  a salvage killed before its decision is finished by running it again, even in
  a directory the loader refuses.

- **V1** only when the log end offset goes down (the last segment lost its
  tail): delete ``.kafka_cleanshutdown``; lower ``recovery-point-offset-checkpoint``
  to the base offset of the last segment, and the cleaner checkpoints to the
  new log end offset when above it.  Each write is atomic; none of them
  changes a segment, they only make the next open re-check more.
- **V2** write each rewritten segment as ``<base>.log.cleaned`` (written to a
  temporary file, fsynced, renamed), then fsync the directory.
- **V3** rename each ``.cleaned`` file to ``.swap``, highest base offset
  first, an fsync of the directory after each.  Until the last rename the
  loader deletes them all (L3: the directory is as before); after it the
  loader completes the swap (L4 deletes the old segments' files, L5 renames):
  the directory is as after.
- **V4** open the log (L4-L5, indexes rebuilt at L7, ``.txnindex`` at L10) and
  close it cleanly.

Thread-safety: the caller keeps every writer out (``apply_salvage`` takes the
partition directory's lock for V1-V3; ``Log.open`` takes it for V4).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import attrs

from changelog.config import LogConfig
from changelog.errors import (
    ChangelogError,
    CorruptDataError,
    RepairRefusedError,
)
from changelog.fs import files
from changelog.fs.checkpoint import (
    CLEANER_CHECKPOINT,
    CLEANER_SWAP_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
    write_offset_checkpoint,
)
from changelog.fs.lock import DirectoryLock
from changelog.log.log import Log
from changelog.log.log_dir import parse_topic_partition
from changelog.record.batch import decode_header, decode_key_values
from changelog.record.control import ControlRecordType, read_marker
from changelog.record.header import BATCH_HEADER_SIZE, NO_PRODUCER_ID, write_header
from changelog.repair.scan import (
    Batch,
    Damage,
    SegmentFile,
    keys_of,
    protocol_leftovers,
    segment_files,
    walk,
)
from changelog.segment.mapped import MappedFile

__all__ = [
    "DroppedBatch",
    "LostRange",
    "SalvagePlan",
    "SegmentRewrite",
    "TransactionLoss",
    "apply_salvage",
    "complete_decided_replace",
    "has_decided_replace",
    "plan_salvage",
]

logger = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


@attrs.frozen(kw_only=True)
class LostRange:
    """Bytes ``[position, position + size_bytes)`` of ``path`` that hold no valid batch."""

    path: Path
    position: int
    size_bytes: int
    reason: str
    first_offset: int
    """The first offset the damage may have held (the previous valid batch's next offset)."""
    end_offset: int | None
    """The first offset after it (the next valid batch's base offset); ``None``: a torn tail
    of the log, whose offsets are not known."""
    unverified_keys: tuple[bytes | None, ...] | None
    """Keys read from the damaged bytes without the CRC (may be wrong); ``None``: unreadable."""


@attrs.frozen(kw_only=True)
class DroppedBatch:
    """A valid data batch that salvage does not keep: its transaction's marker was lost."""

    path: Path
    position: int
    size_bytes: int
    base_offset: int
    last_offset: int
    producer_id: int
    keys: tuple[bytes | None, ...]


@attrs.frozen(kw_only=True)
class TransactionLoss:
    """A transaction that the damage splits in this partition."""

    producer_id: int
    producer_epoch: int
    lost: Literal["data", "marker"]
    """``data``: its data lay in the damaged bytes, its COMMIT marker is kept;
    ``marker``: its data is kept but its marker lay in the damaged bytes (salvage drops
    the data: its outcome cannot be read here)."""
    first_offset: int | None
    """The first offset of its data here (``lost == "marker"``); else ``None``."""
    marker_offset: int | None
    """The offset of its COMMIT marker (``lost == "data"``); else ``None``."""
    damaged_offsets: tuple[int, int | None]
    """The offsets of the damage that holds the lost part: ``[first, end)``."""
    certain: bool
    """``lost == "data"``: whether the damaged offsets were never cleaned (otherwise the
    data may have been compacted away before the damage, and nothing is lost)."""


@attrs.frozen(kw_only=True)
class SegmentRewrite:
    """One damaged segment and the content salvage gives it."""

    segment: SegmentFile
    kept_batches: int
    next_offset_after: int
    placeholder: tuple[int, int] | None
    """``(first, last)`` offsets of the empty batch that closes the segment, if any."""
    content: bytes = attrs.field(repr=False, eq=False)

    @property
    def new_size_bytes(self) -> int:
        """Bytes of the rewritten ``.log``."""
        return len(self.content)


@attrs.frozen(kw_only=True)
class SalvagePlan:
    """Everything a salvage keeps, drops and changes; made by :func:`plan_salvage`, read-only."""

    directory: Path
    topic: str
    partition: int
    stale_files: tuple[Path, ...]
    """Leftovers of an undecided segment replace, deleted at V0 (the loader's L1, L3)."""
    rewrites: tuple[SegmentRewrite, ...]
    lost: tuple[LostRange, ...]
    dropped: tuple[DroppedBatch, ...]
    transactions: tuple[TransactionLoss, ...]
    kept_batches: int
    """Valid batches kept in the rewritten segments."""
    log_end_offset_after: int
    """The next offset after the last valid batch of the last segment."""
    torn_tail: bool
    """Whether the last segment ends with damage (its offsets are not known)."""
    had_clean_shutdown: bool
    recovery_point_before: int | None
    recovery_point_after: int | None
    cleaner_checkpoint_before: int | None
    cleaner_checkpoint_after: int | None
    swap_checkpoint_before: int | None
    swap_checkpoint_after: int | None

    @property
    def nothing_to_do(self) -> bool:
        """Whether every segment is whole valid batches already (and nothing is left over)."""
        return not self.rewrites and not self.stale_files

    @property
    def lowers_log_end(self) -> bool:
        """Whether the last segment loses its damaged tail (step V1 runs)."""
        return self.torn_tail

    def steps(self) -> list[str]:
        """The protocol steps (module docstring) this plan runs, one line each."""
        d = self.directory
        out: list[str] = [
            f"V0 delete {path.name} (left by a segment replace that did not finish)"
            for path in self.stale_files
        ]
        if self.lowers_log_end:
            if self.had_clean_shutdown:
                out.append(f"V1 delete {d / files.CLEAN_SHUTDOWN_FILE}")
            for name, before, after in (
                (RECOVERY_POINT_CHECKPOINT, self.recovery_point_before, self.recovery_point_after),
                (CLEANER_CHECKPOINT, self.cleaner_checkpoint_before, self.cleaner_checkpoint_after),
                (CLEANER_SWAP_CHECKPOINT, self.swap_checkpoint_before, self.swap_checkpoint_after),
            ):
                if after is not None and after != before:
                    out.append(f"V1 write {d / name}: {before} -> {after}")
        for rewrite in self.rewrites:
            name = rewrite.segment.path.name
            placeholder = ""
            if rewrite.placeholder is not None:
                first, last = rewrite.placeholder
                placeholder = f" + an empty batch for offsets {first}..{last}"
            out.append(
                f"V2 write {name}{files.CLEANED_SUFFIX}: {rewrite.kept_batches} valid batches"
                f"{placeholder}, {rewrite.segment.size_bytes} -> {rewrite.new_size_bytes} bytes"
            )
        for rewrite in sorted(self.rewrites, key=lambda r: -r.segment.base_offset):
            name = rewrite.segment.path.name
            out.append(
                f"V3 rename {name}{files.CLEANED_SUFFIX} -> {name}{files.SWAP_SUFFIX}"
                " (highest first: after the last rename the swap is decided)"
            )
        out.append(
            "V4 open the log (the loader swaps the segments in, L4-L5, and rebuilds their"
            " indexes, L7, L10) and close it cleanly"
        )
        return out


def _checkpoint_or_none(path: Path) -> int | None:
    try:
        entries = read_checkpoint(path)
    except CorruptDataError:
        return None
    return max(entries.values()) if entries else None


def _unverified_keys(path: Path, position: int, size: int) -> tuple[bytes | None, ...] | None:
    """The keys of the batch at ``position`` read without its CRC, if its framing holds."""
    with MappedFile(path) as data:
        try:
            header = decode_header(data, position, path=path, validate=False)
            if header.size_in_bytes > size or header.is_control:
                return None
            raw = bytes(data[position : position + header.size_in_bytes])
            return tuple(
                key
                for _o, key, _v in decode_key_values(
                    raw, path=path, position=position, validate=False
                )
            )
        except (ChangelogError, ValueError, IndexError, OverflowError, UnicodeDecodeError):
            return None


def _empty_batch(first: int, last: int, timestamp_ms: int) -> bytes:
    """An empty batch (no record, no producer) covering offsets ``first..last``."""
    return bytes(
        write_header(
            bytearray(BATCH_HEADER_SIZE),
            base_offset=first,
            partition_leader_epoch=0,
            attributes=0,
            last_offset_delta=last - first,
            base_timestamp=timestamp_ms,
            max_timestamp=timestamp_ms,
            producer_id=NO_PRODUCER_ID,
            producer_epoch=-1,
            base_sequence=-1,
            records_count=0,
        )
    )


@attrs.define
class _Segment:
    """One segment's items after the offset check: valid batches and merged damage."""

    file: SegmentFile
    items: list[Batch | Damage] = attrs.field(factory=list)

    def add_damage(self, damage: Damage) -> None:
        last = self.items[-1] if self.items else None
        if isinstance(last, Damage) and last.position + last.size_bytes == damage.position:
            self.items[-1] = Damage(
                last.path, last.position, last.size_bytes + damage.size_bytes, last.reason
            )
        else:
            self.items.append(damage)


def _read_segments(segments: list[SegmentFile]) -> list[_Segment]:
    out = []
    expected = segments[0].base_offset if segments else 0
    for index, segment in enumerate(segments):
        upper = segments[index + 1].base_offset if index + 1 < len(segments) else None
        expected = max(expected, segment.base_offset)
        seg = _Segment(segment)
        for item in walk(segment.path):
            if isinstance(item, Damage):
                seg.add_damage(item)
                continue
            header = item.header
            if (
                header.base_offset < expected
                or (upper is not None and header.last_offset >= upper)
                or header.last_offset - segment.base_offset > _INT32_MAX
            ):
                seg.add_damage(
                    Damage(
                        item.path,
                        item.position,
                        header.size_in_bytes,
                        f"a valid batch whose offsets {header.base_offset}..{header.last_offset}"
                        " do not fit between its neighbours (the base offset is outside the CRC)",
                    )
                )
                continue
            seg.items.append(item)
            expected = header.next_offset
        out.append(seg)
    return out


def _base(path: Path) -> int:
    parsed = files.parse_base_offset(path.name)
    assert parsed is not None  # protocol_leftovers returns segment files only
    return parsed[0]


def _undecided_replace(directory: Path) -> tuple[Path, ...]:
    """The files of a segment replace that did not reach its decision (the loader's L1, L3).

    With a ``.cleaned`` file present the replace (an earlier salvage killed in V2-V3, or
    a cleaner pass in S1-S2) is undecided: the loader deletes every ``.cleaned`` file and
    every ``.swap`` at or above the lowest ``.cleaned`` base offset, and the segments are
    the old ones; salvage does the same at V0, so a salvage killed halfway is finished by
    running it again even when the loader refuses the directory.  Only ``.swap`` files
    (a decided replace) are refused: the loader completes them at the next open.
    """
    leftovers = protocol_leftovers(directory)
    cleaned = [p for p in leftovers if p.name.endswith(files.CLEANED_SUFFIX)]
    if not leftovers:
        return tuple(sorted(directory.glob("*.tmp")))
    if not cleaned:
        raise RepairRefusedError(
            leftovers[0],
            "a decided segment replace (.swap files without .cleaned ones) is in the"
            " directory; the loader completes it at the next open (`repair salvage --apply`"
            " opens the log for that first), then plan the salvage again",
        )
    lowest = min(_base(p) for p in cleaned)
    swaps = [p for p in leftovers if p.name.endswith(files.SWAP_SUFFIX)]
    below = [p for p in swaps if _base(p) < lowest]
    if below:
        raise RepairRefusedError(
            below[0],
            "a decided segment replace below an undecided one; open the log once so that the"
            " loader completes it, then plan the salvage again",
        )
    return tuple(sorted([*cleaned, *swaps, *directory.glob("*.tmp")]))


def has_decided_replace(directory: Path) -> bool:
    """Whether ``directory`` holds ``.swap`` files and no ``.cleaned`` one (a decided replace)."""
    leftovers = protocol_leftovers(Path(directory))
    return bool(leftovers) and not any(p.name.endswith(files.CLEANED_SUFFIX) for p in leftovers)


def complete_decided_replace(directory: Path, *, config: LogConfig | None = None) -> None:
    """Open and close the log: the loader completes a decided replace (L4-L5), as after V3.

    Raises what the open raises (a directory the loader refuses for another reason).
    """
    Log.open(Path(directory), config=config).close()


def plan_salvage(directory: Path) -> SalvagePlan:
    """Plan the salvage of ``directory`` (read-only; module docstring).

    Raises :class:`RepairRefusedError` (nothing changed) for a directory without
    segments or holding an unfinished cleaner swap.
    """
    directory = Path(directory)
    topic, partition = parse_topic_partition(directory)
    stale = _undecided_replace(directory)
    files_ = segment_files(directory)
    if not files_:
        raise RepairRefusedError(directory, "no segment (.log) files: nothing to salvage")
    segments = _read_segments(files_)
    cleaner_before = _checkpoint_or_none(directory / CLEANER_CHECKPOINT)
    first_dirty = cleaner_before if cleaner_before is not None else files_[0].base_offset

    lost: list[LostRange] = []
    losses: list[TransactionLoss] = []
    dropped_ids: set[int] = set()
    dropped: list[DroppedBatch] = []
    pending: dict[int, list[Batch]] = {}
    suspect: dict[int, LostRange] = {}  # producers with data pending across a damage
    since_damage: set[int] = set()  # producers seen since the last damage
    last_damage: LostRange | None = None
    next_offset = files_[0].base_offset
    last_timestamp = 0

    for seg_index, seg in enumerate(segments):
        is_last = seg_index == len(segments) - 1
        upper = None if is_last else segments[seg_index + 1].file.base_offset
        next_offset = max(next_offset, seg.file.base_offset)
        for item_index, item in enumerate(seg.items):
            if isinstance(item, Damage):
                following = next(
                    (i for i in seg.items[item_index + 1 :] if isinstance(i, Batch)), None
                )
                end = following.header.base_offset if following is not None else upper
                damage = LostRange(
                    path=item.path,
                    position=item.position,
                    size_bytes=item.size_bytes,
                    reason=item.reason,
                    first_offset=next_offset,
                    end_offset=end,
                    unverified_keys=_unverified_keys(item.path, item.position, item.size_bytes),
                )
                lost.append(damage)
                tail = is_last and following is None
                if not tail:
                    for pid in pending:
                        suspect.setdefault(pid, damage)
                last_damage, since_damage = damage, set()
                continue
            header = item.header
            last_timestamp = max(last_timestamp, header.max_timestamp)
            next_offset = header.next_offset
            pid = header.producer_id
            if pid == NO_PRODUCER_ID or not header.is_transactional:
                continue
            first_since = pid not in since_damage
            since_damage.add(pid)
            if header.is_control:
                marker = read_marker(header, item.data, path=item.path, position=item.position)
                waiting = pending.pop(pid, [])
                suspect.pop(pid, None)
                if (
                    not waiting
                    and first_since
                    and last_damage is not None
                    and marker is not None
                    and marker.type is ControlRecordType.COMMIT
                ):
                    losses.append(
                        TransactionLoss(
                            producer_id=pid,
                            producer_epoch=header.producer_epoch,
                            lost="data",
                            first_offset=None,
                            marker_offset=header.base_offset,
                            damaged_offsets=(last_damage.first_offset, last_damage.end_offset),
                            certain=last_damage.first_offset >= first_dirty,
                        )
                    )
                continue
            if pid in suspect:  # data pending across a damage, then the producer's next data
                damage = suspect.pop(pid)
                waiting = pending.pop(pid, [])
                losses.append(
                    TransactionLoss(
                        producer_id=pid,
                        producer_epoch=waiting[0].header.producer_epoch,
                        lost="marker",
                        first_offset=waiting[0].header.base_offset,
                        marker_offset=None,
                        damaged_offsets=(damage.first_offset, damage.end_offset),
                        certain=True,
                    )
                )
                for batch in waiting:
                    dropped_ids.add(id(batch))
                    dropped.append(
                        DroppedBatch(
                            path=batch.path,
                            position=batch.position,
                            size_bytes=batch.header.size_in_bytes,
                            base_offset=batch.header.base_offset,
                            last_offset=batch.header.last_offset,
                            producer_id=pid,
                            keys=tuple(key for key, _t in keys_of(batch)),
                        )
                    )
            pending.setdefault(pid, []).append(item)
        if upper is not None:
            next_offset = max(next_offset, upper)

    torn_tail = bool(lost) and lost[-1].end_offset is None
    rewrites: list[SegmentRewrite] = []
    kept_total = 0
    for seg_index, seg in enumerate(segments):
        is_last = seg_index == len(segments) - 1
        damaged = any(isinstance(i, Damage) for i in seg.items)
        drops = any(isinstance(i, Batch) and id(i) in dropped_ids for i in seg.items)
        if not damaged and not drops:
            continue
        kept = [i for i in seg.items if isinstance(i, Batch) and id(i) not in dropped_ids]
        content = b"".join(batch.data for batch in kept)
        seg_next = kept[-1].header.next_offset if kept else seg.file.base_offset
        placeholder: tuple[int, int] | None = None
        tail_lost = bool(seg.items) and (
            isinstance(seg.items[-1], Damage) or id(seg.items[-1]) in dropped_ids
        )
        if not is_last and tail_lost:  # a hole compaction made before is left as it was
            upper = segments[seg_index + 1].file.base_offset
            if seg_next < upper:
                placeholder = (seg_next, upper - 1)
                stamp = kept[-1].header.max_timestamp if kept else last_timestamp
                content += _empty_batch(seg_next, upper - 1, stamp)
                seg_next = upper
        kept_total += len(kept)
        rewrites.append(
            SegmentRewrite(
                segment=seg.file,
                kept_batches=len(kept),
                next_offset_after=seg_next,
                placeholder=placeholder,
                content=content,
            )
        )
    rp_before = _checkpoint_or_none(directory / RECOVERY_POINT_CHECKPOINT)
    swap_before = _checkpoint_or_none(directory / CLEANER_SWAP_CHECKPOINT)
    last_base = files_[-1].base_offset
    rp_after, cleaner_after, swap_after = rp_before, cleaner_before, swap_before
    if torn_tail:
        rp_after = last_base if rp_before is None else min(rp_before, last_base)
        if cleaner_before is not None and cleaner_before > next_offset:
            cleaner_after = next_offset
        if swap_before is not None and swap_before > next_offset:
            swap_after = next_offset
    return SalvagePlan(
        directory=directory,
        topic=topic,
        partition=partition,
        stale_files=stale,
        rewrites=tuple(rewrites),
        lost=tuple(lost),
        dropped=tuple(dropped),
        transactions=tuple(losses),
        kept_batches=kept_total,
        log_end_offset_after=next_offset,
        torn_tail=torn_tail,
        had_clean_shutdown=(directory / files.CLEAN_SHUTDOWN_FILE).exists(),
        recovery_point_before=rp_before,
        recovery_point_after=rp_after,
        cleaner_checkpoint_before=cleaner_before,
        cleaner_checkpoint_after=cleaner_after,
        swap_checkpoint_before=swap_before,
        swap_checkpoint_after=swap_after,
    )


def _check_unchanged(plan: SalvagePlan) -> None:
    now = {s.path: s.size_bytes for s in segment_files(plan.directory)}
    for rewrite in plan.rewrites:
        path, size = rewrite.segment.path, rewrite.segment.size_bytes
        if now.get(path) != size:
            raise RepairRefusedError(
                path,
                f"changed since the plan was made ({size} bytes then, {now.get(path)} now);"
                " plan again",
            )
    leftovers = set(protocol_leftovers(plan.directory))
    if not leftovers <= set(plan.stale_files):
        raise RepairRefusedError(plan.directory, "a segment replace appeared; plan again")


def apply_salvage(plan: SalvagePlan, *, config: LogConfig | None = None) -> int:
    """Run steps V1-V4 of ``plan`` (module docstring); returns the log end offset after V4.

    Takes the partition directory's lock for V1-V3 and checks first that the
    damaged segments are still the sizes the plan saw.  I/O errors raise
    :class:`~changelog.errors.LogStorageError`; the directory is then as before
    or as after (V3), and planning again finishes the job.
    """
    directory = plan.directory
    topic, partition = plan.topic, plan.partition
    with DirectoryLock(directory):
        _check_unchanged(plan)
        for path in plan.stale_files:  # V0, as the loader's L1 and L3
            files.delete_file(path, "repair.V0.delete")
        if plan.stale_files:
            files.fsync_dir(directory, "repair.V0.fsync_dir")
        if plan.lowers_log_end:  # V1
            marker = directory / files.CLEAN_SHUTDOWN_FILE
            if files.delete_file(marker, "repair.V1.delete_marker"):
                files.fsync_dir(directory, "repair.V1.fsync_dir")
            for name, before, after in (
                (RECOVERY_POINT_CHECKPOINT, plan.recovery_point_before, plan.recovery_point_after),
                (CLEANER_CHECKPOINT, plan.cleaner_checkpoint_before, plan.cleaner_checkpoint_after),
                (CLEANER_SWAP_CHECKPOINT, plan.swap_checkpoint_before, plan.swap_checkpoint_after),
            ):
                if after is not None and after != before:
                    write_offset_checkpoint(directory / name, topic, partition, after)
        for rewrite in plan.rewrites:  # V2
            cleaned = rewrite.segment.path.with_name(
                rewrite.segment.path.name + files.CLEANED_SUFFIX
            )
            files.atomic_write(cleaned, rewrite.content, "repair.V2.write")
        files.fsync_dir(directory, "repair.V2.fsync_dir")
        for rewrite in sorted(plan.rewrites, key=lambda r: -r.segment.base_offset):  # V3
            name = rewrite.segment.path.name
            files.rename_file(
                directory / (name + files.CLEANED_SUFFIX),
                directory / (name + files.SWAP_SUFFIX),
                "repair.V3.rename",
            )
        logger.warning(
            "[%s-%s] salvaged by an operator: %s damaged ranges removed, %s valid batches kept"
            " in %s rewritten segments, %s batches of transactions without a marker dropped",
            topic,
            partition,
            len(plan.lost),
            plan.kept_batches,
            len(plan.rewrites),
            len(plan.dropped),
        )
    log = Log.open(directory, config=config)  # V4
    try:
        return log.log_end_offset
    finally:
        log.close()
