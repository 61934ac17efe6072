"""``statestore repair salvage``: keep every valid batch around damage, name what is lost.

The plan (:func:`changelog.repair.salvage.plan_salvage`) is printed in full:
each damaged byte range with the offsets it held and the keys it still yields
without its CRC, the valid batches kept, the data dropped because its
transaction's marker was lost, and every transaction the damage splits.  For
such a transaction the other partitions that took part are named from the
coordinator's log (:mod:`statestore.cli.participants`), with the two choices
the operator has: keep the survivors (what salvage does), or roll every store
back to before the transaction (the ``repair roll-back`` command is printed:
:mod:`statestore.cli.roll_back`, all or nothing under a repair journal).  Nothing changes without
``--apply``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from statestore.cli.participants import (
    CoordinatorLog,
    Transaction,
    consistent_cut,
    find_transaction,
    read_coordinator_log,
)

if TYPE_CHECKING:
    from changelog.repair.salvage import SalvagePlan, TransactionLoss

__all__ = ["cmd_salvage", "participants_doc", "transaction_participants"]

_KEYS_SHOWN = 8
"""Keys of an unreadable range listed in the text output (``--json`` lists them all)."""


def transaction_participants(
    coordinator: CoordinatorLog | None,
    topic: str,
    partition: int,
    first: int,
    end: int | None,
) -> Transaction | None:
    """The coordinator's record of the transaction starting in ``[first, end)`` here, if any."""
    if coordinator is None:
        return None
    return find_transaction(coordinator, topic, partition, first, end)


def participants_doc(
    state_dir: Path | None,
    found: Transaction | None,
    topic: str,
    partition: int,
    coordinator: CoordinatorLog | None = None,
) -> dict[str, Any]:
    """JSON of a transaction's participants (``known`` false when no record lists it) and,
    given the coordinator's log, the consistent roll-back (``roll_back``: every partition to
    truncate and where, ``None`` when it cannot be proved)."""
    if found is None:
        return {"known": False, "participants": [], "roll_back": None}
    cut = None if coordinator is None else consistent_cut(coordinator, found)
    roll_back = (
        None
        if cut is None
        else [
            {
                "topic": t,
                "partition": p,
                "offset": offset,
                "directory": None if state_dir is None else str(state_dir / f"{t}-{p}"),
            }
            for (t, p), offset in sorted(cut.items())
        ]
    )
    return {
        "roll_back": roll_back,
        "known": True,
        "exact": found.exact,
        "coordinator_record_offset": found.record_offset,
        "participants": [
            {
                "topic": part.topic,
                "partition": part.partition,
                "first_offset": part.first_offset,
                "directory": None
                if state_dir is None
                else str(state_dir / f"{part.topic}-{part.partition}"),
                "this_partition": part.topic == topic and part.partition == partition,
            }
            for part in found.parts
        ],
    }


def _loss_doc(
    plan: SalvagePlan,
    loss: TransactionLoss,
    coordinator: CoordinatorLog | None,
    state_dir: Path | None,
) -> dict[str, Any]:
    if loss.lost == "marker":
        assert loss.first_offset is not None
        found = transaction_participants(
            coordinator, plan.topic, plan.partition, loss.first_offset, None
        )
    else:
        first, end = loss.damaged_offsets
        found = transaction_participants(coordinator, plan.topic, plan.partition, first, end)
    return {
        "producer_id": loss.producer_id,
        "producer_epoch": loss.producer_epoch,
        "lost": loss.lost,
        "first_offset": loss.first_offset,
        "marker_offset": loss.marker_offset,
        "damaged_offsets": list(loss.damaged_offsets),
        "certain": loss.certain,
        **participants_doc(state_dir, found, plan.topic, plan.partition, coordinator),
    }


def _transactions(
    plan: SalvagePlan, coordinator: CoordinatorLog | None, state_dir: Path | None
) -> list[dict[str, Any]]:
    """The transactions the damage splits: those this partition shows (a marker without its
    data, data without its marker), then those only the coordinator's log can name (data and
    marker both in the unreadable bytes: a committed transaction whose part here starts in a
    lost range)."""
    out = [_loss_doc(plan, t, coordinator, state_dir) for t in plan.transactions]
    if coordinator is None:
        return out
    seen = {t.get("coordinator_record_offset") for t in out if t["known"]}
    for lost in plan.lost:
        end = lost.end_offset
        for found in coordinator.transactions:
            if found.record_offset in seen:
                continue
            for part in found.parts:
                if (part.topic, part.partition) != (plan.topic, plan.partition):
                    continue
                if part.first_offset < lost.first_offset or (
                    end is not None and part.first_offset >= end
                ):
                    continue
                seen.add(found.record_offset)
                out.append(
                    {
                        "producer_id": None,
                        "producer_epoch": None,
                        "lost": "all",
                        "first_offset": part.first_offset,
                        "marker_offset": None,
                        "damaged_offsets": [lost.first_offset, end],
                        "certain": True,
                        **participants_doc(
                            state_dir, found, plan.topic, plan.partition, coordinator
                        ),
                    }
                )
    return out


