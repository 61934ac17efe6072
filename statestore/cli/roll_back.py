"""``statestore repair roll-back`` and ``repair complete``: journaled, all-or-nothing truncations.

``roll-back PARTITION_DIR --offset N`` takes the committed transaction whose data
in ``PARTITION_DIR`` starts at offset ``N`` (as ``repair salvage`` and ``repair
truncate`` name it), finds its participants in the state directory's
coordinator log (:mod:`statestore.cli.participants`), widens the cut to every
later transaction such a cut would split (:func:`~statestore.cli.participants.consistent_cut`),
and truncates every partition of the cut in one journaled change
(:mod:`changelog.repair.journal`, steps J1-J4), deleting the RocksDB of every
partition it cuts so that the next open restores it from the changelog.
Before anything changes, every partition's truncation is planned, and the plan
is cross-checked: each committed transaction a truncation removes must be one
the coordinator's log names, with every participant cut below it; otherwise it
refuses (its other partitions could not be proved whole).

``complete STATE_DIR`` completes the journal an interrupted ``truncate``,
``drop-torn-tail`` or ``roll-back`` left (the same J2-J4, idempotent).

Thread-safety: plain functions; the state directory's lock is held while the
journal is written and completed.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from statestore.cli.errors import UsageError, non_negative
from statestore.cli.output import write_json, write_table
from statestore.cli.remedy import (
    DRY_RUN,
    partition_arg,
    partition_locks,
    recorded_log_config,
    state_dir_of,
)
from statestore.cli.reverify import reverify

if TYPE_CHECKING:
    from changelog.repair.journal import RepairJournal
    from changelog.repair.truncate import TruncationPlan

__all__ = [
    "add_parsers",
    "cmd_complete",
    "cmd_roll_back",
    "complete_pending",
    "journal_steps",
    "run_journal",
]


def journal_steps(journal: RepairJournal, plans: list[TruncationPlan]) -> list[str]:
    """J1-J4 with each partition's K-steps (its truncation plan) below its J2 line."""
    steps = journal.steps()
    by_name = {plan.directory.name: plan for plan in plans}
    out = []
    for line in steps:
        out.append(line)
        if line.startswith("J2 "):
            name = line.split()[2]
            plan = by_name.get(name)
            if plan is not None:
                out.extend(f"  {step}" for step in plan.steps())
    return out


def run_journal(journal: RepairJournal, out: TextIO) -> tuple[bool, list[dict[str, Any]]]:
    """J2-J4 of a written journal, then ``verify`` of each partition it cut (printed to
    ``out``); ``(every partition verifies, [{partition, log_end_offset, verify}])``."""
    from changelog.repair.journal import complete_journal  # noqa: PLC0415

    ends = complete_journal(journal, config_for=lambda partition: recorded_log_config(partition)[0])
    ok, results = True, []
    for name, end in ends.items():
        out.write(f"{name}: the log now ends at offset {end}\n")
        good, doc = reverify(journal.directory / name, out)
        ok = ok and good
        results.append({"partition": name, "log_end_offset": end, "verify": doc})
    return ok, results


def complete_pending(state_dir: Path, out: TextIO, *, apply: bool, json: bool) -> int | None:
    """Show (dry run) or complete (``apply``) the journal of ``state_dir``; ``None`` when
    there is none, else the exit status.  The command that found it does nothing else:
    run it again once the journal is complete."""
    from changelog.fs.lock import DirectoryLock  # noqa: PLC0415
    from changelog.repair.journal import read_journal  # noqa: PLC0415

    journal = read_journal(state_dir)
    if journal is None:
        return None
    pending = journal.steps()[1:]
    doc: dict[str, Any] = {
        "journal": str(journal.path),
        "remedy": journal.remedy,
        "cuts": [
            {"partition": c.partition, "log_end_offset": c.log_end_offset} for c in journal.cuts
        ],
        "delete_directories": list(journal.delete_directories),
        "steps": pending,
    }
    text = out if not json else io.StringIO()
    text.write(
        f"an interrupted {journal.remedy} left its journal {journal.path}: the state directory"
        " is refused until it is complete. --apply completes it (and does nothing else; run"
        " the command again afterwards):\nsteps:\n"
    )
    text.writelines(f"  {step}\n" for step in pending)
    if not apply:
        if json:
            write_json(out, {"pending_journal": doc, "applied": False})
        else:
            out.write(f"\n{DRY_RUN}\n")
        return 0
    with DirectoryLock(state_dir):
        text.write("\n")
        ok, results = run_journal(journal, text)
    text.write(f"applied: the interrupted {journal.remedy} is complete\n")
    if json:
        write_json(out, {"pending_journal": doc, "applied": True, "partitions": results})
    return 0 if ok else 1


# --------------------------------------------------------------------------- roll-back


