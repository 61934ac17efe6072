"""Changelog topics on the broker: naming, creation, validation, co-partitioning, watermarks.

A store ``S`` of application ``A`` logs to the compacted topic
``A-S-changelog`` (Kafka Streams' naming), one partition per input partition.
If the topic exists it is *validated*, never altered: partition count,
``cleanup.policy`` (must contain ``compact``) and ``delete.retention.ms`` must
match the store's settings, or :class:`ChangelogTopicMismatchError` is raised.
A store in time adds Kafka Streams' own checks (``InternalTopicManager``):

======================  =====================================================
store type              the existing topic must have
======================  =====================================================
key-value, timestamped  nothing more (``compact,delete`` is accepted as is)
window, session         with ``delete`` in ``cleanup.policy``: ``retention.ms``
                        at least the store's retention + one day (``-1``,
                        infinite, passes) and no ``retention.bytes``
versioned               no ``delete`` in ``cleanup.policy``;
                        ``min.compaction.lag.ms`` at least the history
                        retention + one day
======================  =====================================================

A store in time's topic is created with ``message.timestamp.after.max.ms`` =
:attr:`ChangelogTopicConfig.message_timestamp_after_max_ms` (no limit by default):
its records carry the store's own timestamps, which a broker of Kafka 4 would
refuse more than an hour ahead of its clock.  An existing topic with a lower
limit is accepted, with a warning naming the command that raises it.

The topic id (Kafka's UUID of a topic, new on every re-creation) is read so
that a restore can tell a recreated topic from the one its local state came
from, even when the new topic has grown past the old offsets.

Thread-safety: functions are thread-safe (the AdminClient is).
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from statestore.kafka.config import TIMESTAMP_AFTER_MAX, ChangelogTopicConfig
from statestore.kafka.errors import (
    AuthorizationFailedError,
    ChangelogTopicMismatchError,
    CoPartitioningError,
    KafkaClientError,
    client_error,
)
from statestore.stores.time.settings import TimeSettings

__all__ = [
    "TopicInfo",
    "changelog_topic_name",
    "check_copartitioned",
    "check_group_rights",
    "check_topic_rights",
    "ensure_changelog_topic",
    "ensure_changelog_topics",
    "partition_counts",
    "request_end_offsets",
    "topic_info",
    "validate_changelog_topic",
    "watermarks",
]

logger = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class TopicInfo:
    """A topic as the broker describes it.  Immutable."""

    name: str
    partitions: int
    topic_id: str
    """Kafka's topic UUID (base64 text); changes when the topic is recreated."""


def changelog_topic_name(application_id: str, store: str) -> str:
    """``<application_id>-<store>-changelog``, as Kafka Streams names it."""
    return f"{application_id}-{store}-changelog"


def _admin_api() -> Any:
    """``confluent_kafka.admin`` (optional dependency, imported on first use)."""
    return importlib.import_module("confluent_kafka.admin")


def _wrap(operation: str, exc: Exception) -> KafkaClientError:
    error: Any = exc.args[0] if exc.args else None
    if hasattr(error, "name") and hasattr(error, "str"):
        return client_error(operation, error.name(), error.str())
    return KafkaClientError(operation, type(exc).__name__, str(exc))


def partition_counts(admin: Any, topics: Iterable[str], *, timeout_s: float = 30) -> dict[str, int]:
    """Partition count of each topic (a missing topic is a :class:`KafkaClientError`)."""
    wanted = list(topics)
    deadline = time.monotonic() + min(timeout_s, 5)  # metadata of a topic just created
    while True:
        try:
            metadata = admin.list_topics(timeout=timeout_s)
        except Exception as exc:
            raise _wrap("list topics", exc) from exc
        counts: dict[str, int] = {}
        missing: KafkaClientError | None = None
        for topic in wanted:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None:
                _raise_if_unauthorized(admin, topic, timeout_s)  # no retry heals a missing ACL
                reason = "unknown topic" if found is None else str(found.error)
                missing = KafkaClientError(
                    f"describe topic {topic!r}", "UNKNOWN_TOPIC_OR_PART", reason
                )
                break
            counts[topic] = len(found.partitions)
        if missing is None:
            return counts
        if time.monotonic() > deadline:
            raise missing
        time.sleep(0.1)


