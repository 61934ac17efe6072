"""``statestore repair rebuild-checkpoints``: rewrite damaged or impossible checkpoint files.

Prints each checkpoint that the loader would refuse (what it holds, why it is
wrong, what it becomes: :mod:`changelog.repair.checkpoints`) and changes
nothing without ``--apply``; then re-verifies the partition.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from statestore.cli.output import write_table

__all__ = ["cmd_rebuild_checkpoints"]


def cmd_rebuild_checkpoints(args: argparse.Namespace, out: TextIO) -> int:
    """Rewrite the partition's damaged checkpoints (dry run unless ``--apply``)."""
    from changelog.repair.checkpoints import (  # noqa: PLC0415
        apply_checkpoint_rebuild,
        plan_checkpoint_rebuild,
    )
    from statestore.cli import remedy  # noqa: PLC0415

    partition = remedy.partition_arg(args.partition)
    with remedy.partition_locks(partition, apply=args.apply, out=out):
        plan = plan_checkpoint_rebuild(partition)
        doc: dict[str, Any] = {
            "directory": str(partition),
            "log_end_offset": plan.log_end_offset,
            "first_base_offset": plan.first_base_offset,
            "holes": [list(hole) for hole in plan.holes],
            "changes": [
                {"file": c.name, "before": c.before, "after": c.after, "problem": c.problem}
                for c in plan.changes
            ],
            "deletes_clean_shutdown_marker": plan.deletes_clean_shutdown_marker,
            "steps": plan.steps(),
        }
        if plan.nothing_to_do:
            text = (
                f"rebuild the checkpoints of {partition}\n\nnothing to do: every checkpoint"
                " is readable and plausible\n"
            )
            return remedy.end_nothing_to_do(out, doc, json=args.json, text=text)
        if not args.json:
            out.write(f"rebuild the checkpoints of {partition}\n\n")
            rows = [
                [
                    c.name,
                    "-" if c.before is None else c.before,
                    "delete" if c.after is None else c.after,
                    c.problem,
                ]
                for c in plan.changes
            ]
            write_table(out, ["file", "holds", "becomes", "why"], rows)
            for first, end in plan.holes:
                out.write(
                    f"hole between segments: offsets {first}..{end - 1} are in no segment"
                    " (accepted as compaction's from now on)\n"
                )
            out.write("no segment is changed; nothing acknowledged is removed\nsteps:\n")
            out.writelines(f"  {step}\n" for step in plan.steps())
        if not args.apply:
            return remedy.end_dry_run(out, doc, json=args.json)
        log_end = apply_checkpoint_rebuild(plan, config=remedy.recorded_log_config(partition)[0])
    text = f"the log ends at offset {log_end}"
    return remedy.end_applied(
        out, partition, doc, json=args.json, text=text, log_end_offset=log_end
    )
