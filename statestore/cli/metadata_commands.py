"""``statestore metadata``: show a store's recorded settings, and migrate them explicitly.

Without ``--set``/``--key-serde``/``--value-serde`` it prints what each store's
metadata file records (read-only, no lock).  With them it prints the changes
it would make and makes them only with ``--apply``, through
:func:`statestore.migrate_store` (which takes the state directory's lock:
stop the service first).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

import attrs

from statestore.cli.errors import UsageError
from statestore.cli.output import format_table, write_json, write_table
from statestore.cli.statedir import find_stores, select_stores

__all__ = ["cmd_metadata"]


def _parse_setting(text: str, fields: dict[str, Any]) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or name not in fields:
        known = ", ".join(sorted(fields))
        raise UsageError(f"--set {text!r}: expected FIELD=VALUE with a LogConfig field ({known})")
    current = fields[name]
    if isinstance(current, str):
        return name, raw
    convert = float if isinstance(current, float) else int
    try:
        return name, convert(raw)
    except ValueError:
        raise UsageError(f"--set {text!r}: {raw!r} is not a {convert.__name__}") from None


def _doc(meta: Any) -> dict[str, Any]:
    return {
        "store": meta.store,
        "partitions": meta.partitions,
        "key_serde": meta.key_serde,
        "value_serde": meta.value_serde,
        "restore_mode": meta.restore_mode,
        "log_config": attrs.asdict(meta.log_config),
    }


def cmd_metadata(args: argparse.Namespace, out: TextIO) -> int:
    """Print the recorded metadata of stores, or migrate one store's (``--apply``)."""
    from changelog.errors import InvalidConfigError  # noqa: PLC0415
    from statestore.migrate import migrate_store  # noqa: PLC0415
    from statestore.stores.metadata import read_metadata  # noqa: PLC0415

    stores = select_stores(find_stores(args.state_dir), args.store, args.state_dir)
    changing = bool(args.set or args.key_serde or args.value_serde)
    if not changing:
        docs: list[dict[str, Any]] = []
        for info in stores:
            meta = read_metadata(args.state_dir, info.name)
            docs.append({"store": info.name, "recorded": None if meta is None else _doc(meta)})
        if args.json:
            write_json(out, {"stores": docs})
            return 0
        for doc in docs:
            rec = doc["recorded"]
            if rec is None:
                out.write(f"{doc['store']}: no metadata file (recorded at its next open)\n")
                continue
            rows = [[key, rec[key]] for key in ("partitions", "key_serde", "value_serde")]
            rows.append(["restore_mode", rec["restore_mode"]])
            rows += [[f"log_config.{k}", v] for k, v in rec["log_config"].items()]
            out.write(f"{doc['store']}:\n{format_table(['setting', 'recorded'], rows)}\n")
        return 0
    if args.store is None:
        raise UsageError("give --store NAME: a migration changes one store")
    meta = read_metadata(args.state_dir, args.store)
    if meta is None:
        raise UsageError(f"{args.state_dir}: store {args.store!r} has no metadata file to migrate")
    fields = attrs.asdict(meta.log_config)
    changes = dict(_parse_setting(text, fields) for text in args.set)
    try:
        log_config = attrs.evolve(meta.log_config, **changes) if changes else None
    except InvalidConfigError as exc:
        raise UsageError(f"--set: {exc}") from None
    planned = [
        (f"log_config.{name}", fields[name], value)
        for name, value in changes.items()
        if fields[name] != value
    ]
    for role, given in (("key_serde", args.key_serde), ("value_serde", args.value_serde)):
        if given and given != getattr(meta, role):
            planned.append((role, getattr(meta, role), given))
    if args.apply and planned:
        migrate_store(
            args.state_dir,
            args.store,
            log_config=log_config,
            key_serde=args.key_serde,
            value_serde=args.value_serde,
        )
    if args.json:
        write_json(
            out,
            {
                "store": args.store,
                "applied": bool(args.apply and planned),
                "changes": [{"setting": s, "from": a, "to": b} for s, a, b in planned],
            },
        )
        return 0
    if not planned:
        out.write(f"{args.store}: nothing to change\n")
        return 0
    rows = [[setting, before, after] for setting, before, after in planned]
    write_table(out, ["setting", "recorded", "new"], rows)
    if args.apply:
        out.write(f"\nmetadata: migrated store {args.store!r} ({len(planned)} change(s))\n")
    else:
        out.write("\nmetadata: nothing was changed; run again with --apply to record this\n")
    return 0