def _raise_if_unauthorized(admin: Any, topic: str, timeout_s: float) -> None:
    """Raise :class:`AuthorizationFailedError` if ``topic`` is hidden from us by an ACL.

    A full metadata listing leaves out the topics the principal may not describe;
    asked by name, the broker answers ``TOPIC_AUTHORIZATION_FAILED`` instead.
    """
    from confluent_kafka import TopicCollection  # noqa: PLC0415 - optional dependency

    try:
        future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)
        future[topic].result(timeout=timeout_s)
    except Exception as exc:  # only an authorization error is of interest here
        error = _wrap(f"describe topic {topic!r}", exc)
        if isinstance(error, AuthorizationFailedError):
            raise error from exc


def check_topic_rights(
    admin: Any, operations: Mapping[str, Sequence[str]], *, timeout_s: float = 30
) -> None:
    """Raise :class:`AuthorizationFailedError` unless the principal may do each operation.

    ``operations`` maps existing topics to what the runtime does there (``"read"``,
    ``"write"``); the broker's authorized
    operations of each topic (KIP-430) are compared.  A client or broker that reports
    none (``None``) is not checked here: the call itself fails later.
    """
    from confluent_kafka import TopicCollection  # noqa: PLC0415 - optional dependency

    acl_operation = _admin_api().AclOperation
    names = list(operations)
    if not names:
        return
    try:
        futures = admin.describe_topics(
            TopicCollection(names), request_timeout=timeout_s, include_authorized_operations=True
        )
        described = {name: futures[name].result(timeout=timeout_s) for name in names}
    except Exception as exc:
        raise _wrap("describe topics", exc) from exc
    for name in names:
        allowed = getattr(described[name], "authorized_operations", None)
        if allowed is None:
            continue
        for verb in operations[name]:
            needed = acl_operation.READ if verb == "read" else acl_operation.WRITE
            if needed not in allowed and acl_operation.ALL not in allowed:
                raise AuthorizationFailedError(
                    f"{verb} topic {name!r}",
                    "TOPIC_AUTHORIZATION_FAILED",
                    f"the principal may not {verb} the topic (no {needed.name} ACL)",
                )


def check_group_rights(admin: Any, group: str, *, timeout_s: float = 30) -> None:
    """Raise :class:`AuthorizationFailedError` unless the principal may join ``group`` (READ).

    Without the ACL the consumer would wait for an assignment that never comes, silently.
    """
    acl_operation = _admin_api().AclOperation
    try:
        futures = admin.describe_consumer_groups(
            [group], request_timeout=timeout_s, include_authorized_operations=True
        )
        description = futures[group].result(timeout=timeout_s)
    except Exception as exc:
        error = _wrap(f"describe group {group!r}", exc)
        if isinstance(error, AuthorizationFailedError):
            raise error from exc
        return  # anything else is the join's to report
    allowed = getattr(description, "authorized_operations", None)
    if allowed is not None and not {acl_operation.READ, acl_operation.ALL} & set(allowed):
        raise AuthorizationFailedError(
            f"join group {group!r}",
            "GROUP_AUTHORIZATION_FAILED",
            "the principal may not read the group (no READ ACL)",
        )


def check_copartitioned(admin: Any, topics: Sequence[str], *, timeout_s: float = 30) -> int:
    """The common partition count of ``topics``, or :class:`CoPartitioningError`."""
    counts = partition_counts(admin, topics, timeout_s=timeout_s)
    if len(set(counts.values())) != 1:
        raise CoPartitioningError(counts)
    return next(iter(counts.values()))


def topic_info(admin: Any, topic: str, *, timeout_s: float = 30) -> TopicInfo:
    """Name, partition count and topic id of ``topic``."""
    from confluent_kafka import TopicCollection  # noqa: PLC0415 - optional dependency

    # Right after a create, the metadata may not have reached the broker we ask yet:
    # UNKNOWN_TOPIC_OR_PART is retried for a few seconds.
    deadline = time.monotonic() + min(timeout_s, 10)
    while True:
        try:
            future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)
            description = future[topic].result(timeout=timeout_s)
            break
        except Exception as exc:
            error = _wrap(f"describe topic {topic!r}", exc)
            if error.code != "UNKNOWN_TOPIC_OR_PART" or time.monotonic() > deadline:
                raise error from exc
            time.sleep(0.1)
    return TopicInfo(
        name=topic, partitions=len(description.partitions), topic_id=str(description.topic_id)
    )


