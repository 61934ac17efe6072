"""Configuration of the distributed mode: changelog topics and the processor runtime.

Frozen, keyword-only attrs classes, units in the names, Kafka's setting names
in the docstrings; nonsense is rejected at construction with
:class:`~statestore.errors.InvalidStoreConfigError`.  docs/scale-out.md lists
every setting and the librdkafka properties the runtime sets, and why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import attrs

from statestore.config import RocksDBConfig
from statestore.errors import InvalidStoreConfigError
from statestore.kafka.endpoint import HostInfo
from statestore.kafka.security import SecurityConfig
from statestore.stores.time.settings import ADDITIONAL_RETENTION_MS, TimeSettings


def _names(values: Iterable[str]) -> tuple[str, ...]:
    """A converter: topic names as a tuple (typed, unlike ``tuple``, for the checkers)."""
    return tuple(values)


def _properties(values: Mapping[str, str]) -> dict[str, str]:
    """A converter: librdkafka properties as a dict of their own."""
    return dict(values)


__all__ = ["ChangelogTopicConfig", "GroupProtocol", "ProcessingGuarantee", "ProcessorConfig"]

ProcessingGuarantee = Literal["exactly_once_v2", "at_least_once"]
GroupProtocol = Literal["consumer", "classic"]

LONG_MAX: Final = 2**63 - 1
"""Java's ``Long.MAX_VALUE``: "no limit" in a topic's millisecond settings."""
TIMESTAMP_AFTER_MAX: Final = "message.timestamp.after.max.ms"
_UNLIMITED: Final[int | None] = LONG_MAX  # typed for the attrs field that defaults to it

_GUARANTEES: Final = frozenset({"exactly_once_v2", "at_least_once"})
_PROTOCOLS: Final = frozenset({"consumer", "classic"})


def _at_least(minimum: int) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidStoreConfigError(attribute.name, value, "must be an integer")
        if value < minimum:
            raise InvalidStoreConfigError(attribute.name, value, f"must be >= {minimum}")

    return check


def _one_of(choices: frozenset[str]) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in choices:
            raise InvalidStoreConfigError(
                attribute.name, value, f"must be one of {', '.join(sorted(choices))}"
            )

    return check


def _name(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidStoreConfigError(attribute.name, value, "must be a non-empty string")
    bad = [c for c in value if not (c.isascii() and (c.isalnum() or c in "._-"))]
    if bad:
        raise InvalidStoreConfigError(
            attribute.name, value, "may hold only ASCII letters, digits, '.', '_' and '-'"
        )


def _endpoint(_instance: object, _attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        HostInfo.parse(value)


def _topics(_instance: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if not value:
        raise InvalidStoreConfigError(attribute.name, value, "needs at least one topic")
    for topic in value:
        _name(_instance, attribute, topic)


@attrs.frozen(kw_only=True)
class ChangelogTopicConfig:
    """Settings of the changelog topic ``<application_id>-<store>-changelog`` of every store.

    The topic is created with these (``cleanup.policy=compact``) or, if it
    exists, validated: its partition count, ``cleanup.policy`` and
    ``delete.retention.ms`` must match, or the open is refused with
    :class:`~statestore.kafka.ChangelogTopicMismatchError`.
    """

    delete_retention_ms: int = attrs.field(default=86_400_000, validator=_at_least(0))
    """``delete.retention.ms``: how long the broker keeps tombstones; local state older
    than this restores fully (the broker's cleaner has no cleaning barrier)."""
    segment_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=_at_least(14))
    """``segment.bytes`` (only at creation; not validated)."""
    min_cleanable_dirty_ratio: float = attrs.field(default=0.5)
    """``min.cleanable.dirty.ratio`` (only at creation)."""
    replication_factor: int = attrs.field(default=1, validator=_at_least(1))
    """Replicas of each partition (at creation).  Production clusters want 3."""
    staleness_margin_ms: int = attrs.field(default=60_000, validator=_at_least(0))
    """Safety margin: local state older than ``delete_retention_ms - staleness_margin_ms``
    is treated as stale (clock skew, cleaner timing)."""
    message_timestamp_after_max_ms: int | None = attrs.field(
        default=_UNLIMITED, validator=attrs.validators.optional(_at_least(0))
    )
    """``message.timestamp.after.max.ms`` of the changelog topic of a store whose records carry
    their own time (timestamped, window, session, versioned), at creation: how far ahead of
    the broker's clock a record's timestamp may be.  The broker's default (one hour since
    Kafka 4.0) would refuse a store's record for an event time that far ahead, failing every
    commit that holds it; the default here (the largest long, Kafka's own default before
    4.0) takes any.  ``None``: not set (for brokers older than 3.6, which do not know it).
    Not validated on an existing topic; a lower value there is named in a warning at start."""

    @min_cleanable_dirty_ratio.validator
    def _check_ratio(self, attribute: attrs.Attribute[float], value: float) -> None:
        if not 0 < value <= 1:
            raise InvalidStoreConfigError(attribute.name, value, "must be in (0, 1]")

    def topic_configs(self, time: TimeSettings | None = None) -> dict[str, str]:
        """The topic settings used at creation, Kafka's names and spelling.

        ``time`` (a store in time) adds what Kafka Streams' changelog topic of
        that store type has (:meth:`required_configs`), and
        :attr:`message_timestamp_after_max_ms` (its records carry their own time).
        """
        configs = {
            "cleanup.policy": "compact",
            "delete.retention.ms": str(self.delete_retention_ms),
            "segment.bytes": str(self.segment_bytes),
            "min.cleanable.dirty.ratio": str(self.min_cleanable_dirty_ratio),
            **self.required_configs(time),
        }
        if time is not None and self.message_timestamp_after_max_ms is not None:
            configs[TIMESTAMP_AFTER_MAX] = str(self.message_timestamp_after_max_ms)
        return configs

    @staticmethod
    def required_configs(time: TimeSettings | None) -> dict[str, str]:
        """What a store type needs of its topic, as Kafka Streams' ``InternalTopicConfig`` s.

        * key-value and timestamped key-value: nothing beyond ``compact``;
        * window and session (``WindowedChangelogTopicConfig``):
          ``cleanup.policy=compact,delete`` and ``retention.ms`` = the store's
          retention + one day (``windowstore.changelog.additional.retention.ms``);
        * versioned (``VersionedChangelogTopicConfig``): ``min.compaction.lag.ms``
          = history retention + one day, so the broker's cleaner keeps the
          history a restore needs.
        """
        if time is None or not time.segmented:
            return {}
        extra = str(time.retention_ms + ADDITIONAL_RETENTION_MS)
        if time.store_type == "versioned-key-value":
            return {"min.compaction.lag.ms": extra}
        return {"cleanup.policy": "compact,delete", "retention.ms": extra}