def _check_covered(
    plans: list[TruncationPlan], cut: dict[tuple[str, int], int], coordinator: Any
) -> None:
    """Every committed transaction a truncation removes is one the coordinator's log names,
    with every participant of it cut at or below its first offset there."""
    from changelog.errors import RepairRefusedError  # noqa: PLC0415
    from statestore.cli.participants import find_transaction  # noqa: PLC0415

    for plan in plans:
        topic, _, number = plan.directory.name.rpartition("-")
        for txn in plan.transactions:
            if txn.marker_offset is None:
                continue  # undecided here: never acknowledged, nothing to keep whole
            found = find_transaction(coordinator, topic, int(number), txn.first_offset, None)
            if found is None:
                raise RepairRefusedError(
                    plan.directory,
                    f"the roll-back removes the committed transaction whose data here starts at"
                    f" offset {txn.first_offset}, which the coordinator's log no longer lists:"
                    " its other partitions cannot be named, so it cannot be removed whole",
                    offset=txn.first_offset,
                )
            for part in found.parts:
                key = (part.topic, part.partition)
                if key not in cut or cut[key] > part.first_offset:
                    raise RepairRefusedError(
                        plan.directory,
                        f"the roll-back removes the transaction whose data here starts at offset"
                        f" {txn.first_offset} but not its part in {part.topic}-{part.partition}"
                        f" from offset {part.first_offset}: it would be split",
                        offset=txn.first_offset,
                    )


def _cut_doc(plan: TruncationPlan) -> dict[str, Any]:
    """One partition of the cut as JSON (``repair truncate --json`` on it lists its keys)."""
    return {
        "directory": str(plan.directory),
        "log_end_offset_before": plan.log_end_offset_before,
        "log_end_offset_after": plan.log_end_offset_after,
        "removed_bytes": plan.removed_bytes,
        "removed_batches": plan.removed_batches,
        "removed_records": plan.removed_records,
        "transactions": [
            {"first_offset": t.first_offset, "marker_offset": t.marker_offset}
            for t in plan.transactions
        ],
        "keys_affected": len(plan.key_changes),
        "steps": plan.steps(),
    }


def _print_roll_back(
    *,
    partition: Path,
    offset: int,
    found: Any,
    plans: list[TruncationPlan],
    steps: list[str],
    out: TextIO,
) -> None:
    out.write(
        f"roll back {partition} to before the transaction whose data there starts at offset"
        f" {offset}\n"
    )
    parts = ", ".join(f"{p.topic}-{p.partition} from {p.first_offset}" for p in found.parts)
    out.write(
        f"the transaction (coordinator record at offset {found.record_offset}): {parts}\n"
        "the cut removes it and every later transaction such a cut would split, whole,"
        " from every partition, all or nothing:\n\n"
    )
    rows = [
        [
            plan.directory.name,
            plan.log_end_offset_before,
            plan.log_end_offset_after,
            plan.removed_records,
            sum(1 for t in plan.transactions if t.marker_offset is not None),
            len(plan.key_changes),
        ]
        for plan in plans
    ]
    write_table(
        out,
        ["partition", "log end", "new log end", "records removed", "transactions", "keys"],
        rows,
        right=[False, True, True, True, True, True],
    )
    out.write("steps:\n")
    out.writelines(f"  {step}\n" for step in steps)


