"""A store's persisted identity: the metadata file, its format and the check at every open.

One file per store, beside its partition directories in the state directory::

    <state_dir>/<store>.metadata.json

It records what a reopen must agree with: the number of partitions, the key
and value serde identities (:func:`serde_identity`), the restore mode and
every field of the changelog's :class:`~changelog.LogConfig`.  Format
(docs/formats.md, "Store metadata"): one JSON object, UTF-8, written as
``json.dumps(doc, indent=2, sort_keys=True)`` plus a newline::

    key            type     meaning
    format         string   "statestore.store-metadata"
    version        int      1
    store          string   the store's name
    partitions     int      >= 1
    key_serde      string   serde identity of the keys
    value_serde    string   serde identity of the values
    restore_mode   string   "full" or "incremental"
    log_config     object   every LogConfig field by name
    time           object   only for a store in time: every TimeSettings field by name
    crc32c         int      CRC-32C of the canonical form of every other key

The canonical form is ``json.dumps(doc_without_crc32c, sort_keys=True,
separators=(",", ":"), ensure_ascii=True)`` encoded as UTF-8, so the checksum
does not depend on indentation: a byte that changes any value, key or
structure fails the parse or the checksum (:class:`CorruptStoreMetadataError`),
a byte that only changes white space still reads the same settings.  The file
is written with :func:`changelog.fs.files.atomic_write` (temp file, fsync,
rename, fsync of the state directory; fault points ``store_metadata.*``) and
never rewritten to repair it.

What the open does with it is :func:`reconcile` (a pure function): settings
that were not given are taken from the file, given ones must equal it
(:class:`StoreMetadataMismatchError`), a different restore mode is a safe
switch (RocksDB is rebuilt; see :class:`Reconciled`), and a state directory
from before this file existed is adopted when its partition directories prove
the partition count (``<store>-changelog-0..N-1``), refused when they do not.
Partition directories without a metadata file and without a single byte in any
``.log`` segment are an interrupted creation (the file is written once the new
store has restored): no write of that store was ever acknowledged, so a
manager's open creates the store anew with the settings it asks for.

Thread-safety: pure functions and immutable values; the manager serializes opens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import crc32c

from changelog import LogConfig
from changelog.errors import ChangelogError
from changelog.fs import files
from statestore.config import RestoreMode
from statestore.errors import (
    CorruptStoreMetadataError,
    StoreLayoutError,
    StoreMetadataError,
    StoreMetadataMismatchError,
)
from statestore.serdes import AttrsSerde, BytesSerde, IntSerde, MsgpackSerde, Serde, StringSerde
from statestore.stores.spec import changelog_dir
from statestore.stores.time.settings import TimeSettings

__all__ = [
    "METADATA_FORMAT",
    "METADATA_SUFFIX",
    "METADATA_VERSION",
    "Reconciled",
    "StoreMetadata",
    "decode_metadata",
    "encode_metadata",
    "metadata_path",
    "partitions_on_disk",
    "read_metadata",
    "reconcile",
    "serde_identity",
    "write_metadata",
]

METADATA_FORMAT: Final = "statestore.store-metadata"
METADATA_VERSION: Final = 1
METADATA_SUFFIX: Final = ".metadata.json"
_MAX_BYTES: Final = 1024 * 1024
"""A metadata file is a few hundred bytes; anything past 1 MiB is not one."""
_CHANGELOG_DIR: Final = re.compile(r"^(?P<store>.+)-changelog-(?P<partition>\d+)$")
_RESTORE_MODES: Final = ("full", "incremental")
_KEYS: Final = frozenset(
    {
        "format",
        "version",
        "store",
        "partitions",
        "key_serde",
        "value_serde",
        "restore_mode",
        "log_config",
        "crc32c",
    }
)


def metadata_path(state_dir: Path, store: str) -> Path:
    """``<state_dir>/<store>.metadata.json``."""
    return state_dir / f"{store}{METADATA_SUFFIX}"


def serde_identity(serde: Serde[Any]) -> str:
    """The name recorded for ``serde``: what the bytes on disk mean.

    Built-ins: ``bytes``, ``string`` (UTF-8), ``int64`` (ordered 8 bytes),
    ``msgpack``, ``attrs:<name>`` (``AttrsSerde.name``: ``<module>.<class>`` unless given).  Any other serde: its
    ``serde_id`` attribute when it has one (a string; let two classes that
    read the same bytes share it, or bump it when the format changes), else
    ``<module>.<class>`` of its type.
    """
    if type(serde) is BytesSerde:
        return "bytes"
    if type(serde) is StringSerde:
        return "string"
    if type(serde) is IntSerde:
        return "int64"
    if type(serde) is MsgpackSerde:
        return "msgpack"
    if isinstance(serde, AttrsSerde):
        return f"attrs:{serde.name}"
    custom = getattr(serde, "serde_id", None)
    if isinstance(custom, str) and custom:
        return custom
    return f"{type(serde).__module__}.{type(serde).__qualname__}"


@attrs.frozen(kw_only=True)
class StoreMetadata:
    """What one store's metadata file records (see the module docstring).  Immutable."""

    store: str
    partitions: int
    key_serde: str
    value_serde: str
    restore_mode: RestoreMode
    log_config: LogConfig
    time: TimeSettings | None = None
    """A store in time's settings (``None``: a plain key-value store)."""


