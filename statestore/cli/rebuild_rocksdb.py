"""``statestore repair rebuild-rocksdb``: delete a store's RocksDB and restore it from its changelog.

For a RocksDB directory that is damaged, lost, copied from elsewhere, or
suspected of holding what its changelog does not.  The changelog is the
source of truth: each partition is replayed from its log start offset,
``read_committed`` (aborted transactions never reach RocksDB), as a full
restore does at start-up.

The dry run prints each RocksDB directory (files and bytes that will be
deleted) and each changelog partition's verdict and offsets; a partition the
loader refuses is refused here too (fix the changelog first: truncate or
drop-torn-tail), since a restore could not read it.

The protocol (each file step a fault point of :mod:`changelog.fs.files`):

- **B1** rename each ``<store>-rocksdb-<p>`` to ``<store>-rocksdb-<p>.deleted``
  (deleting first the ``.deleted`` tree an interrupted earlier run left, if any)
  and fsync the state directory.  A crash after B1 leaves the partition
  without a RocksDB: the next open of the store replays its whole changelog
  into a new one.  A half-renamed set is the same, partition by partition.
- **B2** delete the ``.deleted`` trees (deepest first; nobody reads that name),
  then fsync the state directory.  A crash leaves part of a tree that the
  remedy run again deletes; no store opens it.
- **B3** open the store with its recorded settings
  (:meth:`~statestore.StateManager.raw_store` with ``rebuild=True``: a full replay
  whatever the recorded restore mode, which is left as it is) and close it.

Then the changelogs are verified again (``statestore verify``'s check), and
the report shows each partition's replayed offsets and records.

B1-B2 run under the state directory's lock; B3 releases it and opens the
store through a :class:`~statestore.StateManager`, which takes it again.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TextIO

import attrs

from statestore.cli.output import format_bytes, write_json, write_table
from statestore.cli.remedy import end_dry_run
from statestore.cli.reverify import reverify
from statestore.cli.statedir import find_stores, lock_holder, select_stores

__all__ = ["RocksDBDir", "add_parser", "cmd_rebuild_rocksdb", "plan_rebuild"]

DELETED_SUFFIX: Final = ".deleted"


@attrs.frozen
class RocksDBDir:
    """One partition of a store: its RocksDB directory (what is deleted) and its changelog."""

    store: str
    partition: int
    path: Path
    exists: bool
    files: int
    size_bytes: int
    leftover: bool
    """A ``.deleted`` tree of an earlier, interrupted run exists (B2 deletes it)."""
    changelog: Path
    log_start_offset: int
    log_end_offset: int


def _tree_size(path: Path) -> tuple[int, int]:
    count = size = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            count += 1
            with contextlib.suppress(OSError):
                size += (Path(root) / name).stat().st_size
    return count, size


def plan_rebuild(state_dir: Path, store: str | None) -> list[RocksDBDir]:
    """What B1-B3 would delete and replay (read-only).

    Raises :class:`~changelog.errors.RepairRefusedError` for a changelog the loader refuses.
    """
    from changelog.errors import ChangelogError, RepairRefusedError  # noqa: PLC0415
    from changelog.log.load_plan import plan_load  # noqa: PLC0415
    from changelog.log.log_dir import parse_topic_partition  # noqa: PLC0415

    out = []
    for info in select_stores(find_stores(state_dir), store, state_dir):
        for number, (changelog, rocksdb) in enumerate(
            zip(info.changelog_dirs, info.rocksdb_dirs, strict=True)
        ):
            topic, partition = parse_topic_partition(changelog)
            try:
                load = plan_load(changelog, topic=topic, partition=partition)
            except ChangelogError as exc:
                raise RepairRefusedError(
                    changelog,
                    f"the loader refuses this changelog ({type(exc).__name__}: {exc}), so it"
                    " cannot be replayed; repair it first (truncate or drop-torn-tail,"
                    " docs/recovery.md)",
                ) from exc
            count, size = _tree_size(rocksdb) if rocksdb.exists() else (0, 0)
            out.append(
                RocksDBDir(
                    store=info.name,
                    partition=number,
                    path=rocksdb,
                    exists=rocksdb.exists(),
                    files=count,
                    size_bytes=size,
                    leftover=rocksdb.with_name(rocksdb.name + DELETED_SUFFIX).exists(),
                    changelog=changelog,
                    log_start_offset=load.log_start_offset,
                    log_end_offset=load.log_end_offset,
                )
            )
    return out


def _steps(dirs: list[RocksDBDir]) -> list[str]:
    steps = [
        f"B1 rename {d.path} to {d.path.name}{DELETED_SUFFIX} ({d.files} files, "
        f"{format_bytes(d.size_bytes)})"
        for d in dirs
        if d.exists
    ]
    steps += [
        f"B2 delete {d.path.name}{DELETED_SUFFIX} (deepest first), fsync {d.path.parent}"
        for d in dirs
        if d.exists or d.leftover
    ]
    stores = sorted({d.store for d in dirs})
    steps.append(
        f"B3 open {', '.join(stores)} with a full restore (replay read_committed from the log"
        " start offset) and close"
    )
    return steps


def _apply(state_dir: Path, dirs: list[RocksDBDir]) -> list[dict[str, Any]]:
    from changelog.fs import files  # noqa: PLC0415
    from changelog.fs.lock import DirectoryLock  # noqa: PLC0415
    from statestore.config import StateManagerConfig  # noqa: PLC0415
    from statestore.manager import StateManager  # noqa: PLC0415

    with DirectoryLock(state_dir):
        for d in dirs:  # B1
            if d.exists and d.leftover:  # an earlier run stopped after its B1: its B2 first
                files.delete_tree(d.path.with_name(d.path.name + DELETED_SUFFIX), "repair.B2")
            if d.exists:
                files.rename_file(
                    d.path,
                    d.path.with_name(d.path.name + DELETED_SUFFIX),
                    "repair.B1.rename",
                    sync_dir=False,
                )
        files.fsync_dir(state_dir, "repair.B1.fsync_dir")
        for d in dirs:  # B2
            files.delete_tree(d.path.with_name(d.path.name + DELETED_SUFFIX), "repair.B2")
    results: list[dict[str, Any]] = []
    names = sorted({d.store for d in dirs})
    with StateManager(state_dir, config=StateManagerConfig(run_cleaner=False)) as manager:  # B3
        for name in names:
            # The store's recorded settings (partitions, restore mode, LogConfig); a full
            # replay whatever the mode, which stays as recorded.
            store = manager.raw_store(name, rebuild=True)
            for number, result in enumerate(manager.restore_results(name)):
                results.append(
                    {
                        "store": name,
                        "partition": number,
                        "rebuilt": result.rebuilt,
                        "start_offset": result.start_offset,
                        "end_offset": result.end_offset,
                        "records_restored": result.records_restored,
                        "entries": sum(1 for _ in store.items()),
                    }
                )
    return results


def cmd_rebuild_rocksdb(args: argparse.Namespace, out: TextIO) -> int:
    """Delete a store's RocksDB and restore it from its changelog (dry run unless ``--apply``)."""
    from changelog.errors import LogLockedError  # noqa: PLC0415
    from changelog.fs.lock import LOCK_FILE_NAME  # noqa: PLC0415

    state_dir: Path = args.state_dir
    holder = lock_holder(state_dir) if state_dir.exists() else None
    if holder and args.apply:
        raise LogLockedError(state_dir / LOCK_FILE_NAME, holder)
    dirs = plan_rebuild(state_dir, args.store)
    doc: dict[str, Any] = {
        "state_dir": str(state_dir),
        "partitions": [
            {
                "store": d.store,
                "partition": d.partition,
                "rocksdb": str(d.path),
                "exists": d.exists,
                "files": d.files,
                "size_bytes": d.size_bytes,
                "leftover": d.leftover,
                "changelog": str(d.changelog),
                "log_start_offset": d.log_start_offset,
                "log_end_offset": d.log_end_offset,
            }
            for d in dirs
        ],
        "steps": _steps(dirs),
    }
    if not args.json:
        out.write(f"rebuild the RocksDB of {', '.join(sorted({d.store for d in dirs}))} from")
        out.write(" the changelog\n\n")
        if holder:
            out.write(f"note: {state_dir} is locked by {holder}: --apply will refuse\n\n")
        rows = [
            [
                d.store,
                d.partition,
                d.path.name if d.exists else "(missing)",
                d.files,
                format_bytes(d.size_bytes),
                f"{d.log_start_offset}..{d.log_end_offset}",
            ]
            for d in dirs
        ]
        write_table(
            out,
            ["store", "partition", "rocksdb", "files", "size", "offsets to replay"],
            rows,
            right=[False, True, False, True, True, True],
            end="\nsteps:\n",
        )
        out.writelines(f"  {step}\n" for step in doc["steps"])
    if not args.apply:
        return end_dry_run(out, doc, json=args.json)
    results = _apply(state_dir, dirs)
    sink: TextIO = out if not args.json else io.StringIO()
    if not args.json:
        out.write("\napplied:\n")
        write_table(
            out,
            ["store", "partition", "offsets replayed", "records", "entries"],
            [
                [
                    r["store"],
                    r["partition"],
                    f"{r['start_offset']}..{r['end_offset']}",
                    r["records_restored"],
                    r["entries"],
                ]
                for r in results
            ],
            right=[False, True, True, True, True],
            end="\n\n",
        )
    verified = [reverify(d.changelog, sink) for d in dirs]
    ok = all(v[0] for v in verified)
    if args.json:
        write_json(
            out,
            {"plan": doc, "applied": True, "restored": results, "verify": [v[1] for v in verified]},
        )
    return 0 if ok else 1


def add_parser(remedies: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``rebuild-rocksdb`` to the ``repair`` subparsers."""
    parser = remedies.add_parser(
        "rebuild-rocksdb",
        help="delete a store's RocksDB and restore it from its changelog (full replay)",
        description=(
            "Delete each RocksDB directory of a store (renamed .deleted first) and replay its "
            "changelog from the log start offset, read_committed, as a full restore does."
        ),
    )
    parser.add_argument("state_dir", type=Path, metavar="STATE_DIR")
    parser.add_argument("--store", help="only this store (default: every store)")
    common(parser)
    parser.set_defaults(func=cmd_rebuild_rocksdb)
