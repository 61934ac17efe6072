"""The errors :mod:`statestore` raises.

::

    StateStoreError
    ├── InvalidStoreConfigError      a store, RocksDB or manager setting is rejected (also ValueError)
    ├── StateDirLockedError          another owner (process or thread) holds the state directory
    ├── InvalidStateStoreError       the store is not open (created, restoring, closed or failed)
    ├── SerializationError           a key or value cannot be serialized; nothing was written
    ├── RecordTooLargeForLogError    a record would exceed the changelog's max_message_bytes
    ├── DeserializationError         stored bytes cannot be turned back into a key or value
    ├── StoreEngineError             RocksDB failed (the rocksdict error is the ``__cause__``)
    ├── CommitFailedError            the changelog append of a commit failed
    ├── RestoreError                 the changelog could not be replayed into the store
    ├── TransactionLogCorruptError   a record of the coordinator's log does not parse
    └── TransactionCoordinatorError  the coordinator is failed (its log took an I/O error)

Every error carries structured fields (``store``, ``partition``, ``path``,
``state``, ...) besides its message.  Errors of the layers below
(:mod:`changelog`, ``rocksdict``) are wrapped with ``raise ... from`` so that
one ``except StateStoreError`` catches every store failure while the original
stays available as ``__cause__``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CommitFailedError",
    "DeserializationError",
    "InvalidStateStoreError",
    "InvalidStoreConfigError",
    "RecordTooLargeForLogError",
    "RestoreError",
    "SerializationError",
    "StateDirLockedError",
    "StateStoreError",
    "StoreEngineError",
    "TransactionCoordinatorError",
    "TransactionLogCorruptError",
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


class StateDirLockedError(StateStoreError):
    """The state directory is owned by another :class:`~statestore.StateManager`.

    ``path`` is the lock file; ``holder`` names the owner (``"pid N"``) when known.
    """

    def __init__(self, path: Path, holder: str | None) -> None:
        who = f" (held by {holder})" if holder else ""
        super().__init__(f"state directory lock {path} is held by another owner{who}")
        self.path = path
        self.holder = holder


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
    """Replaying the changelog into the store failed; the changelog error is the ``__cause__``."""

    def __init__(self, store: str, partition: int, offset: int | None, detail: str) -> None:
        at = "" if offset is None else f" at offset {offset}"
        super().__init__(f"restore of {_where(store, partition)} failed{at}: {detail}")
        self.store = store
        self.partition = partition
        self.offset = offset
        self.detail = detail


class TransactionLogCorruptError(StateStoreError):
    """A record of the coordinator's log (``__transaction_state-0``) does not parse.

    ``offset`` is the record's offset in that log.  The open is refused and
    nothing is written: no transaction can be decided without the log.
    """

    def __init__(self, offset: int, detail: str) -> None:
        super().__init__(f"transaction state record at offset {offset} is corrupt: {detail}")
        self.offset = offset
        self.detail = detail


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
