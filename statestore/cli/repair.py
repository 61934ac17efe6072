"""``statestore repair``: the operator's remedies, each a dry run unless ``--apply`` is given.

Every remedy first prints exactly what it will change (files, byte ranges,
offsets, the acknowledged records and keys it removes, the steps it will
run) and changes nothing without ``--apply``.  With ``--apply`` it refuses
while a service holds the state directory's (or the partition's) lock, runs
its steps through :mod:`changelog.fs.files` (each one fsynced; a crash at any
step leaves a directory the remedy run again finishes), and then re-verifies
the partition with ``statestore verify``'s check (the loader's read-only
plan, then every batch's CRC).  Exit status: 0 when the dry run was printed
or the remedy ran and verify says OK; 1 when the remedy refuses
(:class:`~changelog.errors.RepairRefusedError`, a lock held) or verify still
finds errors afterwards; 2 for a usage error.

Subcommands: ``salvage`` (:mod:`statestore.cli.salvage`), ``truncate``,
``drop-torn-tail`` (:mod:`changelog.repair.truncate`), ``rebuild-indexes``
(:mod:`changelog.repair.indexes`), ``rebuild-checkpoints``
(:mod:`statestore.cli.rebuild_checkpoints`), ``rebuild-rocksdb``
(:mod:`statestore.cli.rebuild_rocksdb`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from statestore.cli.errors import non_negative
from statestore.cli.output import VALUE_FORMATS, decode_for_display, format_table, write_table
from statestore.cli.remedy import (
    end_applied,
    end_dry_run,
    end_nothing_to_do,
    partition_arg,
    partition_locks,
    recorded_log_config,
    state_dir_of,
)

__all__ = [
    "add_repair_parser",
    "cmd_drop_torn_tail",
    "cmd_rebuild_indexes",
    "cmd_truncate",
    "truncation_doc",
]


# --------------------------------------------------------------------------- truncate, drop-torn-tail


def _key_text(key: bytes | None, fmt: str) -> str:
    if key is None:
        return "(null key)"
    try:
        shown = decode_for_display(key, fmt)
    except ValueError:
        shown = "0x" + key.hex()
    return shown if isinstance(shown, str) else repr(shown)


def truncation_doc(plan: Any, key_format: str) -> dict[str, Any]:
    """A truncation plan as a JSON document (offsets as fields; keys shown as ``key_format``)."""
    return {
        "directory": str(plan.directory),
        "requested_offset": plan.requested_offset,
        "log_end_offset_before": plan.log_end_offset_before,
        "log_end_offset_after": plan.log_end_offset_after,
        "cut": {
            "path": str(plan.cut_path),
            "position": plan.cut_position,
            "size_bytes": plan.cut_size_bytes,
        },
        "deleted_segments": [
            {"path": str(s.path), "size_bytes": s.size_bytes} for s in plan.deleted_segments
        ],
        "removed_bytes": plan.removed_bytes,
        "removed_batches": plan.removed_batches,
        "removed_records": plan.removed_records,
        "aborted_records": plan.aborted_records,
        "undecided_records": plan.undecided_records,
        "control_batches": plan.control_batches,
        "removed_offsets": None
        if plan.first_removed_offset is None
        else [plan.first_removed_offset, plan.last_removed_offset],
        "damage": [
            {
                "path": str(d.path),
                "position": d.position,
                "size_bytes": d.size_bytes,
                "reason": d.reason,
            }
            for d in plan.damage
        ],
        "keys": [
            {
                "key": _key_text(c.key, key_format),
                "before": c.before,
                "after": c.after,
                "effect": c.effect,
            }
            for c in plan.key_changes
        ],
        "transactions": _transactions_doc(plan),
        "steps": plan.steps(),
    }


def _transactions_doc(plan: Any) -> list[dict[str, Any]]:
    """The removed transactions with their participants (from the coordinator's log)."""
    from statestore.cli.participants import read_coordinator_log  # noqa: PLC0415
    from statestore.cli.salvage import participants_doc, transaction_participants  # noqa: PLC0415

    if not plan.transactions:
        return []
    state_dir = None if state_dir_of(plan.directory) is None else plan.directory.parent
    coordinator = None if state_dir is None else read_coordinator_log(state_dir)
    topic, _, number = plan.directory.resolve().name.rpartition("-")
    partition = int(number)
    out = []
    for txn in plan.transactions:
        found = transaction_participants(coordinator, topic, partition, txn.first_offset, None)
        out.append(
            {
                "producer_id": txn.producer_id,
                "producer_epoch": txn.producer_epoch,
                "first_offset": txn.first_offset,
                "marker_offset": txn.marker_offset,
                "committed": txn.marker_offset is not None,
                "records": txn.records,
                **participants_doc(state_dir, found, topic, partition, coordinator),
            }
        )
    return out


def _print_transactions(doc: dict[str, Any], out: TextIO) -> None:
    txns = doc["transactions"]
    if not txns:
        return
    committed = sum(1 for t in txns if t["committed"])
    out.write(
        f"transactions removed here: {len(txns)} ({committed} committed); each spans other"
        " partitions, which keep their part:\n"
    )
    for txn in txns:
        state = (
            f"committed (marker at {txn['marker_offset']})"
            if txn["committed"]
            else "undecided here (no marker)"
        )
        out.write(
            f"  producer {txn['producer_id']} epoch {txn['producer_epoch']}, data from offset"
            f" {txn['first_offset']}, {txn['records']} records, {state}\n"
        )
        if not txn["known"]:
            out.write("    participants: unknown (the coordinator's log no longer lists it)\n")
            continue
        for part in txn["participants"]:
            if part["this_partition"]:
                continue
            out.write(
                f"    also in {part['topic']}-{part['partition']} from offset"
                f" {part['first_offset']}\n"
            )
        if txn["roll_back"] is not None:
            out.write(
                "    to roll every store back to before it instead, all or nothing: statestore"
                f" repair roll-back {doc['directory']} --offset {txn['first_offset']}\n"
            )


def _print_truncation(plan: Any, args: argparse.Namespace, out: TextIO, title: str) -> None:
    out.write(f"{title}\n\n")
    inside = ""
    if plan.log_end_offset_after < plan.requested_offset and plan.removed_batches:
        inside = (
            f" (offset {plan.requested_offset} lies inside or after the batch starting at"
            f" {plan.first_removed_offset}: a batch is never split)"
        )
    out.write(
        f"log end offset {plan.log_end_offset_before} -> {plan.log_end_offset_after}{inside}\n"
    )
    parts = []
    if plan.cut_position < plan.cut_size_bytes:
        parts.append(f"{plan.cut_path.name} bytes [{plan.cut_position}, {plan.cut_size_bytes})")
    parts.extend(f"{s.path.name} (whole, {s.size_bytes} bytes)" for s in plan.deleted_segments)
    out.write(f"removes {plan.removed_bytes} bytes: {', '.join(parts)}\n")
    out.write(
        f"removes offsets [{plan.log_end_offset_after}, {plan.log_end_offset_before}):"
        f" {plan.removed_batches} readable batches"
        + (
            f" ({plan.first_removed_offset}..{plan.last_removed_offset})"
            if plan.first_removed_offset is not None
            else ""
        )
        + f", {plan.removed_records} acknowledged records ({plan.aborted_records} aborted,"
        f" {plan.undecided_records} undecided, {plan.control_batches} markers)\n"
    )
    for damage in plan.damage:
        out.write(
            f"removes unreadable bytes [{damage.position}, {damage.position + damage.size_bytes})"
            f" of {damage.path.name}: {damage.reason} (their records cannot be listed)\n"
        )
    changes = plan.key_changes
    unknown = (
        " (plus the keys of the unreadable bytes, which cannot be known)" if plan.damage else ""
    )
    out.write(f"keys affected: {len(changes)}{unknown}\n")
    if changes:
        shown = changes if args.all_keys else changes[: args.keys]
        rows = [[_key_text(c.key, args.key_format), c.effect] for c in shown]
        text = format_table(["key", "becomes"], rows)
        out.write("".join(f"  {line}\n" for line in text.splitlines()))
        if len(shown) < len(changes):
            out.write(f"  ... {len(changes) - len(shown)} more (--all-keys, or --json)\n")
    _print_transactions(truncation_doc(plan, args.key_format), out)
    out.write("steps:\n")
    out.writelines(f"  {step}\n" for step in _steps(plan))


def _journal(plan: Any) -> Any:
    """The journal a truncation of a state directory's partition runs under (else ``None``)."""
    from changelog.repair.journal import JournalCut, RepairJournal  # noqa: PLC0415

    if state_dir_of(plan.directory) is None:
        return None
    return RepairJournal(
        directory=plan.directory.parent,
        remedy="truncate",
        cuts=(JournalCut(plan.directory.name, plan.log_end_offset_after),),
    )


def _steps(plan: Any) -> list[str]:
    """The plan's steps: K1-K7, inside J1-J4 for a partition of a state directory."""
    from statestore.cli.roll_back import journal_steps  # noqa: PLC0415

    journal = _journal(plan)
    return plan.steps() if journal is None else journal_steps(journal, [plan])


def _run_truncation(plan: Any, args: argparse.Namespace, out: TextIO, title: str) -> int:
    from changelog.repair.journal import complete_journal, write_journal  # noqa: PLC0415
    from changelog.repair.truncate import apply_truncation  # noqa: PLC0415

    doc = truncation_doc(plan, args.key_format)
    doc["steps"] = _steps(plan)
    if plan.nothing_to_do:
        text = f"{title}\n\nnothing to remove: the log ends at {plan.log_end_offset_after}\n"
        return end_nothing_to_do(out, doc, json=args.json, text=text)
    if not args.json:
        _print_truncation(plan, args, out, title)
    if not args.apply:
        return end_dry_run(out, doc, json=args.json)
    split = [t for t in doc["transactions"] if t["committed"]]
    if split and not args.split_transactions:
        from changelog.errors import RepairRefusedError  # noqa: PLC0415

        raise RepairRefusedError(
            plan.directory,
            f"the truncation removes this partition's part of {len(split)} committed"
            f" transaction(s) (the first from offset {split[0]['first_offset']}), whose other"
            " partitions keep theirs: cross-store atomicity would break. Truncate the other"
            " partitions too (the plan names them), or pass --split-transactions to accept it",
            offset=split[0]["first_offset"],
        )
    config = recorded_log_config(plan.directory)[0]
    journal = _journal(plan)
    if journal is not None:
        from statestore.cli.participants import (  # noqa: PLC0415
            read_coordinator_log,
            refuse_waiting_markers,
        )

        topic, _, number = plan.directory.name.rpartition("-")
        refuse_waiting_markers(
            read_coordinator_log(journal.directory),
            {(topic, int(number)): plan.log_end_offset_after},
        )
    if journal is None:
        log_end = apply_truncation(plan, config=config)  # K1-K7
    else:
        write_journal(journal)  # J1
        ends = complete_journal(journal, config_for=lambda _p: config)  # J2-J4
        log_end = ends[plan.directory.name]
    text = f"the log now ends at offset {log_end}"
    return end_applied(out, plan.directory, doc, json=args.json, text=text, log_end_offset=log_end)


def _complete_pending(partition: Path, args: argparse.Namespace, out: TextIO) -> int | None:
    """A journal an interrupted run left in the partition's state directory: shown, or
    completed with ``--apply`` (the exit status); ``None`` when there is none."""
    from statestore.cli.roll_back import complete_pending  # noqa: PLC0415

    if state_dir_of(partition) is None:
        return None
    return complete_pending(partition.parent, out, apply=args.apply, json=args.json)


def cmd_truncate(args: argparse.Namespace, out: TextIO) -> int:
    """Remove every batch at and above ``--offset`` (dry run unless ``--apply``)."""
    from changelog.repair.truncate import plan_truncation  # noqa: PLC0415

    partition = partition_arg(args.partition)
    pending = _complete_pending(partition, args, out)
    if pending is not None:
        return pending
    with partition_locks(partition, apply=args.apply, out=out):
        plan = plan_truncation(partition, args.offset)
        title = f"truncate {partition} at offset {args.offset}"
        return _run_truncation(plan, args, out, title)


def cmd_drop_torn_tail(args: argparse.Namespace, out: TextIO) -> int:
    """Cut the last segment where its valid batches end (dry run unless ``--apply``)."""
    from changelog.repair.truncate import plan_torn_tail_drop  # noqa: PLC0415

    partition = partition_arg(args.partition)
    pending = _complete_pending(partition, args, out)
    if pending is not None:
        return pending
    with partition_locks(partition, apply=args.apply, out=out):
        plan = plan_torn_tail_drop(partition)
        title = f"drop the torn tail of {partition}"
        if plan.had_clean_shutdown and not args.json:
            rp = plan.recovery_point_before
            if rp is not None and rp > plan.log_end_offset_after:
                title += (
                    f"\nthe clean close checkpointed log end offset {rp}: offsets"
                    f" [{plan.log_end_offset_after}, {rp}) were acknowledged and are lost"
                )
            else:
                title += (
                    "\nthe clean close checkpointed log end offset"
                    f" {rp}: the torn bytes lie after it (nothing acknowledged is lost)"
                )
        return _run_truncation(plan, args, out, title)


# --------------------------------------------------------------------------- rebuild-indexes


def cmd_rebuild_indexes(args: argparse.Namespace, out: TextIO) -> int:
    """Rebuild every segment's ``.index``, ``.timeindex`` and ``.txnindex`` from its ``.log``."""
    import attrs  # noqa: PLC0415

    from changelog.repair.indexes import apply_index_rebuild, plan_index_rebuild  # noqa: PLC0415

    partition = partition_arg(args.partition)
    config, settings_from = recorded_log_config(partition)
    if args.index_interval_bytes is not None:
        config = attrs.evolve(config, index_interval_bytes=args.index_interval_bytes)
        settings_from = "--index-interval-bytes"
    with partition_locks(partition, apply=args.apply, out=out):
        plan = plan_index_rebuild(partition, config=config)
        files_doc = [
            {
                "path": str(f.path),
                "exists": f.exists,
                "entries_before": f.entries_before,
                "entries_after": f.entries_after,
                "size_before_bytes": f.size_before_bytes,
                "size_after_bytes": f.size_after_bytes,
                "first_difference": f.first_difference,
                "changes": f.changes,
            }
            for f in plan.files
        ]
        doc: dict[str, Any] = {
            "directory": str(partition),
            "index_interval_bytes": config.index_interval_bytes,
            "index_interval_bytes_from": settings_from,
            "files": files_doc,
            "steps": plan.steps(),
        }
        if not args.json:
            out.write(f"rebuild the indexes of {partition} from its .log files\n")
            out.write(f"index.interval.bytes {config.index_interval_bytes} ({settings_from})\n\n")
            rows = [
                [
                    f.path.name,
                    "missing" if not f.exists else f.entries_before,
                    f.entries_after,
                    "unchanged"
                    if not f.changes
                    else ("created" if not f.exists else f"differs from byte {f.first_difference}"),
                ]
                for f in plan.files
            ]
            write_table(
                out,
                ["file", "entries now", "entries rebuilt", "result"],
                rows,
                right=[False, True, True, False],
            )
            changed = sum(1 for f in plan.files if f.changes)
            out.write(f"\n{changed} of {len(plan.files)} index files change\nsteps:\n")
            out.writelines(f"  {step}\n" for step in plan.steps())
        if not args.apply:
            return end_dry_run(out, doc, json=args.json)
        apply_index_rebuild(plan, config=config)
    text = "every index rebuilt from its .log"
    return end_applied(out, partition, doc, json=args.json, text=text)


# --------------------------------------------------------------------------- the parser


def _cmd_rebuild_checkpoints(args: argparse.Namespace, out: TextIO) -> int:
    from statestore.cli.rebuild_checkpoints import cmd_rebuild_checkpoints  # noqa: PLC0415

    return cmd_rebuild_checkpoints(args, out)


def _cmd_salvage(args: argparse.Namespace, out: TextIO) -> int:
    from statestore.cli.salvage import cmd_salvage  # noqa: PLC0415

    return cmd_salvage(args, out)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--apply", action="store_true", help="do it (without: print the plan, change nothing)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _split_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--split-transactions",
        action="store_true",
        help=(
            "apply even when committed cross-partition transactions lose their part here "
            "(without it --apply refuses; the plan names the other partitions)"
        ),
    )


