"""What every ``statestore repair`` remedy shares: the partition argument, the locks, the settings,
and how a plan ends (nothing to do, a dry run, or applied and re-verified).

Thread-safety: plain functions; :func:`partition_locks` holds the state
directory's lock for its block.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from statestore.cli.errors import UsageError
from statestore.cli.output import write_json
from statestore.cli.reverify import reverify
from statestore.cli.statedir import is_partition_dir, lock_holder

if TYPE_CHECKING:
    from changelog.config import LogConfig

__all__ = [
    "DRY_RUN",
    "end_applied",
    "end_dry_run",
    "end_nothing_to_do",
    "partition_arg",
    "partition_locks",
    "recorded_log_config",
    "refuse_pending_repair",
    "state_dir_of",
]

DRY_RUN: Final = "dry run: nothing was changed; run again with --apply to do it"
"""The last line of every remedy's page without ``--apply``."""

_CHANGELOG_DIR: Final = re.compile(r"^.+-changelog-\d+$")

JOURNALED_REMEDIES: Final = frozenset({"truncate", "drop-torn-tail", "roll-back", "complete"})
"""The remedies that show or complete a pending repair journal; every other command refuses."""


def partition_arg(path: Path) -> Path:
    """``path`` if it is a changelog partition directory, else :class:`UsageError`."""
    if not path.exists():
        raise UsageError(f"{path}: no such directory")
    if not is_partition_dir(path):
        raise UsageError(f"{path}: not a changelog partition directory (no <offset>.log files)")
    return path


def state_dir_of(partition: Path) -> Path | None:
    """The state directory a ``<store>-changelog-<p>`` partition belongs to (one with a ``.lock``)."""
    parent = partition.resolve().parent
    if _CHANGELOG_DIR.match(partition.resolve().name) and (parent / ".lock").exists():
        return parent
    return None


def recorded_log_config(partition: Path) -> tuple[LogConfig, str]:
    """The ``LogConfig`` the partition's store recorded, and where it was read from.

    A ``<store>-changelog-<p>`` directory of a state directory takes the
    ``log_config`` of ``<store>.metadata.json`` (docs/operations.md, "Store
    metadata"), so a remedy's reopen (K7, X2) and its rebuilt indexes use the
    log's own settings (``index_interval_bytes``: the index density); any other
    partition directory, or a store without the file (made before store metadata), gets
    ``LogConfig``'s defaults.  A damaged file raises
    :class:`~statestore.errors.CorruptStoreMetadataError`.
    """
    from changelog.config import LogConfig  # noqa: PLC0415
    from statestore.stores.metadata import metadata_path, read_metadata  # noqa: PLC0415

    state_dir = state_dir_of(partition)
    if state_dir is not None:
        store = partition.resolve().name.rsplit("-changelog-", 1)[0]
        meta = read_metadata(state_dir, store)
        if meta is not None:
            return meta.log_config, str(metadata_path(partition.parent, store))  # as given
    return LogConfig(), "LogConfig's defaults (no store metadata file)"


@contextlib.contextmanager
def partition_locks(partition: Path, *, apply: bool, out: TextIO) -> Iterator[None]:
    """Hold the state directory's lock for the block (``apply``); else only warn if it is held.

    A held lock makes ``--apply`` fail with :class:`~changelog.errors.LogLockedError`
    (exit 1, nothing changed); the partition's own lock is taken by the remedy.
    """
    from changelog.errors import LogLockedError  # noqa: PLC0415
    from changelog.fs.lock import LOCK_FILE_NAME, DirectoryLock  # noqa: PLC0415

    state_dir = state_dir_of(partition)
    holders = [
        (d, lock_holder(d)) for d in (state_dir, partition) if d is not None and lock_holder(d)
    ]
    if not apply:
        for directory, holder in holders:
            out.write(
                f"note: {directory} is locked by {holder}: --apply will refuse until it stops\n"
            )
        yield
        return
    if holders:
        directory, holder = holders[0]
        raise LogLockedError(directory / LOCK_FILE_NAME, holder)
    if state_dir is None:
        yield
        return
    with DirectoryLock(state_dir):
        yield


def end_nothing_to_do(out: TextIO, plan_doc: dict[str, Any], *, json: bool, text: str) -> int:
    """A plan with nothing to do: ``{"plan", "applied": false, "nothing_to_do": true}`` or
    ``text`` (the page: title and why); exit status 0."""
    if json:
        write_json(out, {"plan": plan_doc, "applied": False, "nothing_to_do": True})
    else:
        out.write(text)
    return 0


def end_dry_run(out: TextIO, plan_doc: dict[str, Any], *, json: bool) -> int:
    """A plan printed without ``--apply``: ``{"plan", "applied": false}`` or :data:`DRY_RUN`;
    exit status 0."""
    if json:
        write_json(out, {"plan": plan_doc, "applied": False})
    else:
        out.write(f"\n{DRY_RUN}\n")
    return 0


def end_applied(
    out: TextIO,
    partition: Path,
    plan_doc: dict[str, Any],
    *,
    json: bool,
    text: str,
    log_end_offset: int | None = None,
) -> int:
    """An applied plan: ``applied: <text>`` (or the JSON document, with ``log_end_offset`` when
    given), then ``statestore verify`` of ``partition``; exit status 0 when it verifies, else 1."""
    if not json:
        out.write(f"\napplied: {text}\n")
        ok, _ = reverify(partition, out)
        return 0 if ok else 1
    ok, verify_doc = reverify(partition, io.StringIO())
    result: dict[str, Any] = {"plan": plan_doc, "applied": True}
    if log_end_offset is not None:
        result["log_end_offset"] = log_end_offset
    result["verify"] = verify_doc
    write_json(out, result)
    return 0 if ok else 1


def refuse_pending_repair(args: Any) -> None:
    """Raise :class:`~statestore.errors.RepairInProgressError` when a path of the command
    lies in a state directory holding a repair journal (docs/recovery.md, "The repair
    journal"), unless the command is one of :data:`JOURNALED_REMEDIES`, which complete it."""
    from changelog.repair.journal import journal_path  # noqa: PLC0415
    from statestore.errors import RepairInProgressError  # noqa: PLC0415

    if getattr(args, "command", None) == "repair" and args.remedy in JOURNALED_REMEDIES:
        return
    paths: list[Path] = []
    for value in vars(args).values():  # every path argument of every command
        values = value if isinstance(value, list) else [value]
        paths.extend(v for v in values if isinstance(v, Path))
    for path in paths:
        if path.is_file():
            directory = path.parent.parent  # a segment file of a partition
        elif is_partition_dir(path):
            directory = path.parent
        else:
            directory = path
        journal = journal_path(directory)
        if journal.exists():
            raise RepairInProgressError(journal)