def _topic_configs(admin: Any, topic: str, timeout_s: float) -> dict[str, str]:
    api = _admin_api()
    resource = api.ConfigResource(api.ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(
            timeout=timeout_s
        )
    except Exception as exc:
        raise _wrap(f"describe configs of {topic!r}", exc) from exc
    return {name: entry.value for name, entry in entries.items()}


def validate_changelog_topic(
    topic: str,
    *,
    partitions: int,
    actual_partitions: int,
    configs: Mapping[str, str | None],
    config: ChangelogTopicConfig,
    time: TimeSettings | None = None,
) -> None:
    """Raise :class:`ChangelogTopicMismatchError` unless the topic fits the store (pure check).

    ``time``: the store in time logging there (the module docstring's table).
    """
    if actual_partitions != partitions:
        raise ChangelogTopicMismatchError(topic, "partitions", partitions, actual_partitions)
    policy = configs.get("cleanup.policy") or ""
    policies = {part.strip() for part in policy.split(",")}
    if "compact" not in policies:
        raise ChangelogTopicMismatchError(topic, "cleanup.policy", "compact", policy)
    retention = configs.get("delete.retention.ms")
    if retention is None or int(retention) != config.delete_retention_ms:
        raise ChangelogTopicMismatchError(
            topic, "delete.retention.ms", config.delete_retention_ms, retention
        )
    required = ChangelogTopicConfig.required_configs(time)
    windowed = "retention.ms" in required
    if "delete" in policies and "min.compaction.lag.ms" in required:
        raise ChangelogTopicMismatchError(topic, "cleanup.policy", "compact", policy)
    if windowed and "delete" in policies:
        _at_least(topic, "retention.ms", int(required["retention.ms"]), configs, infinite=True)
        if configs.get("retention.bytes") not in (None, "-1"):
            raise ChangelogTopicMismatchError(
                topic, "retention.bytes", "-1", configs.get("retention.bytes")
            )
    if "min.compaction.lag.ms" in required:
        lag = int(required["min.compaction.lag.ms"])
        _at_least(topic, "min.compaction.lag.ms", lag, configs, infinite=False)


def _at_least(
    topic: str, name: str, minimum: int, configs: Mapping[str, str | None], *, infinite: bool
) -> None:
    """Raise unless the topic's ``name`` is ``>= minimum`` (or ``-1`` when that means infinite)."""
    actual = configs.get(name)
    value = None if actual is None else int(actual)
    if value is None or (value < minimum and not (infinite and value == -1)):
        raise ChangelogTopicMismatchError(topic, name, f">= {minimum}", actual)


def ensure_changelog_topic(
    admin: Any,
    topic: str,
    *,
    partitions: int,
    config: ChangelogTopicConfig,
    time: TimeSettings | None = None,
    timeout_s: float = 60,
) -> TopicInfo:
    """Create ``topic`` compacted with ``partitions`` partitions, or validate it if it exists.

    ``time``: the store in time logging there (its topic settings and checks).
    """
    from confluent_kafka import KafkaError  # noqa: PLC0415 - optional dependency

    new = _admin_api().NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=config.replication_factor,
        config=config.topic_configs(time),
    )
    try:
        admin.create_topics([new], request_timeout=timeout_s)[topic].result(timeout=timeout_s)
        logger.info("created changelog topic %s with %s partitions", topic, partitions)
    except Exception as exc:
        error = exc.args[0] if exc.args else None
        if getattr(error, "code", lambda: None)() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise _wrap(f"create topic {topic!r}", exc) from exc
    return _validated(
        admin, topic, partitions=partitions, config=config, time=time, timeout_s=timeout_s
    )


