"""The errors :mod:`statestore` raises.

::

    StateStoreError
    ├── InvalidStoreConfigError      a store, RocksDB or manager setting is rejected (also ValueError)
    ├── StateDirLockedError          another owner (process or thread) holds the state directory
    ├── RepairInProgressError        an interrupted repair's journal is in the state directory
    ├── InvalidStateStoreError       the store is not open (created, restoring, closed or failed)
    ├── UnsupportedStoreOperationError  the store's mode does not offer the operation (and says why)
    ├── SerdeDefinitionError         a serde refuses a class at construction (a field it cannot keep)
    ├── SerializationError           a key or value cannot be serialized; nothing was written
    ├── InvalidTimestampError        a timestamp or time range is refused; nothing was written
    ├── RecordTooLargeForLogError    a record would exceed the changelog's max_message_bytes
    ├── DeserializationError         stored bytes cannot be turned back into a key or value
    ├── StoreEngineError             RocksDB failed (the rocksdict error is the ``__cause__``)
    ├── CommitFailedError            the changelog append of a commit failed
    ├── ChangelogFailedError         a changelog (or the coordinator's log) refused to open or read
    │   └── CorruptChangelogError        ... because something on disk is not what was written
    ├── RestoreError                 the changelog could not be replayed into the store
    │   └── AppliedOffsetMismatchError   RocksDB's applied offset and the changelog disagree
    ├── TransactionLogCorruptError   a record of the coordinator's log does not parse
    ├── TransactionStateMissingError the coordinator's log is lost beside transactional changelogs
    ├── TransactionCoordinatorError  the coordinator is failed (its log took an I/O error)
    └── StoreMetadataError           the store's metadata file cannot be used as it is
        ├── CorruptStoreMetadataError    unreadable, truncated or failing its checksum
        ├── StoreMetadataMismatchError   the open asks for other settings than were recorded
        └── StoreLayoutError             the partition directories disagree with the metadata

Every error carries structured fields (``store``, ``partition``, ``path``,
``state``, ...) besides its message.  Errors of the layers below
(:mod:`changelog`, ``rocksdict``) are wrapped with ``raise ... from`` so that
one ``except StateStoreError`` catches every store failure while the original
stays available as ``__cause__``; :class:`ChangelogFailedError` also copies
the changelog error's own fields (``path``, ``position``, ``offset``, ...).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from changelog.errors import ChangelogError, CorruptDataError

__all__ = [
    "AppliedOffsetMismatchError",
    "ChangelogFailedError",
    "CommitFailedError",
    "CorruptChangelogError",
    "CorruptStoreMetadataError",
    "DeserializationError",
    "InvalidStateStoreError",
    "InvalidStoreConfigError",
    "InvalidTimestampError",
    "RecordTooLargeForLogError",
    "RepairInProgressError",
    "RestoreError",
    "SerdeDefinitionError",
    "SerializationError",
    "StateDirLockedError",
    "StateStoreError",
    "StoreEngineError",
    "StoreLayoutError",
    "StoreMetadataError",
    "StoreMetadataMismatchError",
    "TransactionCoordinatorError",
    "TransactionLogCorruptError",
    "TransactionStateMissingError",
    "UnsupportedStoreOperationError",
]


def _where(store: str, partition: int | None) -> str:
    return store if partition is None else f"{store}-{partition}"


class StateStoreError(Exception):
    """Base class of every error raised by :mod:`statestore`."""


class InvalidStoreConfigError(StateStoreError, ValueError):
    """A configuration value is rejected at construction.

    ``setting`` names the offending setting and ``value`` is what was given.
    """

    def __init__(self, setting: str, value: object, reason: str) -> None:
        super().__init__(f"invalid {setting}={value!r}: {reason}")
        self.setting = setting
        self.value = value
        self.reason = reason


class SerdeDefinitionError(StateStoreError, TypeError):
    """A serde refuses the class it is built for, before anything is written.

    ``cls`` is the class (``module.qualname``), ``field`` the dotted path of the
    offending field (``None``: the class itself) and ``reason`` says why and how
    to fix it.
    """

    def __init__(self, cls: str, field: str | None, reason: str) -> None:
        where = cls if field is None else f"{cls} field {field!r}"
        super().__init__(f"{where}: {reason}")
        self.cls = cls
        self.field = field
        self.reason = reason


class StateDirLockedError(StateStoreError):
    """The state directory is owned by another :class:`~statestore.StateManager`.

    ``path`` is the lock file; ``holder`` names the owner (``"pid N"``) when known.
    """

    def __init__(self, path: Path, holder: str | None) -> None:
        who = f" (held by {holder})" if holder else ""
        super().__init__(f"state directory lock {path} is held by another owner{who}")
        self.path = path
        self.holder = holder


class RepairInProgressError(StateStoreError):
    """The state directory holds the journal of a repair that did not finish (``path``).

    The partitions it names may be between their old and new logs, so nothing
    opens the directory until the remedy completes it: any ``statestore repair
    ... --apply`` on the directory does (docs/recovery.md, "The repair journal").
    Nothing was changed.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path}: an interrupted repair's journal is here: the partitions it names may be"
            " between their old and new logs, so the state directory is not opened; complete"
            f" the repair with 'statestore repair complete {path.parent} --apply' (or run the"
            " remedy again with --apply); nothing was changed"
        )
        self.path = path


