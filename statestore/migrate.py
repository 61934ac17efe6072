"""Explicit migration of a store's recorded settings (its metadata file).

The metadata file (:mod:`statestore.stores.metadata`) makes every open agree
with what the store was created with; :func:`migrate_store` is the one way to
change what it records, for settings whose change leaves the bytes on disk
valid:

- ``log_config``: the changelog's settings (Kafka changes topic settings of a
  live topic the same way).  Existing segments stay as they are; new settings
  apply from the next open (roll size, retention, delete horizon, flush
  policy...).  Adding ``delete`` to the cleanup policy lets retention delete
  old segments, and with them keys: that is the point of asking explicitly;
- ``key_serde`` / ``value_serde``: the serde identities
  (:func:`~statestore.stores.metadata.serde_identity`).  Changing one records
  the caller's promise that the new serde reads every stored byte the old one
  wrote (a compatible new class, a renamed module); nothing is rewritten.

The partition count is not migrated in place: a key's partition is its
murmur2 hash modulo the count, so a new count means copying every entry into
a new store (the procedure is in docs/operations.md, "Migrating a store").
The restore mode needs no migration: an open with the other mode is a safe
switch.

Thread-safety: takes the state directory's lock for the whole migration, so
it fails with :class:`~statestore.errors.StateDirLockedError` while a manager
(in this or another process) owns the directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from changelog import LogConfig, LogLockedError
from changelog.fs.lock import DirectoryLock
from statestore.errors import StateDirLockedError, StoreLayoutError
from statestore.serdes import Serde
from statestore.stores.metadata import (
    StoreMetadata,
    metadata_path,
    partitions_on_disk,
    read_metadata,
    serde_identity,
    write_metadata,
)

__all__ = ["migrate_store"]


def _identity(serde: Serde[Any] | str | None, current: str) -> str:
    if serde is None:
        return current
    if isinstance(serde, str):
        return serde
    return serde_identity(serde)


def migrate_store(
    state_dir: str | Path,
    store: str,
    *,
    log_config: LogConfig | None = None,
    key_serde: Serde[Any] | str | None = None,
    value_serde: Serde[Any] | str | None = None,
) -> tuple[StoreMetadata, StoreMetadata]:
    """Record new settings for ``store`` of ``state_dir``; returns ``(before, after)``.

    Arguments left out keep their recorded value; a serde is given as an
    object or as its identity string.  The store must have a metadata file
    (a state directory from before it existed records one at its first open)
    and must not be open.  The file is replaced atomically (temp file, fsync,
    rename, fsync of the state directory).  Raises
    :class:`~statestore.errors.CorruptStoreMetadataError` for a damaged file
    (it is not repaired here either).
    """
    directory = Path(state_dir)
    lock = DirectoryLock(directory)
    try:
        lock.acquire()
    except LogLockedError as exc:
        raise StateDirLockedError(exc.path, exc.holder) from exc
    try:
        before = read_metadata(directory, store)
        if before is None:
            raise StoreLayoutError(
                store,
                metadata_path(directory, store),
                expected=None,
                found=partitions_on_disk(directory, store),
                reason="no metadata file to migrate: open the store once to record it",
            )
        after = attrs.evolve(
            before,
            log_config=log_config if log_config is not None else before.log_config,
            key_serde=_identity(key_serde, before.key_serde),
            value_serde=_identity(value_serde, before.value_serde),
        )
        if after != before:
            write_metadata(directory, after)
        return before, after
    finally:
        lock.release()