def ensure_changelog_topics(
    admin: Any,
    topics: Sequence[str],
    *,
    partitions: int,
    config: ChangelogTopicConfig,
    times: Mapping[str, TimeSettings | None] | None = None,
    timeout_s: float = 60,
) -> dict[str, TopicInfo]:
    """Validate every existing topic of ``topics`` first, then create the missing ones.

    ``times`` maps a topic to the store in time logging there (absent: key-value).

    A mismatch raises before anything is created: a refused start leaves the
    broker's topic list unchanged.  (A topic created meanwhile by another
    instance is validated like an existing one.)
    """
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception as exc:
        raise _wrap("list topics", exc) from exc
    existing = [
        topic
        for topic in topics
        if topic in metadata.topics and metadata.topics[topic].error is None
    ]
    times = times or {}
    infos: dict[str, TopicInfo] = {}
    for topic in existing:
        infos[topic] = _validated(
            admin,
            topic,
            partitions=partitions,
            config=config,
            time=times.get(topic),
            timeout_s=timeout_s,
        )
    for topic in topics:
        if topic not in infos:
            infos[topic] = ensure_changelog_topic(
                admin,
                topic,
                partitions=partitions,
                config=config,
                time=times.get(topic),
                timeout_s=timeout_s,
            )
    return infos


def _validated(
    admin: Any,
    topic: str,
    *,
    partitions: int,
    config: ChangelogTopicConfig,
    time: TimeSettings | None,
    timeout_s: float,
) -> TopicInfo:
    info = topic_info(admin, topic, timeout_s=timeout_s)
    configs = _topic_configs(admin, topic, timeout_s)
    validate_changelog_topic(
        topic,
        partitions=partitions,
        actual_partitions=info.partitions,
        configs=configs,
        config=config,
        time=time,
    )
    limit = configs.get(TIMESTAMP_AFTER_MAX)
    wanted = config.message_timestamp_after_max_ms
    if time is not None and wanted is not None and limit is not None and int(limit) < wanted:
        logger.warning(
            "changelog topic %s has %s=%s: a record of the store whose timestamp is more than"
            " that ahead of the broker's clock fails every commit that holds it (raise it with"
            " kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config %s=%s)",
            topic,
            TIMESTAMP_AFTER_MAX,
            limit,
            topic,
            TIMESTAMP_AFTER_MAX,
            wanted,
        )
    return info


def watermarks(
    admin: Any, topic: str, partitions: Iterable[int], *, timeout_s: float = 30
) -> dict[int, tuple[int, int]]:
    """``partition -> (log start offset, high watermark)``, read_uncommitted.

    The high watermark, not the last stable offset: a restore waits until its
    position passes every record written so far, so a transaction left open by
    a dead owner ends (aborted by the coordinator after ``transaction.timeout.ms``)
    before the restore finishes.
    """
    from confluent_kafka import IsolationLevel, TopicPartition  # noqa: PLC0415

    offset_spec = _admin_api().OffsetSpec
    result: dict[int, list[int]] = {}
    for spec_index, spec in enumerate((offset_spec.earliest(), offset_spec.latest())):
        request = {TopicPartition(topic, p): spec for p in partitions}
        if not request:
            return {}
        try:
            futures = admin.list_offsets(
                request,
                isolation_level=IsolationLevel.READ_UNCOMMITTED,
                request_timeout=timeout_s,
            )
            for tp, future in futures.items():
                result.setdefault(tp.partition, [0, 0])[spec_index] = future.result(
                    timeout=timeout_s
                ).offset
        except Exception as exc:
            raise _wrap(f"list offsets of {topic!r}", exc) from exc
    return {p: (low, high) for p, (low, high) in result.items()}


def request_end_offsets(
    admin: Any, topic: str, partitions: Iterable[int], *, committed: bool
) -> dict[int, Any]:
    """``partition -> future`` of the partition's end: with ``committed``, the last stable
    offset (the end a ``read_committed`` reader can reach: every transaction committed before
    the request lies below it, an open one does not); without, the high watermark (every
    record acknowledged before the request lies below it, decided or not).  A future's result
    has ``.offset``; a failed request raises from ``result()``."""
    from confluent_kafka import IsolationLevel, TopicPartition  # noqa: PLC0415

    offset_spec = _admin_api().OffsetSpec
    request = {TopicPartition(topic, p): offset_spec.latest() for p in partitions}
    if not request:
        return {}
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=10)
    return {tp.partition: future for tp, future in futures.items()}
