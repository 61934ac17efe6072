"""Kafka's text checkpoint files (``OffsetCheckpointFile``): one offset per topic partition.

Used for ``recovery-point-offset-checkpoint``, ``cleaner-offset-checkpoint`` and
``log-start-offset-checkpoint``.  UTF-8 text, ``\\n`` line endings::

    line  | content                      | notes
    ------+------------------------------+------------------------------------------
        1 | ``0``                        | format version; only 0 exists
        2 | ``<count>``                  | number of entry lines that follow
    3 ... | ``<topic> <partition> <offset>`` | one per topic partition, single spaces

Example (a partition directory ``balances-0`` whose recovery point is 1042)::

    0
    1
    balances 0 1042

There is no checksum: the file is replaced atomically (written to
``<name>.tmp``, fsynced, renamed over the old one, directory fsynced; see
:func:`changelog.fs.files.atomic_write`), so a reader sees the old file or the
new one, never a mix.  Anything else (a truncated file, a missing final
newline, a count that does not match, garbage) is reported as
:class:`~changelog.errors.CorruptCheckpointError` with the path, the byte
position and the line number, and never read as data: a truncated
``topic 0 1042`` could otherwise read as offset 10.  Stray ``.tmp`` files
left by a crash are ignored.  Checkpoints are trusted after a crash, because
of that protocol; the loader falls back to full recovery when one is corrupt.

Stricter than Kafka's reader on purpose: Kafka accepts an empty file and a
missing final newline and parses numbers with Java's ``parseInt``; we accept
only ASCII digits, require the final newline and reject duplicate entries.

Thread-safety: pure functions of the file; concurrent writers of one path
must be serialised by the caller (each write is atomic on its own).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from changelog.errors import (
    CorruptCheckpointError,
    InvalidCheckpointEntryError,
    LogStorageError,
)
from changelog.fs import files
from changelog.limits import INT32_MAX, INT64_MAX

__all__ = [
    "CHECKPOINT_VERSION",
    "CLEANER_CHECKPOINT",
    "CLEANER_SWAP_CHECKPOINT",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "InvalidCheckpointEntryError",
    "read_checkpoint",
    "read_leader_epochs",
    "read_offset_checkpoint",
    "write_checkpoint",
    "write_offset_checkpoint",
]

_logger = logging.getLogger(__name__)

CHECKPOINT_VERSION: Final = 0
_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")
"""Kafka's legal topic names (``Topic.validate``)."""
_NUMBER: Final = re.compile(r"-?[0-9]+")
_HEADER_LINES: Final = 2


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Read a checkpoint file into ``{(topic, partition): offset}``.

    A missing file is an empty checkpoint.  A truncated or garbled file
    raises :class:`CorruptCheckpointError` naming ``path``, the byte position
    and the line; an OS error reading it raises :class:`LogStorageError`.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise LogStorageError(path, "read", exc) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(path, exc.start, "not UTF-8 text") from exc
    if not text.endswith("\n"):
        line_number = text.count("\n") + 1
        raise CorruptCheckpointError(
            path,
            text.rfind("\n") + 1,
            f"line {line_number}: truncated (the file does not end with a newline)",
        )
    lines = text[:-1].split("\n")
    starts = _line_starts(lines)

    def corrupt(
        n: int, reason: str, *, expected: object = None, actual: object = None
    ) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            path, starts[n], f"line {n + 1}: {reason}", expected=expected, actual=actual
        )

    if len(lines) < _HEADER_LINES:
        raise corrupt(len(lines) - 1, "truncated before the entry count")
    if lines[0] != str(CHECKPOINT_VERSION):
        raise corrupt(0, "unrecognised version", expected=str(CHECKPOINT_VERSION), actual=lines[0])
    if not _NUMBER.fullmatch(lines[1]) or int(lines[1]) < 0:
        raise corrupt(1, "the entry count is not a non-negative integer", actual=lines[1])
    expected = int(lines[1])
    found = len(lines) - _HEADER_LINES
    if found != expected:
        raise corrupt(
            min(len(lines) - 1, _HEADER_LINES + expected),
            "the entry count does not match the entry lines",
            expected=expected,
            actual=found,
        )
    entries: dict[tuple[str, int], int] = {}
    for n in range(_HEADER_LINES, len(lines)):
        fields = lines[n].split(" ")
        if (
            len(fields) != 3
            or not _TOPIC.fullmatch(fields[0])
            or not _NUMBER.fullmatch(fields[1])
            or not _NUMBER.fullmatch(fields[2])
        ):
            raise corrupt(n, "not a 'topic partition offset' line", actual=lines[n])
        topic, partition, offset = fields[0], int(fields[1]), int(fields[2])
        if not 0 <= partition <= INT32_MAX or not 0 <= offset <= INT64_MAX:
            raise corrupt(n, "partition or offset out of range", actual=lines[n])
        if (topic, partition) in entries:
            raise corrupt(n, f"second entry for {topic}-{partition}", actual=lines[n])
        entries[(topic, partition)] = offset
    return entries