@attrs.frozen(kw_only=True)
class ProcessorConfig:
    """The processor runtime: a consumer group over ``input_topics``, stores per partition.

    Invariant: ``transaction_timeout_ms`` is larger than ``commit_interval_ms``
    (a commit must be able to finish inside a transaction's lifetime).
    """

    application_id: str = attrs.field(validator=_name)
    """``application.id``: the consumer group id, and the prefix of every changelog topic."""
    bootstrap_servers: str = attrs.field(validator=attrs.validators.instance_of(str))
    """``bootstrap.servers`` of the cluster."""
    input_topics: tuple[str, ...] = attrs.field(converter=_names, validator=_topics)
    """Source topics; they must be co-partitioned (same partition count)."""
    instance_id: str = attrs.field(validator=_name)
    """This process's stable name: the ``transactional.id`` is ``<application_id>-<instance_id>``,
    so a restarted process fences its own predecessor."""
    static_membership: bool = attrs.field(
        default=False, validator=attrs.validators.instance_of(bool)
    )
    """``group.instance.id = instance_id`` (KIP-345): a restarted instance gets its partitions
    back without a rebalance within the session timeout, and a second process with the same
    ``instance_id`` is refused by the broker.  A clean shutdown then keeps the partitions
    until the session timeout (librdkafka leaves a static member's group only temporarily)."""
    static_rejoin_timeout_ms: int = attrs.field(default=60_000, validator=_at_least(0))
    """With static membership: how long a starting process keeps joining while the broker
    still holds its ``instance_id`` for a dead predecessor (until that member's session
    timeout, 45 s by default); still refused after this, it is a real duplicate."""
    processing_guarantee: ProcessingGuarantee = attrs.field(
        default="exactly_once_v2", validator=_one_of(_GUARANTEES)
    )
    """``processing.guarantee``: Kafka transactions (KIP-447) or at-least-once."""
    group_protocol: GroupProtocol = attrs.field(default="consumer", validator=_one_of(_PROTOCOLS))
    """``group.protocol``: ``consumer`` (KIP-848, Kafka >= 4.0, server-side ``range``
    assignor) or ``classic`` (eager ``range``, for 3.x clusters)."""
    commit_interval_ms: int = attrs.field(default=1000, validator=_at_least(1))
    """``commit.interval.ms``: how often the pending work is committed."""
    commit_every_records: int = attrs.field(default=10_000, validator=_at_least(1))
    """Commit early after this many processed input records."""
    commit_attempts: int = attrs.field(default=5, validator=_at_least(1))
    """Commits that may fail in a row before the processor stops with ``FatalCommitError``
    (a failure that cannot heal, such as an authorization error, stops it at once)."""
    commit_retry_backoff_ms: int = attrs.field(default=100, validator=_at_least(0))
    """Wait before the commit after a failed one, doubled per failure in a row."""
    commit_retry_backoff_max_ms: int = attrs.field(default=5000, validator=_at_least(0))
    """The most the wait after failed commits grows to."""
    stuck_call_grace_ms: int = attrs.field(default=10_000, validator=_at_least(0))
    """How long past its own timeout a commit's ``send_offsets_to_transaction`` may block
    before the commit gives up on it and on its producer (librdkafka can ignore that
    timeout while the group coordinator is away); the producer is then replaced."""
    transaction_timeout_ms: int = attrs.field(default=10_000, validator=_at_least(1000))
    """``transaction.timeout.ms``: how long a dead process's open transaction blocks
    ``read_committed`` readers of its partitions (Kafka Streams uses 10 s under EOS)."""
    session_timeout_ms: int = attrs.field(default=10_000, validator=_at_least(1000))
    """``session.timeout.ms`` (classic protocol; KIP-848 takes it from the broker)."""
    max_poll_interval_ms: int = attrs.field(default=300_000, validator=_at_least(1000))
    """``max.poll.interval.ms``; revoke commits within a third of it."""
    poll_records: int = attrs.field(default=500, validator=_at_least(1))
    """Records per ``consume()`` call of the main loop."""
    restore_batch_bytes: int = attrs.field(default=4 * 1024 * 1024, validator=_at_least(1))
    """Key and value bytes per RocksDB WriteBatch during restore (each partition its own)."""
    restore_timeout_ms: int = attrs.field(default=120_000, validator=_at_least(1))
    """A restore that makes no progress for this long fails."""
    num_standby_replicas: int = attrs.field(default=0, validator=_at_least(0))
    """``num.standby.replicas``: warm copies of each store partition kept by other members
    (placement derived from the group membership; see :mod:`statestore.kafka.standby`)."""
    standby_refresh_ms: int = attrs.field(default=2000, validator=_at_least(100))
    """How often the group membership is read to place standbys."""
    warmup_before_join: bool = attrs.field(default=False)
    """KIP-441's warm-up as far as librdkafka allows (its assignors cannot be told where state
    is warm): before joining the group, keep a standby of every partition until each is within
    ``acceptable_recovery_lag`` of its changelog's end (or ``warmup_timeout_ms`` passed), so
    the partitions the group then hands this member restore only a tail."""
    acceptable_recovery_lag: int = attrs.field(default=10_000, validator=_at_least(0))
    """``acceptable.recovery.lag``: offsets behind the changelog's end at which a warm-up
    counts a standby as caught up."""
    warmup_timeout_ms: int = attrs.field(default=600_000, validator=_at_least(1))
    """How long a warm-up may take before the member joins anyway."""
    application_server: str | None = attrs.field(default=None, validator=_endpoint)
    """``application.server``: this instance's ``host:port`` for interactive queries, advertised
    to the other members in the main consumer's ``client.id``
    (:mod:`statestore.kafka.query`).  ``None``: this instance advertises no endpoint."""
    query_metadata_refresh_ms: int = attrs.field(default=1000, validator=_at_least(100))
    """How often the group is described for ``metadata_for_key`` (one admin request)."""
    output_topics: tuple[str, ...] = attrs.field(
        default=(), converter=_names, validator=attrs.validators.deep_iterable(_name)
    )
    """Topics ``context.send`` writes to, checked to exist at start (the runtime never
    creates them; a topic missing at commit time fails the commit)."""
    dead_letter_queue_topic: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(_name)
    )
    """``errors.deadletterqueue.topic.name`` (KIP-1034): where records skipped by the
    processing exception handler are written, in the same transaction; the topic must
    exist (it is checked at start).  ``None``: skipped records are only counted."""
    changelog: ChangelogTopicConfig = attrs.field(factory=ChangelogTopicConfig)
    """Settings of the changelog topics."""
    rocksdb: RocksDBConfig = attrs.field(factory=RocksDBConfig)
    """RocksDB options of every store partition."""
    security: SecurityConfig = attrs.field(
        factory=SecurityConfig, validator=attrs.validators.instance_of(SecurityConfig)
    )
    """``security.protocol``, SASL and TLS settings of every client the runtime makes (admin,
    producer, main, restore and standby consumers); secrets are masked in the repr."""
    client_overrides: Mapping[str, str] = attrs.field(
        factory=dict, converter=_properties, repr=False
    )
    """librdkafka properties for every client the runtime makes (admin, consumers, producer),
    applied after ``security`` and before the runtime's own (for settings ``security`` does not
    name, such as ``sasl.oauthbearer.*``).  Left out of the config's ``repr`` (it may hold
    secrets)."""
    consumer_overrides: Mapping[str, str] = attrs.field(
        factory=dict, converter=_properties, repr=False
    )
    """librdkafka properties for the consumers, applied last.  Left out of the ``repr``."""
    producer_overrides: Mapping[str, str] = attrs.field(
        factory=dict, converter=_properties, repr=False
    )
    """librdkafka properties for the producer, applied last.  Left out of the ``repr``."""

    def __attrs_post_init__(self) -> None:
        if self.transaction_timeout_ms <= self.commit_interval_ms:
            raise InvalidStoreConfigError(
                "transaction_timeout_ms",
                self.transaction_timeout_ms,
                f"must exceed commit_interval_ms ({self.commit_interval_ms})",
            )

    @property
    def transactional_id(self) -> str:
        """``transactional.id`` of this process's producer."""
        return f"{self.application_id}-{self.instance_id}"
