"""The repair journal: truncations of one or more partitions, all-or-nothing by roll-forward.

A truncation of one partition (:mod:`changelog.repair.truncate`, K1-K7) is not
atomic on its own: killed during K4 it leaves a prefix between the old log and
the new one.  A roll-back over several partitions (the partitions of a
transaction and of every later one a cut would split) is worse: killed between
two partitions, some are cut and some are not.  The journal makes the whole
change one decision: an fsynced intent file, written before any change, naming
every partition's new log end offset and every directory to delete (the
RocksDB directories of the stores above, named by the caller).  While it
exists, the directory is *between*: the statestore layer refuses every open of
the state directory (``StateManager`` and every ``statestore`` command, with
:class:`~statestore.errors.RepairInProgressError` naming the journal), except
the remedies, whose ``--apply`` completes it.  Completing is idempotent: each
partition's truncation is planned afresh at the recorded offset (a partition
already there has nothing to remove), so running it again after a crash at any
step ends exactly as after.  Only then is the journal deleted.

Format: ``<directory>/.repair-journal``, UTF-8 JSON, one object:

======================  =============================================================
field                   meaning
======================  =============================================================
``format``              ``"statestore-repair-journal"``
``version``             ``1``
``remedy``              the remedy that wrote it (``"truncate"``, ``"roll-back"``)
``cuts``                ``[{"partition": "<dir name>", "log_end_offset": N}, ...]``:
                        each partition's log end offset after (a batch boundary)
``delete_directories``  names of directories of ``<directory>`` to delete (RocksDB)
``crc32c``              CRC-32C of the canonical JSON (sorted keys, no spaces) of
                        every other field, as an unsigned decimal integer
======================  =============================================================

The journal protocol (each step a fault point of :mod:`changelog.fs.files`):

- **J1** plan every partition's truncation (read-only; any refusal refuses the
  whole remedy, nothing changed), then write the journal atomically (temp file,
  fsync, rename, fsync of the directory).  A crash before the rename: as before
  (a stray ``.repair-journal.tmp`` that nobody reads; the next J1 overwrites it).
- **J2** for each partition, in the journal's order: plan the truncation at its
  recorded log end offset afresh and run K1-K7 (K7 alone when nothing is left to
  remove: the loader tidies what a crash left, L2/L6).
- **J3** rename each directory to delete to ``<name>.deleted`` (deleting first a
  ``.deleted`` tree an earlier run left), fsync the directory, delete the trees.
- **J4** delete the journal; fsync the directory.  From here: as after.

Thread-safety: the caller holds the state directory's lock (every writer out);
:func:`complete_journal` takes each partition's lock through K1-K7.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import crc32c

from changelog.config import LogConfig
from changelog.errors import RepairRefusedError
from changelog.fs import files
from changelog.repair.truncate import TruncationPlan, apply_truncation, plan_truncation

__all__ = [
    "JOURNAL_FILE",
    "JournalCut",
    "RepairJournal",
    "complete_journal",
    "journal_path",
    "pending",
    "plan_cuts",
    "read_journal",
    "write_journal",
]

logger = logging.getLogger(__name__)

JOURNAL_FILE: Final = ".repair-journal"
"""The journal's name inside the directory holding the partitions (a state directory)."""
_FORMAT: Final = "statestore-repair-journal"
_VERSION: Final = 1
_DELETED: Final = ".deleted"


@attrs.frozen
class JournalCut:
    """One partition directory (a name inside the journal's directory) and its new log end."""

    partition: str
    log_end_offset: int


@attrs.frozen(kw_only=True)
class RepairJournal:
    """What a journaled remedy will have done once complete (module docstring).

    Invariants: ``cuts`` name distinct partitions; every name is a plain name
    inside ``directory`` (no separator), checked by :func:`read_journal`.
    """

    directory: Path
    remedy: str
    cuts: tuple[JournalCut, ...]
    delete_directories: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        """``<directory>/.repair-journal``."""
        return journal_path(self.directory)

    def encode(self) -> bytes:
        """The journal file's bytes (format in the module docstring)."""
        body: dict[str, Any] = {
            "format": _FORMAT,
            "version": _VERSION,
            "remedy": self.remedy,
            "cuts": [
                {"partition": c.partition, "log_end_offset": c.log_end_offset} for c in self.cuts
            ],
            "delete_directories": list(self.delete_directories),
        }
        body["crc32c"] = crc32c.crc32c(_canonical(body))
        return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()

    def steps(self) -> list[str]:
        """J1-J4 of this journal, one line each (J2 per partition; its K-steps are its plan's)."""
        out = [
            f"J1 write {self.path} naming {len(self.cuts)} partition(s) and their new log end"
            " offsets (fsynced, before any change): from here every open of"
            f" {self.directory} refuses until the journal is complete"
        ]
        out.extend(
            f"J2 truncate {c.partition} to log end offset {c.log_end_offset} (K1-K7)"
            for c in self.cuts
        )
        if self.delete_directories:
            out.append(
                f"J3 delete {', '.join(self.delete_directories)} (renamed .deleted first;"
                " the next open of each store replays its changelog into a new one)"
            )
        out.append(f"J4 delete {self.path}: the repair is complete")
        return out


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def journal_path(directory: Path) -> Path:
    """Where the journal of ``directory`` (a state directory) lives."""
    return Path(directory) / JOURNAL_FILE