class InvalidStateStoreError(StateStoreError):
    """A store (or manager) was used while it is not open.

    ``store`` is the store name and ``state`` its lifecycle state
    (``"created"``, ``"restoring"``, ``"closed"`` or ``"failed"``).
    """

    def __init__(self, store: str, state: str, operation: str) -> None:
        super().__init__(f"store {store!r} is {state}: cannot {operation}")
        self.store = store
        self.state = state
        self.operation = operation


class UnsupportedStoreOperationError(StateStoreError):
    """The store cannot do ``operation`` in the mode it runs in; ``reason`` says why.

    In distributed mode the runtime commits every store of the process in one
    Kafka transaction, so a store's own ``commit()``, ``abort()`` and
    ``transaction()`` are refused, and its changelog is a topic partition on the
    broker, not a local :class:`changelog.Log`.
    """

    def __init__(self, store: str, operation: str, reason: str) -> None:
        super().__init__(f"store {store!r} cannot {operation}: {reason}")
        self.store = store
        self.operation = operation
        self.reason = reason


class SerializationError(StateStoreError):
    """A key or value cannot be serialized; nothing was buffered or written.

    ``role`` is ``"key"`` or ``"value"``; ``type_name`` the Python type given.
    """

    def __init__(self, store: str, role: str, type_name: str, reason: str) -> None:
        super().__init__(f"store {store!r}: cannot serialize {role} of type {type_name}: {reason}")
        self.store = store
        self.role = role
        self.type_name = type_name
        self.reason = reason


class InvalidTimestampError(StateStoreError, ValueError):
    """A timestamp argument of a store in time is refused (not an integer in ``[0, 2**63)``).

    Nothing was buffered.  ``name`` is the argument (``timestamp_ms``,
    ``window_start_ms``, ...), ``value`` what was given.
    """

    def __init__(self, store: str, name: str, value: object) -> None:
        super().__init__(
            f"store {store!r}: {name}={value!r} is not a timestamp (an integer of "
            "milliseconds in [0, 2**63))"
        )
        self.store = store
        self.name = name
        self.value = value


class RecordTooLargeForLogError(StateStoreError):
    """One record (key + value + framing) would not fit in a changelog batch; nothing was buffered.

    ``size`` is the record's size in bytes, ``limit`` what the changelog's
    ``max_message_bytes`` leaves for one record.
    """

    def __init__(self, store: str, size: int, limit: int) -> None:
        super().__init__(
            f"store {store!r}: record of {size} bytes exceeds the {limit} bytes a changelog "
            "batch can hold (max_message_bytes); nothing was written"
        )
        self.store = store
        self.size = size
        self.limit = limit


class DeserializationError(StateStoreError):
    """Stored bytes cannot be deserialized (wrong serde for the store, or foreign data).

    ``data`` is the first bytes of what was found (at most 64).
    """

    def __init__(self, store: str, role: str, data: bytes, reason: str) -> None:
        super().__init__(
            f"store {store!r}: cannot deserialize {role} {bytes(data[:64])!r}: {reason}"
        )
        self.store = store
        self.role = role
        self.data = bytes(data[:64])
        self.reason = reason


class StoreEngineError(StateStoreError):
    """RocksDB reported a failure; the ``rocksdict`` exception is the ``__cause__``."""

    def __init__(self, path: Path, operation: str, detail: str) -> None:
        super().__init__(f"RocksDB {operation} failed on {path}: {detail}")
        self.path = path
        self.operation = operation
        self.detail = detail


