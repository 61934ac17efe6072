"""The subcommands that open the state as a service does: ``compact``, ``restore``, ``get``, ``scan``.

They take the state directory's lock (and fail clearly while a service owns
it), run the loader's recovery, and for stores a restore.  Each takes the
parsed arguments and the output stream and returns an exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import attrs

from changelog.cleaner.clean import clean_log
from statestore.cli.errors import UsageError
from statestore.cli.output import (
    decode_for_display,
    encode_key,
    format_bytes,
    jsonable,
    write_json,
    write_table,
)
from statestore.cli.progress import Progress
from statestore.cli.statedir import (
    find_stores,
    is_partition_dir,
    recorded_log_config,
    select_stores,
)
from statestore.errors import StateStoreError
from statestore.serdes import LongSerde
from statestore.stores.metadata import read_metadata
from statestore.stores.time.settings import TimeSettings

__all__ = ["cmd_compact", "cmd_get", "cmd_restore", "cmd_scan"]


# --------------------------------------------------------------------------- compact


@contextmanager
def _state_dir_lock(state_dir: Path) -> Iterator[None]:
    """Hold the state directory's lock (as a service would) for the block."""
    from changelog.fs.lock import DirectoryLock  # noqa: PLC0415 - only for the writing commands

    lock = DirectoryLock(state_dir)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _compact_one(directory: Path, args: argparse.Namespace) -> dict[str, Any]:
    from changelog.config import LogConfig  # noqa: PLC0415
    from changelog.log.log import Log  # noqa: PLC0415

    recorded = recorded_log_config(directory)  # the store's real settings, when recorded
    config = recorded if recorded is not None else LogConfig()
    if args.delete_retention_ms is not None:
        config = attrs.evolve(config, delete_retention_ms=args.delete_retention_ms)
    if args.min_compaction_lag_ms is not None:
        config = attrs.evolve(config, min_compaction_lag_ms=args.min_compaction_lag_ms)
    log = Log.open(directory, config=config)
    try:
        before_bytes, before_segments = log.size_bytes, len(log.segments)
        rolled = False
        if args.roll and log.active_segment.size_bytes > 0:
            log.roll()
            rolled = True
        stats = clean_log(log, force=True)
        after_bytes, after_segments = log.size_bytes, len(log.segments)
        doc: dict[str, Any] = {
            "partition": directory.name,
            "rolled": rolled,
            "cleaned": stats is not None,
            "size_before_bytes": before_bytes,
            "size_after_bytes": after_bytes,
            "segments_before": before_segments,
            "segments_after": after_segments,
            "log_start_offset": log.log_start_offset,
            "log_end_offset": log.log_end_offset,
        }
        if stats is not None:
            doc.update(
                records_read=stats.records_read,
                records_kept=stats.records_kept,
                records_removed=stats.records_removed,
                tombstones_removed=stats.tombstones_removed,
                segments_rewritten=stats.segments_rewritten,
                seconds=round(stats.duration_s, 4),
                summary=stats.summary(),
            )
        return doc
    finally:
        log.close()


def _partition_dirs_for(path: Path, store: str | None) -> tuple[list[Path], Path | None]:
    """The changelog partitions to work on, and the state directory to lock (if any)."""
    if not path.exists():
        raise UsageError(f"{path}: no such directory")
    if is_partition_dir(path):
        if store is not None:
            raise UsageError("--store applies to a state directory, not a partition directory")
        return [path], None
    stores = select_stores(find_stores(path), store, path)
    return [d for s in stores for d in s.changelog_dirs], path


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    """Force a cleaning pass over every changelog partition (or one store's) and print its stats."""
    dirs, state_dir = _partition_dirs_for(args.path, args.store)
    docs: list[dict[str, Any]] = []
    if state_dir is not None:
        with _state_dir_lock(state_dir):
            docs = [_compact_one(d, args) for d in dirs]
    else:
        docs = [_compact_one(d, args) for d in dirs]
    if args.json:
        write_json(out, {"partitions": docs})
        return 0
    rows = []
    for doc in docs:
        rows.append(
            [
                doc["partition"],
                format_bytes(doc["size_before_bytes"]),
                format_bytes(doc["size_after_bytes"]),
                f"{doc['segments_before']} -> {doc['segments_after']}",
                doc.get("records_read", 0),
                doc.get("records_kept", 0),
                doc.get("tombstones_removed", 0),
                "cleaned" if doc["cleaned"] else "nothing to clean",
            ]
        )
    write_table(
        out,
        [
            "partition",
            "before",
            "after",
            "segments",
            "records read",
            "kept",
            "tombstones removed",
            "result",
        ],
        rows,
        right=[False, True, True, True, True, True, True, False],
    )
    if any(not doc["cleaned"] for doc in docs) and not args.roll:
        out.write(
            "\nnote: the active segment is never cleaned; --roll closes it first so that all "
            "of it can be compacted\n"
        )
    return 0