def _keys(keys: tuple[bytes | None, ...] | None) -> list[str] | None:
    if keys is None:
        return None
    return [("(null)" if k is None else k.decode("utf-8", "backslashreplace")) for k in keys]


def salvage_doc(
    plan: SalvagePlan, coordinator: CoordinatorLog | None, state_dir: Path | None
) -> dict[str, Any]:
    """The plan as a JSON document (offsets as fields)."""
    return {
        "directory": str(plan.directory),
        "log_end_offset_after": plan.log_end_offset_after,
        "torn_tail": plan.torn_tail,
        "kept_batches": plan.kept_batches,
        "stale_files": [str(path) for path in plan.stale_files],
        "rewrites": [
            {
                "path": str(r.segment.path),
                "size_bytes_before": r.segment.size_bytes,
                "size_bytes_after": r.new_size_bytes,
                "kept_batches": r.kept_batches,
                "placeholder_offsets": None if r.placeholder is None else list(r.placeholder),
            }
            for r in plan.rewrites
        ],
        "lost": [
            {
                "path": str(d.path),
                "position": d.position,
                "size_bytes": d.size_bytes,
                "reason": d.reason,
                "first_offset": d.first_offset,
                "end_offset": d.end_offset,
                "unverified_keys": _keys(d.unverified_keys),
            }
            for d in plan.lost
        ],
        "dropped": [
            {
                "path": str(b.path),
                "position": b.position,
                "base_offset": b.base_offset,
                "last_offset": b.last_offset,
                "producer_id": b.producer_id,
                "keys": _keys(b.keys),
            }
            for b in plan.dropped
        ],
        "transactions": _transactions(plan, coordinator, state_dir),
        "steps": plan.steps(),
    }


def _offsets(first: int, end: int | None) -> str:
    if end is None:
        return f"from {first} to the old log end (a torn tail: its offsets are unknown)"
    if end - first == 1:
        return f"offset {first}"
    if end == first:
        return "no offset (bytes between batches)"
    return f"offsets {first}..{end - 1}"