class CommitFailedError(StateStoreError):
    """A commit could not be appended to the changelog; the changelog error is the ``__cause__``.

    ``written`` says whether the changelog may hold the batch: ``False`` means
    nothing was written and the pending writes are still buffered (the caller
    may fix them, or ``abort()``); ``True`` (an I/O failure after the append
    began) means the store is now failed and must be reopened, which restores
    whatever the changelog durably holds.
    """

    def __init__(self, store: str, partition: int | None, *, written: bool, detail: str) -> None:
        state = "store is failed; reopen it" if written else "nothing was written"
        super().__init__(f"commit of {_where(store, partition)} failed ({state}): {detail}")
        self.store = store
        self.partition = partition
        self.written = written
        self.detail = detail


class RestoreError(StateStoreError):
    """Replaying the changelog into the store failed; the changelog error is the ``__cause__``.

    ``offset`` is the first offset the failure affects; ``path`` and
    ``position`` name the changelog file and byte position when the cause is
    damage on disk (``None`` otherwise).
    """

    def __init__(
        self,
        store: str,
        partition: int,
        offset: int | None,
        detail: str,
        *,
        path: Path | None = None,
        position: int | None = None,
    ) -> None:
        at = "" if offset is None else f" at offset {offset}"
        super().__init__(f"restore of {_where(store, partition)} failed{at}: {detail}")
        self.store = store
        self.partition = partition
        self.offset = offset
        self.detail = detail
        self.path = path
        self.position = position


class TransactionLogCorruptError(StateStoreError):
    """A record of the coordinator's log (``__transaction_state-0``) does not parse.

    ``offset`` is the record's offset in that log.  The open is refused and
    nothing is written: no transaction can be decided without the log.
    """

    def __init__(self, offset: int, detail: str) -> None:
        super().__init__(f"transaction state record at offset {offset} is corrupt: {detail}")
        self.offset = offset
        self.detail = detail


class TransactionStateMissingError(StateStoreError):
    """The coordinator's log (``path``, ``__transaction_state-0``) is missing or holds no
    record, but ``changelog`` (a partition directory of the same state directory) holds
    transactional batches: the decisions they depend on are lost.

    A new coordinator would abort every transaction whose COMMIT markers were not
    durable, acknowledged ones included, so the open is refused and nothing is written
    (as a missing changelog directory is refused with :class:`StoreLayoutError`).
    ``position`` is where the first transactional batch was found in ``log_file``.
    """

    def __init__(self, path: Path, changelog: Path, log_file: Path, position: int) -> None:
        state = "missing" if not path.exists() else "empty (it holds no record)"
        super().__init__(
            f"the transaction coordinator's log {path} is {state}, but {changelog} holds "
            f"transactional batches ({log_file.name} at position {position}): the decisions "
            "of its transactions are lost, and opening would abort acknowledged commits; "
            "restore the directory from a backup (docs/recovery.md); nothing was changed"
        )
        self.path = path
        self.changelog = changelog
        self.log_file = log_file
        self.position = position


class TransactionCoordinatorError(StateStoreError):
    """The transaction coordinator cannot decide commits any more (reopen the manager).

    ``path`` is the coordinator's log directory; the cause is the error that
    failed it (an I/O error while the decision was being written, after which
    whether the decision is on disk is unknown until the next open decides).
    """

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(f"transaction coordinator of {path} is failed; reopen: {detail}")
        self.path = path
        self.detail = detail


class AppliedOffsetMismatchError(RestoreError):
    """RocksDB's durable applied offset is implausible for the changelog it belongs to.

    The store refuses to open rather than rebuild RocksDB from a changelog that
    has lost records RocksDB had applied (``applied_offset`` above
    ``log_end_offset`` under the default one-fsync-per-append policy), or that
    is missing records below the offset RocksDB has applied up to while no
    retention could have removed them (``applied_offset`` below
    ``log_start_offset`` under ``compact`` only).  ``recovery_point`` is the
    changelog's recovery point at open.  docs/recovery.md lists the remedies.
    """

    def __init__(
        self,
        store: str,
        partition: int,
        *,
        applied_offset: int,
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
        reason: str,
    ) -> None:
        super().__init__(
            store,
            partition,
            applied_offset,
            f"RocksDB's applied offset {applied_offset} does not fit the changelog "
            f"[log start {log_start_offset}, log end {log_end_offset}, recovery point "
            f"{recovery_point}]: {reason}; nothing was changed (see docs/recovery.md, "
            "'RocksDB ahead of its changelog')",
        )
        self.applied_offset = applied_offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.reason = reason


class StoreMetadataError(StateStoreError):
    """The metadata file of store ``store`` (``path``) cannot be used as it is."""

    def __init__(self, store: str, path: Path, message: str) -> None:
        super().__init__(message)
        self.store = store
        self.path = path