def _log_config_doc(config: LogConfig) -> dict[str, Any]:
    return attrs.asdict(config)


def _time_doc(time: TimeSettings | None) -> str:
    return "key-value store" if time is None else json.dumps(time.to_doc(), sort_keys=True)


def _canonical(doc: dict[str, Any]) -> bytes:
    body = {key: value for key, value in doc.items() if key != "crc32c"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode_metadata(meta: StoreMetadata) -> bytes:
    """The bytes of the metadata file for ``meta``."""
    doc: dict[str, Any] = {
        "format": METADATA_FORMAT,
        "version": METADATA_VERSION,
        "store": meta.store,
        "partitions": meta.partitions,
        "key_serde": meta.key_serde,
        "value_serde": meta.value_serde,
        "restore_mode": meta.restore_mode,
        "log_config": _log_config_doc(meta.log_config),
    }
    if meta.time is not None:
        doc["time"] = meta.time.to_doc()
    doc["crc32c"] = crc32c.crc32c(_canonical(doc))
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=True) + "\n").encode()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise ValueError(f"duplicate key {key!r}")
        doc[key] = value
    return doc


def decode_metadata(data: bytes, *, path: Path, store: str) -> StoreMetadata:
    """Parse and check the bytes of a metadata file; :class:`CorruptStoreMetadataError` if bad."""

    def corrupt(reason: str, position: int | None = None) -> CorruptStoreMetadataError:
        return CorruptStoreMetadataError(store, path, reason, position)

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise corrupt(f"not UTF-8 ({exc.reason})", exc.start) from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise corrupt(f"not JSON: {exc.msg} (truncated?)", len(text[: exc.pos].encode())) from None
    except ValueError as exc:
        raise corrupt(str(exc)) from None
    if not isinstance(doc, dict):
        raise corrupt(f"expected a JSON object, found {type(doc).__name__}")
    if doc.get("format") != METADATA_FORMAT:
        raise corrupt(f"format is {doc.get('format')!r}, expected {METADATA_FORMAT!r}")
    if doc.get("version") != METADATA_VERSION:
        raise corrupt(
            f"version {doc.get('version')!r} is not supported (this statestore reads "
            f"version {METADATA_VERSION})"
        )
    if set(doc) - {"time"} != _KEYS:
        missing = sorted(_KEYS - set(doc))
        extra = sorted(set(doc) - _KEYS - {"time"})
        raise corrupt(f"keys missing {missing}, unknown {extra}")
    stored_crc = doc["crc32c"]
    actual = crc32c.crc32c(_canonical(doc))
    if stored_crc != actual:
        raise corrupt(f"CRC-32C mismatch: stored {stored_crc!r}, computed {actual}")
    # The checksum holds: from here a bad value is our bug or a foreign writer's.
    partitions = doc["partitions"]
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise corrupt(f"partitions {partitions!r} is not an integer >= 1")
    if doc["restore_mode"] not in _RESTORE_MODES:
        raise corrupt(f"restore_mode {doc['restore_mode']!r} is not full or incremental")
    for key in ("store", "key_serde", "value_serde"):
        if not isinstance(doc[key], str):
            raise corrupt(f"{key} {doc[key]!r} is not a string")
    if doc["store"] != store:
        raise corrupt(f"records store {doc['store']!r}, not {store!r} (a copied file?)")
    if not isinstance(doc["log_config"], dict):
        raise corrupt("log_config is not an object")
    try:
        log_config = LogConfig(**doc["log_config"])
    except (TypeError, ChangelogError) as exc:
        raise corrupt(f"log_config: {exc}") from None
    time = None
    if "time" in doc:
        try:
            time = TimeSettings.from_doc(doc["time"])
        except ValueError as exc:
            raise corrupt(f"time: {exc}") from None
    return StoreMetadata(
        time=time,
        store=doc["store"],
        partitions=partitions,
        key_serde=doc["key_serde"],
        value_serde=doc["value_serde"],
        restore_mode=doc["restore_mode"],
        log_config=log_config,
    )