# --------------------------------------------------------------------------- stores (restore, get, scan)


@contextmanager
def _open_store(
    state_dir: Path, name: str, *, full_restore: bool, progress: Progress | None = None
) -> Iterator[Any]:
    """Open store ``name`` of ``state_dir`` with raw bytes serdes and its recorded settings.

    Partitions, restore mode and changelog settings come from the store's
    metadata file (:meth:`~statestore.StateManager.raw_store`); ``full_restore``
    rebuilds RocksDB from the changelog whatever the recorded mode.
    """
    from statestore.config import StateManagerConfig  # noqa: PLC0415
    from statestore.manager import StateManager  # noqa: PLC0415

    select_stores(find_stores(state_dir), name, state_dir)

    def hook(update: Any) -> None:
        if progress is not None:
            progress.total = max(progress.total or 0, update.end_offset - update.start_offset)
            progress.done = update.offset - update.start_offset
            progress.advance(0)

    with StateManager(state_dir, config=StateManagerConfig(run_cleaner=False)) as manager:
        store = manager.raw_store(name, rebuild=full_restore, progress=hook)
        yield manager, store


def cmd_restore(args: argparse.Namespace, out: TextIO) -> int:
    """Rebuild the RocksDB side of stores from their changelogs (full replay)."""
    stores = select_stores(find_stores(args.state_dir), args.store, args.state_dir)
    docs: list[dict[str, Any]] = []
    entries: dict[str, int] = {}
    for info in stores:
        with (
            Progress(f"restore {info.name}", unit="offsets") as progress,
            _open_store(args.state_dir, info.name, full_restore=True, progress=progress) as (
                manager,
                store,
            ),
        ):
            for number, result in enumerate(manager.restore_results(info.name)):
                docs.append(
                    {
                        "store": info.name,
                        "partition": number,
                        "mode": result.mode,
                        "rebuilt": result.rebuilt,
                        "start_offset": result.start_offset,
                        "end_offset": result.end_offset,
                        "records_restored": result.records_restored,
                        "seconds": round(result.seconds, 4),
                    }
                )
            entries[info.name] = store.approximate_num_entries()
    if args.json:
        write_json(out, {"restored": docs, "approximate_entries": entries})
        return 0
    rows = [
        [
            doc["store"],
            doc["partition"],
            f"{doc['start_offset']}..{doc['end_offset']}",
            doc["records_restored"],
            f"{doc['seconds']:.2f}s",
        ]
        for doc in docs
    ]
    write_table(
        out,
        ["store", "partition", "offsets replayed", "records", "time"],
        rows,
        right=[False, True, True, True, True],
    )
    out.write(f"\nrestore: rebuilt RocksDB of {len(stores)} store(s) from their changelogs\n")
    return 0


def _display(data: bytes, fmt: str) -> Any:
    try:
        return decode_for_display(data, fmt)
    except ValueError as exc:
        raise UsageError(
            f"cannot show a stored value as {fmt}: {exc} (try --value-format hex)"
        ) from None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(jsonable(value), ensure_ascii=False)


def _time_settings(state_dir: Path, store: str) -> TimeSettings | None:
    """The recorded settings of a store in time (``None``: a key-value store or no metadata)."""
    try:
        meta = read_metadata(state_dir, store)
    except StateStoreError:
        return None
    return None if meta is None else meta.time


def _long_values(state_dir: Path, store: str, fmt: str) -> str:
    """``long`` for ``auto`` when the store records Kafka's long serde (counts), else ``fmt``."""
    if fmt != "auto":
        return fmt
    try:
        meta = read_metadata(state_dir, store)
    except StateStoreError:
        return fmt
    return "long" if meta is not None and meta.value_serde == LongSerde.serde_id else fmt


def _time_entry(
    time: TimeSettings, key: bytes, value: bytes, args: argparse.Namespace
) -> tuple[Any, Any, dict[str, int]]:
    """One entry of a store in time, decoded for display: key, value, time fields."""
    try:
        plain_key, fields, plain_value = time.split_entry(key, value)
    except ValueError as exc:
        raise UsageError(f"cannot decode a {time.store_type} entry: {exc}") from None
    shown = None if plain_value is None else _display(plain_value, args.value_format)
    return _display(plain_key, args.key_format), shown, fields


