"""The read-only subcommands: ``inspect``, ``dump`` and ``verify``.

They read files only: no lock, no recovery, nothing written, so they work
next to a running service.  Each takes the parsed arguments and the output
stream and returns an exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any, TextIO

from statestore.cli.dump import DumpOptions, dump_paths
from statestore.cli.output import format_bytes, write_json, write_table
from statestore.cli.progress import Progress
from statestore.cli.statedir import (
    PartitionInfo,
    find_partitions,
    find_stores,
    is_partition_dir,
    lock_holder,
    scan_partition,
    select_stores,
)
from statestore.cli.verify import (
    PartitionReport,
    total_log_bytes,
    verify_partition,
    verify_store_layouts,
)
from statestore.stores.metadata import read_metadata

__all__ = ["cmd_dump", "cmd_inspect", "cmd_verify", "dir_size"]


def dir_size(path: Path) -> int | None:
    """Bytes of the files under ``path`` (files vanishing meanwhile, as RocksDB's do, skipped)."""
    if not path.is_dir():
        return None
    total = 0
    for child in path.rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            if child.is_file():
                total += child.stat().st_size
    return total


# --------------------------------------------------------------------------- inspect


def _record_ttl_ms(state_dir: Path, store: str) -> int:
    """The store's recorded ``record_ttl_ms`` (0: no TTL, or no metadata)."""
    meta = read_metadata(state_dir, store)
    return 0 if meta is None else meta.log_config.record_ttl_ms


def _partition_doc(info: PartitionInfo) -> dict[str, Any]:
    return {
        "directory": str(info.directory),
        "log_start_offset": info.log_start_offset,
        "log_end_offset": info.log_end_offset,
        "recovery_point": info.recovery_point,
        "first_dirty_offset": info.first_dirty_offset,
        "size_bytes": info.size_bytes,
        "clean_bytes": info.clean_bytes,
        "dirty_bytes": info.dirty_bytes,
        "dirty_ratio": round(info.dirty_ratio, 4),
        "records": info.records,
        "markers": info.markers,
        "live_keys": info.live_keys,
        "tombstones": info.tombstones,
        "expired_keys": info.expired_keys,
        "invalid_bytes": info.invalid_bytes,
        "preallocated_bytes": info.preallocated_bytes,
        "clean_shutdown": info.clean_shutdown,
        "segments": [
            {
                "base_offset": s.base_offset,
                "size_bytes": s.size_bytes,
                "batches": s.batches,
                "records": s.records,
                "next_offset": s.next_offset,
            }
            for s in info.segments
        ],
    }


def cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    """Stores, partitions, offsets, segments, sizes, dirty ratio and live keys of a state directory."""
    state_dir: Path = args.state_dir
    stores = select_stores(find_stores(state_dir), args.store, state_dir)
    holder = lock_holder(state_dir)
    dirs = [d for store in stores for d in store.changelog_dirs]
    infos: dict[Path, PartitionInfo] = {}
    now_ms = int(time.time() * 1000)
    ttls = {store.name: _record_ttl_ms(state_dir, store.name) for store in stores}
    with Progress("inspect", total_log_bytes(dirs)) as progress:
        for store in stores:
            ttl_ms = ttls[store.name]
            for directory in store.changelog_dirs:
                infos[directory] = scan_partition(
                    directory,
                    count_keys=not args.no_keys,
                    advance=progress.advance,
                    expiry_cutoff_ms=now_ms - ttl_ms if ttl_ms else None,
                )
    if args.json:
        write_json(
            out,
            {
                "state_dir": str(state_dir),
                "locked_by": holder,
                "stores": [
                    {
                        "name": store.name,
                        "record_ttl_ms": ttls[store.name],
                        "partitions": [
                            {
                                "partition": number,
                                **_partition_doc(infos[directory]),
                                "rocksdb_bytes": dir_size(store.rocksdb_dirs[number]),
                            }
                            for number, directory in enumerate(store.changelog_dirs)
                        ],
                    }
                    for store in stores
                ],
            },
        )
        return 0
    status = f"in use by {holder} (figures may move)" if holder else "not in use"
    out.write(f"state directory {state_dir} ({status})\n\n")
    rows: list[list[object]] = []
    for store in stores:
        for number, directory in enumerate(store.changelog_dirs):
            info = infos[directory]
            rocksdb = dir_size(store.rocksdb_dirs[number])
            rows.append(
                [
                    store.name,
                    number,
                    info.log_start_offset,
                    info.log_end_offset,
                    len(info.segments),
                    format_bytes(info.size_bytes),
                    f"{info.dirty_ratio:.2f}",
                    info.records,
                    info.markers,
                    info.live_keys,
                    info.tombstones,
                    "-" if rocksdb is None else format_bytes(rocksdb),
                ]
            )
    write_table(
        out,
        [
            "store",
            "partition",
            "log start",
            "log end",
            "segments",
            "size",
            "dirty ratio",
            "records",
            "markers",
            "live keys",
            "tombstones",
            "rocksdb",
        ],
        rows,
        right=[False, True, True, True, True, True, True, True, True, True, True, True],
    )
    for store in stores:
        for directory in store.changelog_dirs:
            info = infos[directory]
            out.write(f"\n{directory.name}: ")
            ttl_ms = ttls[store.name]
            if ttl_ms:
                expired = "-" if info.expired_keys is None else info.expired_keys
                out.write(
                    f"TTL {ttl_ms} ms, {expired} of the live keys expired by now "
                    "(reads skip them; the sweep and the cleaner remove them), "
                )
            out.write(
                f"first dirty offset {info.first_dirty_offset}, recovery point "
                f"{'-' if info.recovery_point is None else info.recovery_point}, "
                f"{'clean shutdown' if info.clean_shutdown else 'no clean-shutdown marker'}"
                f"{f', {info.invalid_bytes} invalid bytes (run verify)' if info.invalid_bytes else ''}\n"
            )
            segment_rows: list[list[object]] = []
            for i, segment in enumerate(info.segments):
                segment_rows.append(
                    [
                        segment.base_offset,
                        segment.next_offset,
                        segment.batches,
                        segment.records,
                        format_bytes(segment.size_bytes),
                        "active" if i == len(info.segments) - 1 else "",
                    ]
                )
            write_table(
                out,
                ["base offset", "next offset", "batches", "records", "size", ""],
                segment_rows,
                right=[True, True, True, True, True, False],
            )
    return 0


# --------------------------------------------------------------------------- dump


def cmd_dump(args: argparse.Namespace, out: TextIO) -> int:
    """Batches and records of segment files, in kafka-dump-log's format (or JSON)."""
    options = DumpOptions(
        print_data=not (args.shallow or args.no_data),
        deep_iteration=not args.shallow,
        key_format=args.key_format,
        value_format=args.value_format,
        as_json=args.json,
    )
    documents = list(dump_paths(list(args.paths), options, out))
    if args.json:
        write_json(out, {"files": documents})
    return 0


# --------------------------------------------------------------------------- verify


def _report_doc(report: PartitionReport) -> dict[str, Any]:
    return {
        "directory": str(report.directory),
        "segments": report.segments,
        "batches": report.batches,
        "records": report.records,
        "size_bytes": report.size_bytes,
        "errors": report.errors,
        "warnings": report.warnings,
        "open": None
        if report.verdict is None
        else {
            "refused": report.verdict.refused,
            "error": report.verdict.error,
            "path": None if report.verdict.path is None else str(report.verdict.path),
            "position": report.verdict.position,
            "steps": list(report.verdict.steps),
            "log_end_offset": report.verdict.log_end_offset,
            "offset": report.verdict.offset,
        },
        "problems": [p.doc() for p in report.problems],
    }


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    """CRC of every batch, index and checkpoint sanity; exit 1 on errors (or warnings with --strict)."""
    partitions = [p for path in args.paths for p in find_partitions(path)]
    reports: list[PartitionReport] = []
    with Progress("verify", total_log_bytes(partitions)) as progress:
        for directory in partitions:
            reports.append(verify_partition(directory, progress))
    state_dirs = [path for path in args.paths if not is_partition_dir(path)]
    reports.extend(verify_store_layouts(state_dirs))
    errors = sum(r.errors for r in reports)
    warnings = sum(r.warnings for r in reports)
    failed = errors > 0 or (args.strict and warnings > 0)
    if args.json:
        write_json(
            out,
            {
                "ok": not failed,
                "errors": errors,
                "warnings": warnings,
                "partitions": [_report_doc(r) for r in reports],
            },
        )
        return 1 if failed else 0
    rows = [
        [
            str(r.directory),
            r.segments,
            r.batches,
            r.records,
            format_bytes(r.size_bytes),
            "OK"
            if not r.errors and not r.warnings
            else f"{r.errors} errors, {r.warnings} warnings",
        ]
        for r in reports
    ]
    write_table(
        out,
        ["partition", "segments", "batches", "records", "size", "result"],
        rows,
        right=[False, True, True, True, True, False],
    )
    problems = [p for r in reports for p in r.problems]
    if problems:
        out.write("\n")
        for problem in problems:
            out.write(problem.render() + "\n")
    verdict = "FAILED" if failed else "OK"
    out.write(
        f"\nverify: {verdict}: {len(reports)} partitions, {errors} errors, {warnings} warnings\n"
    )
    return 1 if failed else 0