def read_metadata(state_dir: Path, store: str) -> StoreMetadata | None:
    """The recorded metadata of ``store`` (``None`` when the file does not exist)."""
    path = metadata_path(state_dir, store)
    try:
        with path.open("rb") as file:
            data = file.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptStoreMetadataError(store, path, f"cannot read: {exc.strerror}") from exc
    if len(data) > _MAX_BYTES:
        raise CorruptStoreMetadataError(store, path, f"larger than {_MAX_BYTES} bytes")
    return decode_metadata(data, path=path, store=store)


def write_metadata(state_dir: Path, meta: StoreMetadata) -> None:
    """Replace the metadata file of ``meta.store`` atomically and durably.

    Steps (fault points ``store_metadata.create/.write/.fsync/.rename/.fsync_dir``):
    write ``<file>.tmp``, fsync it, rename it over the file, fsync ``state_dir``.
    """
    path = metadata_path(state_dir, meta.store)
    try:
        files.atomic_write(path, encode_metadata(meta), "store_metadata")
    except ChangelogError as exc:
        raise StoreMetadataError(
            meta.store, path, f"cannot write store metadata {path}: {exc}"
        ) from exc


def partitions_on_disk(state_dir: Path, store: str) -> list[int]:
    """The partition numbers of the ``<store>-changelog-<p>`` directories, sorted."""
    found = []
    try:
        children = list(state_dir.iterdir())
    except FileNotFoundError:
        return []
    for child in children:
        match = _CHANGELOG_DIR.match(child.name)
        if match and match["store"] == store and child.is_dir():
            found.append(int(match["partition"]))
    return sorted(found)


@attrs.frozen(kw_only=True)
class Reconciled:
    """What an open of a store uses, and what it must do about the metadata file.

    ``metadata`` is the store's identity after this open; ``write`` says that
    the file must be (re)written with it once the store is restored, before it
    is handed out.  ``rebuild_reason`` is set when RocksDB must be rebuilt from
    the changelog whatever the restore plan says (a switch to ``incremental``,
    or an adopted directory whose last restore mode is unknown).

    Why recording the mode *after* the restore is safe (the restore-mode switch
    protocol, docs/recovery.md): a deleted key comes back only when RocksDB
    holds a state built from an *older* version of the log (a put applied, its
    tombstone not) and the cleaner has since removed that tombstone, which it
    may do under ``full`` (no cleaning barrier).  So:

    - M1. recorded ``full``, asked ``incremental``: RocksDB may be such a stale
      state; it is rebuilt from the current log start, with the cleaning
      barrier held, before the store is used.  A rebuild cut short by a crash
      is a prefix of the *current* log (no removed tombstone's put is in it)
      and ``full`` is still recorded, so the next open rebuilds again;
    - M2. the new mode is recorded after the restore and before the store is
      visible to the cleaner or to commits: until then no tombstone can be
      removed, so whichever mode the file says at a crash, the next open is safe.
    """

    metadata: StoreMetadata
    write: bool
    rebuild_reason: str | None
    adopted: bool