def _time_key_text(key: Any, fields: dict[str, int]) -> str:
    return " ".join([_text(key), *(f"{name}={value}" for name, value in fields.items())])


def _cmd_get_in_time(args: argparse.Namespace, out: TextIO, time: TimeSettings, key: bytes) -> int:
    """``get`` of a store in time: every window, session or version of the key."""
    with _open_store(args.state_dir, args.store, full_restore=False) as (_manager, store):
        found = [
            _time_entry(time, stored, value, args)
            for stored, value in store.prefix_scan(key)
            if time.split_entry(stored, value)[0] == key
        ]
    if args.json:
        write_json(
            out,
            {
                "key": args.key,
                "found": bool(found),
                "entries": [{**fields, "value": value} for _key, value, fields in found],
            },
        )
    else:
        for shown_key, value, fields in found:
            out.write(f"{_time_key_text(shown_key, fields)}: {_text(value)}\n")
    if not found and not args.json:
        print(f"statestore: key {args.key!r} not found in store {args.store!r}", file=sys.stderr)
    return 0 if found else 1


def cmd_get(args: argparse.Namespace, out: TextIO) -> int:
    """Print the value of one key (exit 1 if the key is absent).

    For a store in time: every window, session or version of the key, with its time fields.
    """
    try:
        key = encode_key(args.key, args.key_format)
    except ValueError as exc:
        raise UsageError(f"key: {exc}") from None
    time = _time_settings(args.state_dir, args.store)
    args.value_format = _long_values(args.state_dir, args.store, args.value_format)
    if time is not None:
        return _cmd_get_in_time(args, out, time, key)
    with _open_store(args.state_dir, args.store, full_restore=False) as (_manager, store):
        data = store.get(key)
    if data is None:
        if args.json:
            write_json(out, {"key": args.key, "found": False, "value": None})
        else:
            print(
                f"statestore: key {args.key!r} not found in store {args.store!r}", file=sys.stderr
            )
        return 1
    value = _display(data, args.value_format)
    if args.json:
        write_json(out, {"key": args.key, "found": True, "value": value})
    elif isinstance(value, dict | list):
        out.write(json.dumps(jsonable(value), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(_text(value) + "\n")
    return 0


def cmd_scan(args: argparse.Namespace, out: TextIO) -> int:
    """Print entries in key order (a prefix or a ``[from, to)`` range), as a table or JSON."""
    if args.prefix is not None and (args.start is not None or args.end is not None):
        raise UsageError("give --prefix or --from/--to, not both")
    try:
        prefix = None if args.prefix is None else encode_key(args.prefix, args.key_format)
        lo = None if args.start is None else encode_key(args.start, args.key_format)
        hi = None if args.end is None else encode_key(args.end, args.key_format)
    except ValueError as exc:
        raise UsageError(f"key: {exc}") from None
    entries: list[tuple[Any, Any]] = []
    times: list[dict[str, int]] = []
    time = _time_settings(args.state_dir, args.store)
    args.value_format = _long_values(args.state_dir, args.store, args.value_format)
    with _open_store(args.state_dir, args.store, full_restore=False) as (_manager, store):
        if prefix is not None:
            source = store.prefix_scan(prefix, reverse=args.reverse)
        else:
            source = store.range(lo, hi, reverse=args.reverse)
        for key, value in source:
            if time is not None:  # a store in time: its layout decoded (docs/time.md)
                shown_key, shown_value, fields = _time_entry(time, key, value, args)
                entries.append((shown_key, None if args.keys_only else shown_value))
                times.append(fields)
            else:
                entries.append(
                    (
                        _display(key, args.key_format),
                        None if args.keys_only else _display(value, args.value_format),
                    )
                )
            if args.limit is not None and len(entries) >= args.limit:
                break
    if args.json:
        if args.keys_only:
            write_json(out, {"keys": [key for key, _ in entries]})
        elif times:
            write_json(
                out,
                {
                    "entries": [
                        {"key": k, **fields, "value": v}
                        for (k, v), fields in zip(entries, times, strict=True)
                    ]
                },
            )
        else:
            write_json(out, {"entries": [{"key": k, "value": v} for k, v in entries]})
        return 0
    if times:
        entries = [
            (_time_key_text(k, fields), v) for (k, v), fields in zip(entries, times, strict=True)
        ]
    if args.keys_only:
        for key, _ in entries:
            out.write(_text(key) + "\n")
    else:
        write_table(out, ["key", "value"], [[_text(k), _text(v)] for k, v in entries])
    out.write(f"({len(entries)} entries)\n")
    return 0
