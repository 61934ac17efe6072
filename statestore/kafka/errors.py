"""The errors :mod:`statestore.kafka` raises (distributed mode).

::

    StateStoreError                      (statestore.errors)
    └── KafkaStateError                  base of distributed-mode failures
        ├── ChangelogTopicMismatchError  an existing changelog topic has other settings
        ├── CoPartitioningError          input topics (or a changelog) differ in partition count
        ├── KafkaClientError             a broker or client call failed (``kafka_error`` kept)
        │   ├── AuthorizationFailedError the principal lacks an ACL (topic, group, transactional id)
        │   ├── TransactionAbortedError  the transaction was aborted; buffers dropped, inputs rewound
        │   ├── ProducerFencedError      another producer took our transactional.id (or epoch)
        │   └── FatalCommitError         commits keep failing: a failure that will not heal
        ├── ProcessingError              ``process()`` raised and the handler said FAIL
        ├── UserCallbackError            a callback of the application raised (or returned junk)
        │   └── RebalanceListenerError   ``on_rebalance`` raised
        ├── ProcessorFailedError         the processor stopped on an earlier error; use refused
        ├── IllegalTaskStateError        a task was asked for a move its state does not allow
        ├── NotOwnerError                a query for a partition this process does not serve
        │   └── StandbyTooStaleError     the standby here is behind the caller's bound
        ├── UnknownStorePartitionError   a query names a store or partition that does not exist
        └── BrokerRestoreError           a partition could not be restored from its topic

Every error carries structured fields.  A confluent-kafka ``KafkaException`` is
the ``__cause__`` of the error that wraps it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from statestore.errors import StateStoreError

__all__ = [
    "AuthorizationFailedError",
    "BrokerRestoreError",
    "ChangelogTopicMismatchError",
    "CoPartitioningError",
    "FatalCommitError",
    "IllegalTaskStateError",
    "KafkaClientError",
    "KafkaStateError",
    "NotOwnerError",
    "ProcessingError",
    "ProcessorFailedError",
    "ProducerFencedError",
    "RebalanceListenerError",
    "StandbyTooStaleError",
    "TransactionAbortedError",
    "UnknownStorePartitionError",
    "UserCallbackError",
]


class KafkaStateError(StateStoreError):
    """Base class of the distributed-mode errors."""


class ChangelogTopicMismatchError(KafkaStateError):
    """The changelog topic exists with a setting other than the store needs.

    ``setting`` is the topic setting (``partitions``, ``cleanup.policy``,
    ``delete.retention.ms``), ``expected`` what the store needs, ``actual`` what
    the broker reports.  Nothing was changed on the broker.
    """

    def __init__(self, topic: str, setting: str, expected: object, actual: object) -> None:
        super().__init__(
            f"changelog topic {topic!r}: {setting} is {actual!r}, the store needs {expected!r}"
            " (delete or fix the topic; it was left unchanged)"
        )
        self.topic = topic
        self.setting = setting
        self.expected = expected
        self.actual = actual


class CoPartitioningError(KafkaStateError):
    """Topics that must be co-partitioned have different partition counts (``partitions``)."""

    def __init__(self, partitions: Mapping[str, int]) -> None:
        listed = ", ".join(f"{topic}={count}" for topic, count in sorted(partitions.items()))
        super().__init__(f"topics are not co-partitioned (partition counts {listed})")
        self.partitions = dict(partitions)


class KafkaClientError(KafkaStateError):
    """A client call failed: ``operation`` and the librdkafka error (``code`` name, ``reason``)."""

    def __init__(self, operation: str, code: str, reason: str) -> None:
        super().__init__(f"{operation} failed: {code}: {reason}")
        self.operation = operation
        self.code = code
        self.reason = reason


class AuthorizationFailedError(KafkaClientError):
    """The broker refused the call: the principal lacks an ACL.

    ``code`` is Kafka's (``TOPIC_AUTHORIZATION_FAILED``, ``GROUP_AUTHORIZATION_FAILED``,
    ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``, ``CLUSTER_AUTHORIZATION_FAILED``) and
    ``operation`` names the call and its resource.  Raised at start, it leaves the broker
    unchanged (docs/scale-out.md lists the ACLs the runtime needs).
    """


def client_error(operation: str, code: str, reason: str) -> KafkaClientError:
    """The :class:`KafkaClientError` for a failed call: :class:`AuthorizationFailedError` when
    ``code`` is one of Kafka's authorization errors."""
    if code.endswith("_AUTHORIZATION_FAILED"):
        return AuthorizationFailedError(operation, code, reason)
    return KafkaClientError(operation, code, reason)