class CorruptStoreMetadataError(StoreMetadataError):
    """The metadata file is unreadable: not JSON, truncated, of an unknown format or
    version, or failing its CRC-32C.  It is never rewritten silently.

    ``reason`` says what was found; ``position`` is the byte offset of a parse
    error (``None`` when the error is not at one place, e.g. a checksum).
    """

    def __init__(self, store: str, path: Path, reason: str, position: int | None = None) -> None:
        at = "" if position is None else f" at byte {position}"
        super().__init__(
            store,
            path,
            f"store metadata {path} is corrupt{at}: {reason} (nothing was changed; "
            "see docs/operations.md, 'Store metadata')",
        )
        self.reason = reason
        self.position = position


class StoreMetadataMismatchError(StoreMetadataError, ValueError):
    """The open asks for settings other than those recorded in the store's metadata.

    ``setting``, ``stored`` and ``requested`` describe the first difference;
    ``mismatches`` lists every one as ``(setting, stored, requested)``.  Nothing
    was changed on disk.  docs/operations.md says how to migrate.
    """

    def __init__(
        self, store: str, path: Path, mismatches: Sequence[tuple[str, object, object]]
    ) -> None:
        listed = "; ".join(
            f"{name}: stored {old!r}, asked {new!r}" for name, old, new in mismatches
        )
        super().__init__(
            store,
            path,
            f"store {store!r} was created with other settings ({path}): {listed}. Nothing "
            "was changed; to change them, migrate the store (docs/operations.md, "
            "'Migrating a store')",
        )
        self.mismatches = tuple(mismatches)
        self.setting, self.stored, self.requested = self.mismatches[0]


class StoreLayoutError(StoreMetadataError):
    """The store's partition directories disagree with its metadata (or prove nothing).

    ``expected`` is the partition count the metadata records (``None`` when there
    is no metadata) and ``found`` the partition numbers of the
    ``<store>-changelog-<p>`` directories present.  Nothing was changed.
    """

    def __init__(
        self,
        store: str,
        path: Path,
        *,
        expected: int | None,
        found: Sequence[int],
        reason: str,
    ) -> None:
        super().__init__(
            store, path, f"store {store!r} in {path.parent}: {reason}; nothing was changed"
        )
        self.expected = expected
        self.found = tuple(found)
        self.reason = reason


class ChangelogFailedError(StateStoreError):
    """A store partition's changelog (or the transaction coordinator's log) refused an operation.

    The :mod:`changelog` error is the ``__cause__``; its type name is
    ``error`` and its fields are copied here (``None`` where it has none):
    ``path`` (the file or directory), ``position`` (a byte position in it),
    ``offset``, ``expected``, ``actual`` and ``reason``.  ``store`` and
    ``partition`` say whose log it is (``None`` for the coordinator's log),
    ``operation`` what was being done.  Nothing was changed on disk by the
    refused open (the loader plans read-only first).
    """

    def __init__(
        self,
        cause: ChangelogError,
        *,
        store: str | None,
        partition: int | None,
        operation: str,
    ) -> None:
        whose = "the transaction coordinator's log" if store is None else _where(store, partition)
        super().__init__(f"{operation} of {whose} failed: {type(cause).__name__}: {cause}")
        self.store = store
        self.partition = partition
        self.operation = operation
        self.error = type(cause).__name__
        fields = vars(cause)
        path = fields.get("path")
        self.path: Path | None = None if path is None else Path(path)
        self.position: int | None = fields.get("position")
        self.offset: int | None = fields.get("offset")
        self.expected: object = fields.get("expected")
        self.actual: object = fields.get("actual")
        self.reason: str | None = fields.get("reason")


class CorruptChangelogError(ChangelogFailedError):
    """:class:`ChangelogFailedError` whose cause is a :class:`changelog.CorruptDataError`:
    a record batch, index, checkpoint or segment list on disk is not what was written."""


def wrap_changelog_error(
    cause: ChangelogError, *, store: str | None, partition: int | None, operation: str
) -> ChangelogFailedError:
    """The :class:`ChangelogFailedError` (corrupt or not) that carries ``cause`` and its fields."""
    kind = CorruptChangelogError if isinstance(cause, CorruptDataError) else ChangelogFailedError
    return kind(cause, store=store, partition=partition, operation=operation)


@contextlib.contextmanager
def changelog_errors(*, store: str | None, partition: int | None, operation: str) -> Iterator[None]:
    """Raise every :class:`changelog.ChangelogError` of the block as a
    :class:`ChangelogFailedError` (``raise ... from``); anything else passes unchanged."""
    try:
        yield
    except ChangelogError as exc:
        raise wrap_changelog_error(
            exc, store=store, partition=partition, operation=operation
        ) from exc