def _print(plan: SalvagePlan, doc: dict[str, Any], out: TextIO, state_dir: Path | None) -> None:
    out.write(f"salvage {plan.directory}\n\n")
    for path in plan.stale_files:
        out.write(f"left over: {path.name} (a segment replace that did not finish: deleted)\n")
    for lost in doc["lost"]:
        out.write(
            f"unreadable: {Path(lost['path']).name} bytes [{lost['position']},"
            f" {lost['position'] + lost['size_bytes']}): {lost['reason']}\n"
            f"  lost: {_offsets(lost['first_offset'], lost['end_offset'])}\n"
        )
        keys = lost["unverified_keys"]
        if keys:
            shown = ", ".join(keys[:_KEYS_SHOWN])
            more = (
                f", ... {len(keys) - _KEYS_SHOWN} more (--json)" if len(keys) > _KEYS_SHOWN else ""
            )
            out.write(f"  keys (read without the CRC, may be wrong): {shown}{more}\n")
        else:
            out.write("  keys: cannot be read\n")
    for dropped in doc["dropped"]:
        out.write(
            f"dropped: offsets {dropped['base_offset']}..{dropped['last_offset']} of"
            f" {Path(dropped['path']).name} (valid, but its transaction's marker was unreadable:"
            f" its outcome cannot be known here); keys: {', '.join(dropped['keys'])}\n"
        )
    for rewrite in plan.rewrites:
        extra = ""
        if rewrite.placeholder is not None:
            extra = (
                f", then an empty batch for offsets {rewrite.placeholder[0]}.."
                f"{rewrite.placeholder[1]} (the segment stays contiguous with the next)"
            )
        out.write(
            f"keeps: {rewrite.kept_batches} valid batches of {rewrite.segment.path.name}"
            f" ({rewrite.segment.size_bytes} -> {rewrite.new_size_bytes} bytes){extra}\n"
        )
    out.write(f"log end offset after: {plan.log_end_offset_after}\n")
    txns = doc["transactions"]
    out.write(f"transactions split by the damage: {len(txns)}\n")
    for txn in txns:
        if txn["lost"] == "data":
            what = (
                f"its data here lay in offsets {txn['damaged_offsets'][0]}.."
                f"{'?' if txn['damaged_offsets'][1] is None else txn['damaged_offsets'][1] - 1}"
                f" (unreadable); its COMMIT marker at offset {txn['marker_offset']} is kept"
            )
            if not txn["certain"]:
                what += " (those offsets were cleaned before: its data may have been compacted"
                what += " away, then nothing of it is lost)"
        elif txn["lost"] == "marker":
            what = (
                f"its data here from offset {txn['first_offset']} is dropped: its marker lay in"
                " the unreadable bytes"
            )
        else:
            what = (
                f"committed (the coordinator's log says so); its data here from offset"
                f" {txn['first_offset']} and its marker lay in the unreadable bytes"
            )
        who = (
            "a transaction"
            if txn["producer_id"] is None
            else f"producer {txn['producer_id']} epoch {txn['producer_epoch']}"
        )
        out.write(f"  {who}: {what}\n")
        if not txn["known"]:
            out.write(
                "    participants: unknown (the coordinator's log no longer lists this"
                " transaction); the other stores committed in the same transaction keep it\n"
            )
            continue
        exact = "" if txn["exact"] else " (or a superset: older records were compacted)"
        out.write(
            f"    participants (coordinator record at offset"
            f" {txn['coordinator_record_offset']}){exact}:\n"
        )
        others = []
        for part in txn["participants"]:
            here = " (this partition)" if part["this_partition"] else ""
            out.write(
                f"      {part['topic']}-{part['partition']} from offset"
                f" {part['first_offset']}{here}\n"
            )
            if not part["this_partition"]:
                others.append(part)
        if others:
            out.write(
                "    atomicity: the other partitions still hold it. Choose:\n"
                "      keep the survivors: nothing more to do\n"
            )
            cut = txn["roll_back"]
            if cut is None:
                out.write(
                    "      roll those stores back to before it: the coordinator's log cannot"
                    " prove which later transactions that would split; truncate each"
                    " participant at its first offset and follow what each plan names\n"
                )
                continue
            named: dict[str, Any] = next(
                (p for p in txn["participants"] if p["this_partition"]), others[0]
            )  # the transaction by its part here (else by another of its parts)
            where = ", ".join(f"{p['topic']}-{p['partition']} at {p['offset']}" for p in cut)
            out.write(
                "      roll back to before it, consistently (it and every later transaction"
                " a cut would split, removed whole from every partition, all or nothing:"
                f" {where}):\n"
                f"        statestore repair roll-back"
                f" {plan.directory if named['this_partition'] else named['directory']} --offset"
                f" {named['first_offset']}\n"
            )
    out.write("steps:\n")
    out.writelines(f"  {step}\n" for step in plan.steps())
    if state_dir is not None:
        store = plan.topic.rsplit("-changelog", 1)[0]
        out.write(
            f"then: the store's RocksDB may still hold what was lost: statestore repair"
            f" rebuild-rocksdb {state_dir} --store {store}\n"
        )


def cmd_salvage(args: argparse.Namespace, out: TextIO) -> int:
    """Rewrite damaged segments with their valid batches only (dry run unless ``--apply``)."""
    from changelog.repair.salvage import (  # noqa: PLC0415
        apply_salvage,
        complete_decided_replace,
        has_decided_replace,
        plan_salvage,
    )
    from statestore.cli import remedy  # noqa: PLC0415

    partition = remedy.partition_arg(args.partition)
    found_state_dir = remedy.state_dir_of(partition)
    state_dir = None if found_state_dir is None else partition.parent  # as the user gave it
    with remedy.partition_locks(partition, apply=args.apply, out=out):
        if args.apply and has_decided_replace(partition):
            out.write(
                f"{partition}: a decided segment replace (.swap files) is there, as a salvage"
                " killed after its decision leaves it; the loader completes it first\n"
            )
            complete_decided_replace(partition, config=remedy.recorded_log_config(partition)[0])
        plan = plan_salvage(partition)
        coordinator = None if state_dir is None else read_coordinator_log(state_dir)
        doc = salvage_doc(plan, coordinator, state_dir)
        if plan.nothing_to_do:
            text = f"salvage {partition}\n\nnothing to salvage: every batch is valid\n"
            return remedy.end_nothing_to_do(out, doc, json=args.json, text=text)
        if not args.json:
            _print(plan, doc, out, state_dir)
        if not args.apply:
            return remedy.end_dry_run(out, doc, json=args.json)
        log_end = apply_salvage(plan, config=remedy.recorded_log_config(partition)[0])
    text = f"the log now ends at offset {log_end}"
    return remedy.end_applied(
        out, partition, doc, json=args.json, text=text, log_end_offset=log_end
    )
