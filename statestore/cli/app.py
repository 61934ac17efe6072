"""Argument parsing, dispatch and error handling of the ``statestore`` command.

Exit statuses: 0 success; 1 a failure (corruption found by ``verify``, a
locked state directory, a missing key for ``get``, an I/O error); 2 a usage
error (bad arguments, a path that does not exist or is not what the command
needs); 130 interrupted.  User mistakes print one ``statestore: error: ...``
line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from statestore.cli.errors import UsageError, non_negative
from statestore.cli.output import VALUE_FORMATS

__all__ = ["build_parser", "main"]

PROG = "statestore"

Command = Callable[[argparse.Namespace, TextIO], int]


# What ``--value-format auto`` tries first: a segment's bytes are shown as Kafka shows them (text
# first), a store's values as its default serde reads them (msgpack first).
AUTO_DUMP = "auto = UTF-8 text, else msgpack, else hex"
AUTO_STORE = "auto = msgpack, else UTF-8 text, else hex"


def _add_formats(
    parser: argparse.ArgumentParser, *, key_default: str = "str", auto: str = AUTO_STORE
) -> None:
    parser.add_argument(
        "--key-format",
        choices=VALUE_FORMATS,
        default=key_default,
        help=f"how keys are stored/shown (default: {key_default}, the store's default key serde)",
    )
    parser.add_argument(
        "--value-format",
        choices=VALUE_FORMATS,
        default="auto",
        help=f"how values are shown (default: {auto})",
    )


def _version() -> str:
    """The installed distribution's version (``unknown`` when run from an uninstalled tree)."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("statestore")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    from statestore.cli import (  # noqa: PLC0415 - light --help
        metadata_commands,
        read_commands,
        store_commands,
    )
    from statestore.cli import top as top_command  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Inspect, check and repair statestore state directories "
            "(RocksDB stores backed by Kafka-format changelog partitions)."
        ),
        epilog="Run 'statestore COMMAND --help' for a command's options. See docs/cli.md.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    inspect = sub.add_parser(
        "inspect",
        help="stores, partitions, offsets, segments, sizes, dirty ratio, live keys (read-only)",
        description="Show what a state directory holds. Reads files only: safe next to a running service.",
    )
    inspect.add_argument("state_dir", type=Path, metavar="STATE_DIR")
    inspect.add_argument("--store", help="only this store")
    inspect.add_argument(
        "--no-keys", action="store_true", help="skip counting live keys (no pass over the records)"
    )
    inspect.add_argument("--json", action="store_true", help="machine-readable output")
    inspect.set_defaults(func=read_commands.cmd_inspect)

    top = sub.add_parser(
        "top",
        help="a live view of a running state directory, refreshed every few seconds (read-only)",
        description=(
            "Refresh, every --interval seconds, each store partition's offsets, append rate, "
            "segments, size, dirty ratio, first dirty offset, last cleaning and RocksDB size. "
            "Reads files only: safe next to a running service. With --metrics-url it also "
            "scrapes the service's /metrics for restore progress, commits and the cleaner."
        ),
    )
    top.add_argument("state_dir", type=Path, metavar="STATE_DIR")
    top.add_argument("--store", help="only this store")
    top.add_argument(
        "--interval", type=float, default=2.0, help="seconds between refreshes (default 2)"
    )
    top.add_argument(
        "--count", type=non_negative, default=None, help="stop after this many refreshes"
    )
    top.add_argument(
        "--metrics-url",
        help="the service's Prometheus endpoint, e.g. http://127.0.0.1:9108/metrics",
    )
    top.add_argument("--json", action="store_true", help="one JSON document per refresh")
    top.set_defaults(func=top_command.cmd_top)

    dump = sub.add_parser(
        "dump",
        help="print batches and records of segment files, like kafka-dump-log (read-only)",
        description=(
            "Print the batches and records of .log files and the entries of .index/.timeindex "
            "files, line for line as Kafka's kafka-dump-log.sh --deep-iteration --print-data-log "
            "prints them. PATH is a partition directory (its .deleted/.cleaned/.swap leftovers "
            "are skipped) or a single segment file."
        ),
    )
    dump.add_argument("paths", type=Path, nargs="+", metavar="PATH")
    dump.add_argument(
        "--shallow", action="store_true", help="batch lines only (kafka-dump-log without options)"
    )
    dump.add_argument(
        "--no-data",
        action="store_true",
        help="record lines without key: and payload: (kafka-dump-log --deep-iteration)",
    )
    dump.add_argument("--print-data", action="store_true", help=argparse.SUPPRESS)  # the default
    dump.add_argument("--deep-iteration", action="store_true", help=argparse.SUPPRESS)
    _add_formats(dump, auto=AUTO_DUMP)
    dump.add_argument("--json", action="store_true", help="machine-readable output")
    dump.set_defaults(func=read_commands.cmd_dump)

    verify = sub.add_parser(
        "verify",
        help="check the CRC of every batch, indexes and checkpoints; exit 1 on corruption",
        description=(
            "Check every batch (framing, CRC-32C, offsets), every index and checkpoint file. "
            "Errors (data that is not what was written) exit 1; warnings (a torn tail, a stale "
            "active index: repaired at the next open, nothing acknowledged lost) do not, "
            "unless --strict. Read-only."
        ),
    )
    verify.add_argument(
        "paths", type=Path, nargs="+", metavar="PATH", help="state or partition directories"
    )
    verify.add_argument("--strict", action="store_true", help="warnings fail too")
    verify.add_argument("--json", action="store_true", help="machine-readable output")
    verify.set_defaults(func=read_commands.cmd_verify)

    compact = sub.add_parser(
        "compact",
        help="force a cleaning pass over the changelogs and print its stats",
        description=(
            "Run the log cleaner now over every changelog partition of a state directory (or one "
            "partition directory), whatever the dirty ratio. Takes the state directory's lock: "
            "stop the service first. The active segment is never cleaned; --roll closes it first. "
            "Uses each store's recorded changelog settings (its metadata file; Kafka's defaults "
            "without one) unless overridden."
        ),
    )
    compact.add_argument("path", type=Path, metavar="STATE_DIR|PARTITION_DIR")
    compact.add_argument("--store", help="only this store")
    compact.add_argument(
        "--roll", action="store_true", help="roll the active segment first so all of it is cleaned"
    )
    compact.add_argument(
        "--delete-retention-ms",
        type=non_negative,
        help="delete.retention.ms for this pass (default: the recorded one, else 86400000)",
    )
    compact.add_argument(
        "--min-compaction-lag-ms",
        type=non_negative,
        help="min.compaction.lag.ms for this pass (default: the recorded one, else 0)",
    )
    compact.add_argument("--json", action="store_true", help="machine-readable output")
    compact.set_defaults(func=store_commands.cmd_compact)

    restore = sub.add_parser(
        "restore",
        help="rebuild the RocksDB side of stores from their changelogs",
        description=(
            "Delete each store's RocksDB and replay its changelog from the log start offset "
            "(a full restore), whatever RocksDB held. Takes the state directory's lock: stop the "
            "service first."
        ),
    )
    restore.add_argument("state_dir", type=Path, metavar="STATE_DIR")
    restore.add_argument("--store", help="only this store")
    restore.add_argument("--json", action="store_true", help="machine-readable output")
    restore.set_defaults(func=store_commands.cmd_restore)

    get = sub.add_parser(
        "get",
        help="print one key's value (offline: takes the state directory's lock)",
        description="Print the value stored under KEY (exit 1 if there is none).",
    )
    get.add_argument("state_dir", type=Path, metavar="STATE_DIR")
    get.add_argument("store", metavar="STORE")
    get.add_argument("key", metavar="KEY")
    _add_formats(get)
    get.add_argument("--json", action="store_true", help="machine-readable output")
    get.set_defaults(func=store_commands.cmd_get)

    scan = sub.add_parser(
        "scan",
        help="print entries in key order (offline: takes the state directory's lock)",
        description=(
            "Print a store's entries in serialized-key order: all, those with a key prefix, or "
            "a half-open range [--from, --to)."
        ),
    )
    scan.add_argument("state_dir", type=Path, metavar="STATE_DIR")
    scan.add_argument("store", metavar="STORE")
    scan.add_argument("--prefix", help="keys starting with this")
    scan.add_argument("--from", dest="start", metavar="KEY", help="first key (inclusive)")
    scan.add_argument("--to", dest="end", metavar="KEY", help="last key (exclusive)")
    scan.add_argument("--reverse", action="store_true", help="descending key order")
    scan.add_argument("--limit", type=non_negative, help="at most this many entries")
    scan.add_argument("--keys-only", action="store_true", help="print keys only")
    _add_formats(scan)
    scan.add_argument("--json", action="store_true", help="machine-readable output")
    scan.set_defaults(func=store_commands.cmd_scan)

    from statestore.cli.repair import add_repair_parser  # noqa: PLC0415

    add_repair_parser(sub)

    metadata = sub.add_parser(
        "metadata",
        help="show each store's recorded settings; migrate them with --set ... --apply",
        description=(
            "Print what each store's metadata file records (partitions, serdes, restore mode, "
            "changelog settings; read-only). With --set FIELD=VALUE, --key-serde or "
            "--value-serde, print the changes a migration would make, and make them with "
            "--apply (takes the state directory's lock: stop the service first). "
            "See docs/operations.md, 'Migrating a store'."
        ),
    )
    metadata.add_argument("state_dir", type=Path, metavar="STATE_DIR")
    metadata.add_argument("--store", help="only this store (required to migrate)")
    metadata.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a new LogConfig value, e.g. segment_bytes=268435456 (repeatable)",
    )
    metadata.add_argument("--key-serde", metavar="ID", help="a new key serde identity")
    metadata.add_argument("--value-serde", metavar="ID", help="a new value serde identity")
    metadata.add_argument("--apply", action="store_true", help="record the changes")
    metadata.add_argument("--json", action="store_true", help="machine-readable output")
    metadata.set_defaults(func=metadata_commands.cmd_metadata)
    return parser


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    from changelog.errors import ChangelogError, LogLockedError  # noqa: PLC0415
    from statestore.errors import StateDirLockedError, StateStoreError  # noqa: PLC0415

    parser = build_parser()
    args = parser.parse_args(argv)
    stream = out if out is not None else sys.stdout
    func: Command = args.func
    try:
        from statestore.cli.remedy import refuse_pending_repair  # noqa: PLC0415

        refuse_pending_repair(args)  # a state directory between two states is never read
        return func(args, stream)
    except UsageError as exc:
        return _fail(str(exc), 2)
    except (LogLockedError, StateDirLockedError) as exc:
        holder = f" by {exc.holder}" if exc.holder else ""
        return _fail(
            f"{exc.path.parent} is locked{holder}: a service owns it; stop it first "
            "(inspect, dump, verify, top and metadata without --apply work while it runs)",
            1,
        )
    except (ChangelogError, StateStoreError) as exc:
        return _fail(str(exc), 1)
    except PermissionError as exc:
        return _fail(f"{exc.filename}: permission denied", 1)
    except BrokenPipeError:
        # The reader went away (statestore dump ... | head): not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except OSError as exc:
        return _fail(f"{exc.filename or ''}: {exc.strerror or exc}", 1)