def reconcile(
    state_dir: Path,
    *,
    store: str,
    stored: StoreMetadata | None,
    partitions: int | None,
    key_serde: str | None,
    value_serde: str | None,
    restore_mode: RestoreMode | None,
    log_config: LogConfig | None,
    default_log_config: LogConfig,
    time: TimeSettings | None = None,
    check_time: bool = False,
) -> Reconciled:
    """Check an open of ``store`` against its metadata; what to use and what to record.

    ``None`` for a setting means "not given": the recorded value is used (for a
    new store: 1 partition, ``default_log_config``; serdes and the restore mode
    are always given by the manager, ``None`` only for tools that open with
    raw bytes and the recorded mode).  Raises :class:`StoreMetadataMismatchError`
    when a given setting differs from the recorded one, and
    :class:`StoreLayoutError` when the partition directories disagree with
    the metadata (or, without metadata, do not prove a partition count).
    ``time`` is the store in time asked for (``None``: a key-value store),
    checked against the recorded one when ``check_time`` (a raw open of a
    tool uses the recorded one).
    Reads the directory listing only; writes nothing.
    """
    path = metadata_path(state_dir, store)
    on_disk = partitions_on_disk(state_dir, store)
    if stored is not None:
        mismatches: list[tuple[str, object, object]] = []
        if partitions is not None and partitions != stored.partitions:
            mismatches.append(("partitions", stored.partitions, partitions))
        if key_serde is not None and key_serde != stored.key_serde:
            mismatches.append(("key_serde", stored.key_serde, key_serde))
        if value_serde is not None and value_serde != stored.value_serde:
            mismatches.append(("value_serde", stored.value_serde, value_serde))
        if log_config is not None and log_config != stored.log_config:
            old, new = _log_config_doc(stored.log_config), _log_config_doc(log_config)
            mismatches.extend(
                (f"log_config.{name}", old[name], new[name])
                for name in old
                if old[name] != new[name]
            )
        if check_time and time != stored.time:
            mismatches.append(("time", _time_doc(stored.time), _time_doc(time)))
        if mismatches:
            raise StoreMetadataMismatchError(store, path, mismatches)
        _check_layout(store, path, stored.partitions, on_disk)
        mode = restore_mode if restore_mode is not None else stored.restore_mode
        meta = attrs.evolve(stored, restore_mode=mode)
        switch = mode != stored.restore_mode
        return Reconciled(
            metadata=meta,
            write=switch,
            rebuild_reason=(
                f"restore mode switched from {stored.restore_mode} to {mode}"
                if switch and mode == "incremental"
                else None
            ),
            adopted=False,
        )
    mode = restore_mode if restore_mode is not None else "full"
    creating = key_serde is not None and value_serde is not None
    interrupted = bool(on_disk) and creating and not _any_records(state_dir, store, on_disk)
    if interrupted:
        # An interrupted creation (a crash or power cut after some partition directories
        # were made, before the file was written once the store had restored): no batch in
        # any partition, so nothing of this store was ever acknowledged.  It is created anew.
        on_disk = []
    if on_disk:
        # A state directory from before the metadata file: adopt what it proves.
        if on_disk != list(range(len(on_disk))):
            raise StoreLayoutError(
                store,
                path,
                expected=None,
                found=on_disk,
                reason=(
                    f"no metadata file, and changelog partitions {on_disk} are not "
                    f"0..{len(on_disk) - 1}: the partition count is ambiguous (see "
                    "docs/operations.md, 'Store metadata')"
                ),
            )
        if partitions is not None and partitions != len(on_disk):
            raise StoreMetadataMismatchError(
                store, path, [("partitions", f"{len(on_disk)} (directories on disk)", partitions)]
            )
        unknown = key_serde is None or value_serde is None  # a raw (tool) open: record nothing
        meta = StoreMetadata(
            store=store,
            partitions=len(on_disk),
            key_serde=key_serde if key_serde is not None else "unknown",
            value_serde=value_serde if value_serde is not None else "unknown",
            restore_mode=mode,
            log_config=log_config if log_config is not None else default_log_config,
            time=time,
        )
        return Reconciled(
            metadata=meta,
            write=not unknown,
            rebuild_reason=(
                "no metadata file: the last restore mode is unknown"
                if mode == "incremental"
                else None
            ),
            adopted=True,
        )
    if key_serde is None or value_serde is None:
        raise StoreLayoutError(
            store,
            path,
            expected=None,
            found=[],
            reason="no such store (no metadata, no partitions)",
        )
    meta = StoreMetadata(
        store=store,
        partitions=partitions if partitions is not None else 1,
        key_serde=key_serde,
        value_serde=value_serde,
        restore_mode=mode,
        log_config=log_config if log_config is not None else default_log_config,
        time=time,
    )
    return Reconciled(
        metadata=meta,
        write=True,
        rebuild_reason=(
            "no metadata file (an interrupted creation): the last restore mode is unknown"
            if interrupted and mode == "incremental"
            else None
        ),
        adopted=False,
    )


def _any_records(state_dir: Path, store: str, partitions: Sequence[int]) -> bool:
    """Whether any ``.log`` segment file of the store's partition directories has a byte."""
    for partition in partitions:
        directory = changelog_dir(state_dir, store, partition)
        try:
            segments = [child for child in directory.iterdir() if child.suffix == ".log"]
            if any(child.stat().st_size > 0 for child in segments):
                return True
        except FileNotFoundError:
            continue
    return False


def _check_layout(store: str, path: Path, expected: int, on_disk: Sequence[int]) -> None:
    missing = sorted(set(range(expected)) - set(on_disk))
    extra = sorted(set(on_disk) - set(range(expected)))
    if missing:
        raise StoreLayoutError(
            store,
            path,
            expected=expected,
            found=on_disk,
            reason=(
                f"the metadata records {expected} partitions but changelog partition "
                f"director{'y' if len(missing) == 1 else 'ies'} {missing} "
                f"{'is' if len(missing) == 1 else 'are'} missing (deleted?); an open would "
                "start them empty"
            ),
        )
    if extra:
        raise StoreLayoutError(
            store,
            path,
            expected=expected,
            found=on_disk,
            reason=(
                f"the metadata records {expected} partitions but changelog partitions "
                f"{extra} also exist (see docs/operations.md, 'Store metadata')"
            ),
        )
