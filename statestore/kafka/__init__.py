"""Distributed mode: the stores' changelogs on a Kafka cluster, partitions spread over processes.

Needs the optional extra ``statestore[kafka]`` (confluent-kafka); the local
mode never imports this package.  See docs/scale-out.md.

* :class:`Processor` consumes input topics in a consumer group (KIP-848
  ``range``, co-partitioned), keeps one :class:`TaskStore` per store and
  partition, restores it from ``<application_id>-<store>-changelog`` on
  assignment and commits changelog records, outputs and input offsets in one
  Kafka transaction per commit (``exactly_once_v2``) or at least once.
* :meth:`Processor.metadata_for_key` names the instance that owns a key and
  its standbys; :meth:`Processor.query` reads it here, the active owner always,
  a standby within the caller's lag bound (:mod:`statestore.kafka.query`).
* :func:`ensure_changelog_topic` creates or validates a changelog topic.
"""

from __future__ import annotations

from statestore.kafka.commit import CommitResult, OutputRecord
from statestore.kafka.config import ChangelogTopicConfig, ProcessorConfig
from statestore.kafka.endpoint import HostInfo
from statestore.kafka.errors import (
    AuthorizationFailedError,
    BrokerRestoreError,
    ChangelogTopicMismatchError,
    CoPartitioningError,
    FatalCommitError,
    IllegalTaskStateError,
    KafkaClientError,
    KafkaStateError,
    NotOwnerError,
    ProcessingError,
    ProcessorFailedError,
    ProducerFencedError,
    RebalanceListenerError,
    StandbyTooStaleError,
    TransactionAbortedError,
    UnknownStorePartitionError,
    UserCallbackError,
)
from statestore.kafka.handlers import (
    ProcessingErrorContext,
    ProcessingExceptionHandler,
    ProcessingResponse,
    log_and_continue,
    log_and_fail,
)
from statestore.kafka.processor import Processor, ProcessorContext, RebalanceEvent
from statestore.kafka.query import KeyQueryMetadata, LagInfo, QueryResult
from statestore.kafka.restorer import TaskRestored
from statestore.kafka.security import SecurityConfig
from statestore.kafka.store import KafkaStoreSpec, TaskStore
from statestore.kafka.tasks import TaskState
from statestore.kafka.topics import (
    TopicInfo,
    changelog_topic_name,
    check_copartitioned,
    ensure_changelog_topic,
)

__all__ = [
    "AuthorizationFailedError",
    "BrokerRestoreError",
    "ChangelogTopicConfig",
    "ChangelogTopicMismatchError",
    "CoPartitioningError",
    "CommitResult",
    "FatalCommitError",
    "HostInfo",
    "IllegalTaskStateError",
    "KafkaClientError",
    "KafkaStateError",
    "KafkaStoreSpec",
    "KeyQueryMetadata",
    "LagInfo",
    "NotOwnerError",
    "OutputRecord",
    "ProcessingError",
    "ProcessingErrorContext",
    "ProcessingExceptionHandler",
    "ProcessingResponse",
    "Processor",
    "ProcessorConfig",
    "ProcessorContext",
    "ProcessorFailedError",
    "ProducerFencedError",
    "QueryResult",
    "RebalanceEvent",
    "RebalanceListenerError",
    "SecurityConfig",
    "StandbyTooStaleError",
    "TaskRestored",
    "TaskState",
    "TaskStore",
    "TopicInfo",
    "TransactionAbortedError",
    "UnknownStorePartitionError",
    "UserCallbackError",
    "changelog_topic_name",
    "check_copartitioned",
    "ensure_changelog_topic",
    "log_and_continue",
    "log_and_fail",
]