def _plain_name(name: object, path: Path) -> str:
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise RepairRefusedError(path, f"the journal names {name!r}, not a directory name")
    return name


def _decode(data: bytes, path: Path) -> tuple[str, tuple[JournalCut, ...], tuple[str, ...]]:
    """``(remedy, cuts, delete_directories)`` of a journal file; ValueError, TypeError or
    KeyError when it is not one."""
    body = json.loads(data)
    if not isinstance(body, dict):
        raise TypeError("not a JSON object")
    stored = body.pop("crc32c")
    if body.get("format") != _FORMAT or body.get("version") != _VERSION:
        raise ValueError(f"unknown format {body.get('format')!r} {body.get('version')!r}")
    if stored != crc32c.crc32c(_canonical(body)):
        raise ValueError("its CRC-32C does not match")
    cuts = tuple(
        JournalCut(_plain_name(c["partition"], path), int(c["log_end_offset"]))
        for c in body["cuts"]
    )
    remove = tuple(_plain_name(name, path) for name in body["delete_directories"])
    return str(body["remedy"]), cuts, remove


def read_journal(directory: Path) -> RepairJournal | None:
    """The journal of ``directory``; ``None`` when there is none.

    A file that does not parse or fails its CRC raises :class:`RepairRefusedError`
    (the journal is written atomically, so that is damage: the partitions it
    named may be between their old and new logs; ``verify`` them, decide, and
    remove the file by hand).
    """
    directory = Path(directory)
    path = journal_path(directory)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RepairRefusedError(path, f"the repair journal cannot be read: {exc}") from exc
    try:
        remedy, cuts, remove = _decode(data, path)
    except (ValueError, TypeError, KeyError) as exc:
        raise RepairRefusedError(
            path,
            f"the repair journal is damaged ({exc}): the partitions it names may be between"
            " their old and new logs; verify them, decide, and remove the file by hand",
        ) from exc
    if len({c.partition for c in cuts}) != len(cuts):
        raise RepairRefusedError(path, "the repair journal names a partition twice")
    return RepairJournal(directory=directory, remedy=remedy, cuts=cuts, delete_directories=remove)


def write_journal(journal: RepairJournal) -> None:
    """J1: write the journal atomically (refuses when one is already there, nothing changed)."""
    if journal.path.exists():
        raise RepairRefusedError(
            journal.path, "an unfinished repair's journal is there: complete it first"
        )
    files.atomic_write(journal.path, journal.encode(), "repair.J1.journal")


def plan_cuts(directory: Path, cuts: Sequence[JournalCut]) -> list[TruncationPlan]:
    """Each cut's truncation plan, planned afresh (read-only)."""
    return [plan_truncation(Path(directory) / c.partition, c.log_end_offset) for c in cuts]


def complete_journal(
    journal: RepairJournal,
    *,
    config_for: Callable[[Path], LogConfig | None] = lambda _partition: None,
    on_partition: Callable[[TruncationPlan, int], None] | None = None,
) -> dict[str, int]:
    """Run J2-J4 of ``journal`` (module docstring); returns each partition's log end after.

    Idempotent: after a crash at any step, calling it again (with the journal
    read back by :func:`read_journal`) ends exactly as an uninterrupted run.
    ``config_for`` gives the ``LogConfig`` a partition's K7 opens it with;
    ``on_partition(plan, log_end_offset)`` is called after each partition.  An
    I/O error raises :class:`~changelog.errors.LogStorageError` and leaves the
    journal in place (the directory stays refused until it completes).
    """
    directory = journal.directory
    ends: dict[str, int] = {}
    for cut in journal.cuts:  # J2
        partition = directory / cut.partition
        plan = plan_truncation(partition, cut.log_end_offset)
        if plan.log_end_offset_after != cut.log_end_offset:
            raise RepairRefusedError(
                partition,
                f"the journal's cut at log end offset {cut.log_end_offset} is not a batch"
                f" boundary here any more (it would end at {plan.log_end_offset_after}):"
                " the partition changed since the journal was written",
                offset=cut.log_end_offset,
            )
        end = apply_truncation(plan, config=config_for(partition))
        ends[cut.partition] = end
        if on_partition is not None:
            on_partition(plan, end)
    for name in journal.delete_directories:  # J3
        target, aside = directory / name, directory / (name + _DELETED)
        if target.exists():
            files.delete_tree(aside, "repair.J3.delete_tree")
            files.rename_file(target, aside, "repair.J3.rename", sync_dir=False)
    if journal.delete_directories:
        files.fsync_dir(directory, "repair.J3.fsync_dir")
        for name in journal.delete_directories:
            files.delete_tree(directory / (name + _DELETED), "repair.J3.delete_tree")
    files.delete_file(journal.path, "repair.J4.delete")  # J4
    files.fsync_dir(directory, "repair.J4.fsync_dir")
    logger.warning(
        "[%s] repair journal (%s) complete: %s",
        directory,
        journal.remedy,
        ", ".join(f"{name} ends at {end}" for name, end in ends.items()),
    )
    return ends


def pending(directory: Path) -> bool:
    """Whether ``directory`` holds a journal (complete or not, readable or not)."""
    return journal_path(directory).exists()