def cmd_roll_back(args: argparse.Namespace, out: TextIO) -> int:
    """Roll every participant back to before a transaction, all or nothing (dry run unless
    ``--apply``)."""
    from changelog.errors import RepairRefusedError  # noqa: PLC0415
    from changelog.repair.journal import JournalCut, RepairJournal, write_journal  # noqa: PLC0415
    from changelog.repair.truncate import plan_truncation  # noqa: PLC0415
    from statestore.cli.participants import (  # noqa: PLC0415
        COORDINATOR_DIR,
        consistent_cut,
        find_transaction,
        read_coordinator_log,
        refuse_waiting_markers,
    )
    from statestore.stores.spec import rocksdb_dir  # noqa: PLC0415

    partition = partition_arg(args.partition)
    if state_dir_of(partition) is None:
        raise UsageError(
            f"{partition}: not a changelog partition of a state directory (roll-back reads the"
            " participants from the state directory's coordinator log)"
        )
    state_dir = partition.parent
    done = complete_pending(state_dir, out, apply=args.apply, json=args.json)
    if done is not None:
        return done
    with partition_locks(partition, apply=args.apply, out=out):
        coordinator = read_coordinator_log(state_dir)
        if coordinator is None:
            raise RepairRefusedError(
                state_dir / COORDINATOR_DIR,
                "no coordinator log: the participants of a transaction cannot be named",
            )
        topic, _, number = partition.resolve().name.rpartition("-")
        found = find_transaction(coordinator, topic, int(number), args.offset, None)
        if found is None:
            raise RepairRefusedError(
                partition,
                f"the coordinator's log lists no committed transaction whose data here starts at"
                f" offset {args.offset} (the offsets salvage and truncate print as 'from offset"
                " N'; a transaction compacted out of the coordinator's log cannot be rolled"
                " back consistently)",
                offset=args.offset,
            )
        cut = consistent_cut(coordinator, found)
        if cut is None:
            raise RepairRefusedError(
                coordinator.directory,
                "the coordinator's log cannot prove which later transactions the roll-back"
                " would split (its older records were compacted away); nothing was changed",
                offset=args.offset,
            )
        plans = []
        for (t, p), offset in sorted(cut.items()):
            directory = state_dir / f"{t}-{p}"
            if not directory.is_dir():
                raise RepairRefusedError(
                    directory, "a participant's partition directory is missing"
                )
            plans.append(plan_truncation(directory, offset))
        _check_covered(plans, cut, coordinator)
        refuse_waiting_markers(coordinator, cut)
        changed = [plan for plan in plans if not plan.nothing_to_do]
        rocksdb = []
        for plan in changed:
            store, _, number_text = plan.directory.name.rpartition("-changelog-")
            target = rocksdb_dir(state_dir, store, int(number_text))
            if target.exists():
                rocksdb.append(target.name)
        journal = RepairJournal(
            directory=state_dir,
            remedy="roll-back",
            cuts=tuple(
                JournalCut(plan.directory.name, plan.log_end_offset_after) for plan in changed
            ),
            delete_directories=tuple(rocksdb),
        )
        steps = journal_steps(journal, changed)
        doc: dict[str, Any] = {
            "partition": str(partition),
            "offset": args.offset,
            "transaction": {
                "coordinator_record_offset": found.record_offset,
                "participants": [
                    {"topic": x.topic, "partition": x.partition, "first_offset": x.first_offset}
                    for x in found.parts
                ],
            },
            "cut": [_cut_doc(plan) for plan in plans],
            "journal": str(journal.path),
            "delete_directories": list(rocksdb),
            "steps": steps,
        }
        if not changed:
            if args.json:
                write_json(out, {"plan": doc, "applied": False, "nothing_to_do": True})
            else:
                out.write(
                    f"roll back {partition} at offset {args.offset}\n\nnothing to remove: every"
                    " partition of the cut already ends there\n"
                )
            return 0
        text: TextIO = out if not args.json else io.StringIO()
        _print_roll_back(
            partition=partition, offset=args.offset, found=found, plans=plans, steps=steps, out=text
        )
        if not args.apply:
            if args.json:
                write_json(out, {"plan": doc, "applied": False})
            else:
                out.write(f"\n{DRY_RUN}\n")
            return 0
        write_journal(journal)  # J1
        text.write("\n")
        ok, results = run_journal(journal, text)  # J2-J4
    text.write("applied: every partition of the cut was rolled back\n")
    if args.json:
        write_json(out, {"plan": doc, "applied": True, "partitions": results})
    return 0 if ok else 1


def cmd_complete(args: argparse.Namespace, out: TextIO) -> int:
    """Complete the journal an interrupted journaled remedy left (dry run unless ``--apply``)."""
    state_dir: Path = args.state_dir
    if not state_dir.is_dir():
        raise UsageError(f"{state_dir}: no such directory")
    done = complete_pending(state_dir, out, apply=args.apply, json=args.json)
    if done is not None:
        return done
    if args.json:
        write_json(out, {"pending_journal": None, "applied": False})
    else:
        out.write(f"{state_dir}: no repair journal: nothing to complete\n")
    return 0


def add_parsers(remedies: Any, common: Any) -> None:
    """Add ``roll-back`` and ``complete`` to the ``repair`` subparsers."""
    roll_back = remedies.add_parser(
        "roll-back",
        help="roll every participant back to before a transaction, all or nothing",
        description=(
            "Truncate every partition of the committed transaction whose data in PARTITION_DIR "
            "starts at --offset, and of every later transaction such a cut would split, to "
            "before it (participants from the coordinator's log), in one journaled change: "
            "killed halfway, every open of the state directory refuses until the remedy run "
            "again (or 'repair complete') finishes it. Deletes the RocksDB of every partition "
            "it cuts (the next open restores it from the changelog)."
        ),
    )
    roll_back.add_argument("partition", type=Path, metavar="PARTITION_DIR")
    roll_back.add_argument(
        "--offset",
        type=non_negative,
        required=True,
        help="the first offset of the transaction's data in PARTITION_DIR",
    )
    common(roll_back)
    roll_back.set_defaults(func=cmd_roll_back)

    complete = remedies.add_parser(
        "complete",
        help="complete the journal an interrupted truncate or roll-back left",
        description=(
            "Show (without --apply) or finish the journaled repair that a truncate, "
            "drop-torn-tail or roll-back killed halfway left in STATE_DIR; every open of the "
            "directory refuses until it is complete."
        ),
    )
    complete.add_argument("state_dir", type=Path, metavar="STATE_DIR")
    common(complete)
    complete.set_defaults(func=cmd_complete)