def _key_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--key-format",
        choices=VALUE_FORMATS,
        default="str",
        help="how affected keys are shown (default: str)",
    )
    parser.add_argument(
        "--keys", type=non_negative, default=20, help="list at most this many keys (default 20)"
    )
    parser.add_argument("--all-keys", action="store_true", help="list every affected key")


def add_repair_parser(sub: Any) -> None:
    """Add ``repair`` and its subcommands to the top-level subparsers ``sub``."""
    from statestore.cli import rebuild_rocksdb, roll_back  # noqa: PLC0415

    repair = sub.add_parser(
        "repair",
        help=(
            "operator remedies: salvage, truncate, roll-back, complete, drop-torn-tail,"
            " rebuild-indexes, rebuild-checkpoints, rebuild-rocksdb"
        ),
        description=(
            "Remedies for a partition or store that the loader refuses or that reads wrong. "
            "Each prints what it will change and changes nothing without --apply; --apply "
            "refuses while a service holds the lock, and re-verifies afterwards. See "
            "docs/recovery.md for which error calls for which remedy."
        ),
    )
    remedies = repair.add_subparsers(dest="remedy", metavar="REMEDY", required=True)

    truncate = remedies.add_parser(
        "truncate",
        help="remove every batch at and above an offset",
        description=(
            "Remove every batch holding an offset >= --offset (a batch is never split), "
            "listing the acknowledged records and what each affected key becomes."
        ),
    )
    truncate.add_argument("partition", type=Path, metavar="PARTITION_DIR")
    truncate.add_argument("--offset", type=non_negative, required=True, help="the new log end")
    _split_option(truncate)
    _key_options(truncate)
    _common(truncate)
    truncate.set_defaults(func=cmd_truncate)

    torn = remedies.add_parser(
        "drop-torn-tail",
        help="cut a damaged tail of the last segment that the loader refuses",
        description=(
            "Cut the last segment where its valid batches end: for a torn tail after a clean "
            "shutdown (the loader refuses it, since the clean close promised a complete log), "
            "or a damaged last batch not shaped like an interrupted write. Refuses when a "
            "valid batch follows the damage (use truncate)."
        ),
    )
    torn.add_argument("partition", type=Path, metavar="PARTITION_DIR")
    _key_options(torn)
    _common(torn)
    _split_option(torn)
    torn.set_defaults(func=cmd_drop_torn_tail)

    indexes = remedies.add_parser(
        "rebuild-indexes",
        help="rebuild .index, .timeindex and .txnindex of every segment from its .log",
        description=(
            "Rebuild every segment's offset, time and transaction indexes from its .log "
            "(every batch CRC-checked first; a damaged .log is refused: truncate first)."
        ),
    )
    indexes.add_argument("partition", type=Path, metavar="PARTITION_DIR")
    indexes.add_argument(
        "--index-interval-bytes",
        type=non_negative,
        default=None,
        help=(
            "index.interval.bytes to rebuild with (default: the one the store recorded in "
            "its metadata file, else 4096)"
        ),
    )
    _common(indexes)
    indexes.set_defaults(func=cmd_rebuild_indexes)

    salvage = remedies.add_parser(
        "salvage",
        help="rewrite damaged segments keeping every valid batch; name what is lost",
        description=(
            "Resynchronize on the next batch whose header and CRC check out and keep every "
            "valid batch after damage (offsets unchanged). Names every unreadable byte range "
            "with its offsets and the keys it still yields, and every transaction the damage "
            "splits with the partitions that took part (from the coordinator's log)."
        ),
    )
    salvage.add_argument("partition", type=Path, metavar="PARTITION_DIR")
    _common(salvage)
    salvage.set_defaults(func=_cmd_salvage)

    checkpoints = remedies.add_parser(
        "rebuild-checkpoints",
        help="rewrite damaged or impossible checkpoint files from the segments",
        description=(
            "Rewrite every checkpoint file the loader would refuse (unreadable, truncated, "
            "or impossible for the segments beside it) with a value derived from the "
            "segments; no segment is changed."
        ),
    )
    checkpoints.add_argument("partition", type=Path, metavar="PARTITION_DIR")
    _common(checkpoints)
    checkpoints.set_defaults(func=_cmd_rebuild_checkpoints)

    rebuild_rocksdb.add_parser(remedies, _common)
    roll_back.add_parsers(remedies, _common)