class TransactionAbortedError(KafkaClientError):
    """A commit failed and its transaction was aborted.

    Nothing of it is visible to ``read_committed`` readers, RocksDB was not
    touched, the buffered writes were dropped and the inputs were rewound to
    the last committed offsets: processing resumes from there.
    """


class ProducerFencedError(KafkaClientError):
    """The transactional producer was fenced (a newer producer epoch exists) or hit a fatal error.

    The process must drop its buffers, close its tasks without committing and
    start a new producer (the runtime does so).
    """


class BrokerRestoreError(KafkaStateError):
    """Restoring ``topic``-``partition`` stopped at ``offset``: ``reason``."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(f"restore of {topic}-{partition} stopped at offset {offset}: {reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason


class FatalCommitError(KafkaClientError):
    """Commits failed in a way that will not heal: the processor stopped.

    ``attempts`` commits in a row failed (or one failed with an error that no
    retry can fix: authorization, an unknown topic, a fatal producer error);
    ``code`` and ``reason`` are the last one's.  Nothing of the failed
    transactions is visible to ``read_committed`` readers and RocksDB holds
    only what committed before.  (A local store's commit that the changelog refused is
    :class:`statestore.errors.CommitFailedError`; the names differ so that one ``except``
    names one failure.)
    """

    def __init__(self, operation: str, code: str, reason: str, attempts: int) -> None:
        super().__init__(operation, code, f"{reason} (after {attempts} attempts)")
        self.attempts = attempts


class ProcessingError(KafkaStateError):
    """``process()`` raised on the record at ``topic``-``partition``@``offset``.

    The user's exception is the ``__cause__``.  The open transaction of every
    task was abandoned (buffers dropped, inputs rewound to the committed
    offsets): nothing of it was committed, and a later :meth:`poll_once`
    processes the same records again, the failing one included.
    """

    def __init__(self, topic: str, partition: int, offset: int, cause: BaseException) -> None:
        super().__init__(
            f"process() failed on {topic}-{partition}@{offset}: {type(cause).__name__}: {cause}"
            " (the transaction was abandoned, inputs rewound to the committed offsets)"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset


class UserCallbackError(KafkaStateError):
    """A callback of the application raised, or returned what it may not.

    ``callback`` names it: ``on_commit``, ``on_restored``, ``on_rebalance`` (as
    :class:`RebalanceListenerError`) or ``processing_exception_handler``; the
    user's exception, if any, is the ``__cause__``.  As for anything that leaves
    :meth:`~statestore.kafka.Processor.poll_once`, the open transaction of every
    task was abandoned first and the inputs rewound to the committed offsets, so
    a later ``poll_once`` goes on with nothing lost and nothing applied twice.
    What the runtime had done before it called back stays done (an ``on_commit``
    follows a commit that stays committed).
    """

    def __init__(self, callback: str, detail: str) -> None:
        super().__init__(
            f"{callback} {detail} (the open transaction was abandoned, inputs rewound to the"
            " committed offsets)"
        )
        self.callback = callback


class RebalanceListenerError(UserCallbackError):
    """The ``on_rebalance`` callback raised on an ``kind`` event (``assigned``, ``revoked``,
    ``lost``) of ``partitions``.

    The runtime had handled the change before it called back (a revoke's commit
    and close, an assignment's new tasks).  The callback ran inside the
    consumer's poll, which drops the records it fetched when a callback raises;
    the rewind of :class:`UserCallbackError` replays them.
    """

    def __init__(self, kind: str, partitions: tuple[int, ...], cause: BaseException) -> None:
        super().__init__(
            "on_rebalance",
            f"raised on {kind} partitions {list(partitions)} (the change was handled):"
            f" {type(cause).__name__}: {cause}",
        )
        self.kind = kind
        self.partitions = partitions


class ProcessorFailedError(KafkaStateError):
    """The processor stopped on ``error`` earlier; ``operation`` is refused.  Only ``close()`` works."""

    def __init__(self, operation: str, error: BaseException) -> None:
        super().__init__(f"{operation} refused: the processor stopped on {error!r}")
        self.operation = operation
        self.error = error


class IllegalTaskStateError(KafkaStateError):
    """Task ``partition`` in ``state`` was asked to move to ``target``, which is not legal."""

    def __init__(self, partition: int, state: str, target: str) -> None:
        super().__init__(f"task {partition}: no move from {state} to {target}")
        self.partition = partition
        self.state = state
        self.target = target


class NotOwnerError(KafkaStateError):
    """A query for ``store`` partition ``partition`` that this process does not serve.

    ``active`` is the active owner's endpoint (a ``HostInfo``) as this process's
    last view of the group names it (``None``: no owner in the view, a
    rebalance is moving the partition, or no view yet); ``standbys`` the
    endpoints that keep standbys of it; ``reason`` says why this process
    refused.  Ask ``active`` (and refresh the metadata if it refuses too).
    """

    def __init__(
        self,
        store: str,
        partition: int | None,
        active: object | None,
        standbys: Sequence[object],
        reason: str,
    ) -> None:
        where = "" if partition is None else f" partition {partition}"
        owner = "no active owner known" if active is None else f"active owner {active}"
        super().__init__(f"store {store!r}{where}: {reason}; {owner}")
        self.store = store
        self.partition = partition
        self.active = active
        self.standbys = tuple(standbys)
        self.reason = reason


class StandbyTooStaleError(NotOwnerError):
    """The standby here is outside the caller's bound: ``lag_records`` behind the changelog's
    end (bound ``max_lag_records``), last caught up ``staleness_ms`` ago (bound
    ``max_staleness_ms``; ``None``: never caught up).  Ask ``active``."""

    def __init__(
        self,
        store: str,
        partition: int,
        active: object | None,
        standbys: Sequence[object],
        *,
        lag_records: int,
        staleness_ms: int | None,
        max_lag_records: int | None,
        max_staleness_ms: int | None,
    ) -> None:
        super().__init__(
            store,
            partition,
            active,
            standbys,
            f"the standby here is {lag_records} records behind (bound {max_lag_records}),"
            f" last caught up {staleness_ms} ms ago (bound {max_staleness_ms})",
        )
        self.lag_records = lag_records
        self.staleness_ms = staleness_ms
        self.max_lag_records = max_lag_records
        self.max_staleness_ms = max_staleness_ms


class UnknownStorePartitionError(KafkaStateError):
    """A query named ``store`` (and ``partition``) that the processor does not have: ``stores``
    are the store names it has, ``partitions`` their partition count (``None``: not known yet)."""

    def __init__(
        self, store: str, partition: int | None, stores: Sequence[str], partitions: int | None
    ) -> None:
        if store not in stores:
            what = f"no store named {store!r} (stores: {', '.join(sorted(stores))})"
        else:
            what = f"store {store!r} has no partition {partition} (partitions: {partitions})"
        super().__init__(what)
        self.store = store
        self.partition = partition
        self.stores = tuple(sorted(stores))
        self.partitions = partitions