def _line_starts(lines: list[str]) -> list[int]:
    starts = []
    position = 0
    for line in lines:
        starts.append(position)
        position += len(line.encode("utf-8")) + 1
    return starts


def write_checkpoint(path: Path, entries: Mapping[tuple[str, int], int]) -> None:
    """Atomically replace ``path`` with ``entries`` (sorted by topic and partition).

    Every entry is checked first (a legal Kafka topic name, a partition in
    ``[0, 2**31)``, an offset in ``[0, 2**63)``): a bad one raises
    :class:`InvalidCheckpointEntryError` and nothing is written.  Then
    :func:`changelog.fs.files.atomic_write` (temp file, fsync, rename, directory
    fsync; fault points ``checkpoint.*``).
    """
    checked: list[tuple[str, int, int]] = []
    for key, offset in entries.items():
        if not isinstance(key, tuple) or len(key) != 2:
            raise InvalidCheckpointEntryError((key, offset), "key must be (topic, partition)")
        topic, partition = key
        if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
            raise InvalidCheckpointEntryError(
                (key, offset), "topic must be 1-249 characters of [a-zA-Z0-9._-]"
            )
        for name, value, high in (
            ("partition", partition, INT32_MAX),
            ("offset", offset, INT64_MAX),
        ):
            if type(value) is not int or not 0 <= value <= high:
                raise InvalidCheckpointEntryError(
                    (key, offset), f"{name} must be an int in [0, {high}]"
                )
        checked.append((topic, partition, offset))
    lines = [str(CHECKPOINT_VERSION), str(len(checked))]
    lines += [f"{topic} {partition} {offset}" for topic, partition, offset in sorted(checked)]
    files.atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"), "checkpoint")


# ------------------------------------------------------- the files of a partition directory

CLEANER_CHECKPOINT: Final = "cleaner-offset-checkpoint"
"""Name of the cleaner checkpoint inside the partition directory (Kafka's file name)."""
CLEANER_SWAP_CHECKPOINT: Final = "cleaner-swap-offset-checkpoint"
"""Ours, not Kafka's: the end offset of the newest cleaning pass that may have swapped segments in.

Written by the cleaner before its swap (step S1b of :mod:`changelog.log.replace`)
and never lowered.  The cleaner drops a group's emptied last batch (Kafka's
rule), so a cleaned segment may end before the next one begins; every such
segment has its base offset below this offset, so a hole between segments
after any other segment is damage (the loader refuses it)."""
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
"""Offsets below the recovery point were flushed; segments from it on are re-validated."""
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
"""The log start offset, as of the last clean close."""


def read_offset_checkpoint(path: Path, topic: str, partition: int) -> int | None:
    """This partition's offset in a Kafka text checkpoint file, ``None`` if absent.

    A file that cannot be parsed is logged and treated as absent (which only
    makes the loader do more work: recovery point 0 re-validates everything).
    """
    if not path.exists():
        return None
    try:
        entries = read_checkpoint(path)
    except CorruptCheckpointError as exc:
        _logger.warning("[%s-%s] ignoring unreadable checkpoint: %s", topic, partition, exc)
        return None
    return entries.get((topic, partition))


def write_offset_checkpoint(path: Path, topic: str, partition: int, offset: int) -> None:
    """Atomically write a checkpoint file holding this partition's ``offset``."""
    write_checkpoint(path, {(topic, partition): offset})


LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
"""Kafka's per-partition leader epoch cache: version 0, a count, ``epoch start_offset`` lines.

We never write it: our appends continue the log's last epoch, so a checkpoint a
broker left stays true (its last entry still covers every offset we add)."""


def read_leader_epochs(path: Path) -> list[tuple[int, int]]:
    """``(epoch, start offset)`` entries of a ``leader-epoch-checkpoint`` (missing: none).

    A file that is not Kafka's format raises :class:`CorruptCheckpointError`.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(path, exc.start, "not UTF-8 text") from exc
    except OSError as exc:
        raise LogStorageError(path, "read", exc) from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < _HEADER_LINES or lines[0] != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(path, 0, "not a version-0 leader epoch checkpoint")
    if not _NUMBER.fullmatch(lines[1]) or int(lines[1]) != len(lines) - _HEADER_LINES:
        raise CorruptCheckpointError(path, len(lines[0]) + 1, "the entry count does not match")
    entries: list[tuple[int, int]] = []
    for line in lines[_HEADER_LINES:]:
        fields = line.split(" ")
        if len(fields) != 2 or not all(_NUMBER.fullmatch(field) for field in fields):
            raise CorruptCheckpointError(
                path, text.find(line), "not an 'epoch start_offset' line", actual=line
            )
        entries.append((int(fields[0]), int(fields[1])))
    return entries
