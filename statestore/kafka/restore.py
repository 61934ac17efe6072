"""Restore of one store partition from its changelog topic on the broker.

Where to start (:func:`plan_broker_restore`), on top of the local rules of
:func:`statestore.restore.plan_restore` (an applied offset outside
``[log start offset, high watermark]`` or data without an offset rebuilds):

* the topic id stored with the data differs from the topic's id now: the
  topic was deleted and recreated, so the stored offset means nothing even
  when it lies inside the new topic's range -> rebuild;
* the state was last known caught up (the applied time stored with the data)
  longer ago than ``delete.retention.ms - staleness_margin_ms``: the broker's
  cleaner may have dropped tombstones above the applied offset, and an
  incremental replay would resurrect deleted keys -> rebuild.  (Locally the
  cleaning barrier prevents this; a broker has none.)

How (:class:`RestoreSession`, one pass per :meth:`RestoreSession.step`): one
consumer, manually assigned *every* partition being restored at once
(``isolation.level=read_committed``, ``auto.offset.reset=error``: a vanished
offset is an error, never a silent jump), each at its start offset.  A step
consumes what the consumer has fetched for all of them (no fixed wait per
partition), appends each record to its partition's pending WriteBatch, writes
a WriteBatch once it holds ``batch_bytes`` of keys and values (with the
applied offset just past its last record, values never decoded; a store in
time's record gets its timestamp put back, :func:`statestore.stores.time.layout.restored_pairs`), and then
compares each partition's *position* with the end offset captured before the
restore (the high watermark).  The position, not the last record:
transaction markers and aborted records occupy offsets that a
``read_committed`` consumer never returns.  A partition whose position reached
its end gets its last WriteBatch (the records still pending, the end offset,
the topic id and the applied time) and is unassigned: finished.  RocksDB is
not flushed there: the broker is the source of truth, and with WAL off and
atomic flush every flush RocksDB makes on its own (or at close) persists the
data and the applied offset together, so a crash after a restore finds an
older consistent state and replays from there.  A partition whose
position does not move for ``stall_timeout_s`` fails with
:class:`BrokerRestoreError`.

:func:`restore_partition` is the one-partition session run to its end.

Thread-safety: a session is used by one thread (the restorer's); its consumer
and the engines of its partitions are used by nobody else meanwhile.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import Any, Final, Protocol, cast

from statestore.kafka.config import ChangelogTopicConfig
from statestore.kafka.errors import BrokerRestoreError
from statestore.stores.engine import RocksDBEngine
from statestore.stores.restore import RestorePlan, StateRestoreListener, plan_restore
from statestore.stores.time.layout import RecordFormat, restored_pairs

__all__ = [
    "APPLIED_TIME_KEY",
    "RESTORE_CONSUMER_SETTINGS",
    "TOPIC_ID_KEY",
    "PartitionReplay",
    "RestoreConsumer",
    "RestoreSession",
    "applied_meta",
    "plan_broker_restore",
    "restore_partition",
    "stored_applied_time_ms",
    "stored_topic_id",
]

logger = logging.getLogger(__name__)

TOPIC_ID_KEY: Final = b"kafka-changelog-topic-id"
"""Metadata key: the changelog topic's id (UTF-8 text) the data came from."""
APPLIED_TIME_KEY: Final = b"kafka-applied-time-ms"
"""Metadata key: 8-byte big-endian wall-clock ms when the data was last caught up."""
_TIME: Final = struct.Struct(">q")

RESTORE_CONSUMER_SETTINGS: Final = {
    "enable.auto.commit": "false",
    # a vanished offset is an error, never a silent jump
    "auto.offset.reset": "error",
    "isolation.level": "read_committed",
    # librdkafka's 1 s default stalls bulk reads (docs/scale-out.md)
    "fetch.queue.backoff.ms": "10",
    # Partitions join the restore consumer one task at a time; a partition joining
    # while a fetch waits at the end of the others (500 ms by default) waited for it.
    "fetch.wait.max.ms": "10",
    # One partition's fetch is capped by this (1 MB by default): a restore of one big
    # partition made a round trip per ~7k records (100k records: 1.27 -> 1.01 s).
    "max.partition.fetch.bytes": str(8 * 1024 * 1024),
}
"""librdkafka settings of a restore consumer (besides the client's and ``group.id``)."""


class RestoreConsumer(Protocol):
    """What a restore needs of a consumer (confluent-kafka's ``Consumer`` has it)."""

    def incremental_assign(self, partitions: list[Any]) -> None:
        """Add these partitions (with their start offsets) to the assignment."""

    def incremental_unassign(self, partitions: list[Any]) -> None:
        """Remove these partitions from the assignment."""

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        """Up to ``num_messages`` messages."""
        ...

    def position(self, partitions: list[Any]) -> list[Any]:
        """The next offset to fetch per partition."""
        ...

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """The cluster's metadata for ``topic`` (it fills the client's metadata cache)."""
        ...


def applied_meta(topic_id: str, now_ms: int) -> dict[bytes, bytes]:
    """The metadata written with the data: topic id and applied time."""
    return {TOPIC_ID_KEY: topic_id.encode(), APPLIED_TIME_KEY: _TIME.pack(now_ms)}


def stored_topic_id(engine: RocksDBEngine) -> str | None:
    """The topic id stored with the data (``None``: never written)."""
    raw = engine.meta(TOPIC_ID_KEY)
    return None if raw is None else raw.decode()


def stored_applied_time_ms(engine: RocksDBEngine) -> int | None:
    """The applied time stored with the data (``None``: never written)."""
    raw = engine.meta(APPLIED_TIME_KEY)
    return None if raw is None or len(raw) != _TIME.size else int(_TIME.unpack(raw)[0])


def plan_broker_restore(
    *,
    applied_offset: int | None,
    has_data: bool,
    stored_topic: str | None,
    applied_time_ms: int | None,
    topic_id: str,
    log_start_offset: int,
    high_watermark: int,
    now_ms: int,
    config: ChangelogTopicConfig,
) -> RestorePlan:
    """Where to start replaying the changelog topic, and whether to wipe RocksDB first."""
    if applied_offset is not None or has_data:
        if stored_topic is not None and stored_topic != topic_id:
            return RestorePlan(
                mode="full",
                start_offset=log_start_offset,
                rebuild=True,
                reason=f"the changelog topic was recreated (topic id {stored_topic} -> {topic_id})",
            )
        horizon = config.delete_retention_ms - config.staleness_margin_ms
        if applied_time_ms is None or now_ms - applied_time_ms > horizon:
            age = "unknown" if applied_time_ms is None else f"{now_ms - applied_time_ms} ms"
            return RestorePlan(
                mode="full",
                start_offset=log_start_offset,
                rebuild=True,
                reason=(
                    f"local state is stale (age {age}, delete.retention.ms "
                    f"{config.delete_retention_ms} minus margin {config.staleness_margin_ms}):"
                    " tombstones may be gone from the topic"
                ),
            )
    return plan_restore(
        "incremental",
        applied_offset=applied_offset,
        has_data=has_data,
        log_start_offset=log_start_offset,
        log_end_offset=high_watermark,
    )


class PartitionReplay:
    """One changelog partition being replayed into one engine: where it is, what is pending.

    Invariants: ``pending`` holds the records read since the last WriteBatch
    (``pending_bytes`` their key and value bytes), all below ``end_offset``;
    ``position`` is the consumer's position last seen (the next offset).
    """

    def __init__(
        self,
        *,
        store: str,
        topic: str,
        partition: int,
        topic_id: str,
        engine: RocksDBEngine,
        start_offset: int,
        end_offset: int,
        record_format: RecordFormat = "plain",
        expiry_cutoff_ms: int | None = None,
    ) -> None:
        self.store = store
        self.record_format = record_format
        """How records map to RocksDB entries (a store in time puts the record's timestamp back)."""
        self.expiry_cutoff_ms = expiry_cutoff_ms
        """A store with a TTL: a value stamped at or before this is applied as a delete (as in
        local mode, :func:`statestore.stores.time.layout.restored_pairs`)."""
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.engine = engine
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.position = start_offset
        self.progress_at = 0.0
        self.pending: list[tuple[bytes, bytes | None]] = []
        self.pending_bytes = 0
        self.last_offset = start_offset - 1
        self.restored = 0

    @property
    def key(self) -> tuple[str, int]:
        """``(topic, partition)``."""
        return (self.topic, self.partition)


class RestoreSession:
    """Replays many changelog partitions at once with one consumer (module docstring).

    Invariants: the consumer is assigned exactly the partitions in ``_active``.
    Not thread-safe: one thread drives it.
    """

    def __init__(
        self,
        consumer: RestoreConsumer,
        *,
        batch_bytes: int,
        fetch_records: int = 10_000,
        stall_timeout_s: float,
        listener: StateRestoreListener | None = None,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumer = consumer
        self._batch_bytes = batch_bytes
        self._fetch_records = fetch_records
        self._stall_timeout_s = stall_timeout_s
        self._listener = listener
        self._wall_clock_ms = wall_clock_ms
        self._clock = clock
        self._active: dict[tuple[str, int], PartitionReplay] = {}
        self._known_topics: set[str] = set()
        self._restored_total = 0

    @property
    def active(self) -> int:
        """Partitions being replayed."""
        return len(self._active)

    def add(self, replays: list[PartitionReplay]) -> list[PartitionReplay]:
        """Start replaying ``replays``; those with nothing to replay finish at once (returned)."""
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        finished: list[PartitionReplay] = []
        assign: list[Any] = []
        now = self._clock()
        for replay in replays:
            if self._listener is not None:
                self._listener.on_restore_start(
                    replay.store, replay.partition, replay.start_offset, replay.end_offset
                )
            if replay.start_offset >= replay.end_offset:
                self._finish(replay)
                finished.append(replay)
                continue
            replay.progress_at = now
            self._active[replay.key] = replay
            assign.append(TopicPartition(replay.topic, replay.partition, replay.start_offset))
        if assign:
            self._know_topics({tp.topic for tp in assign})
            self._consumer.incremental_assign(assign)
        return finished

    def progress(self) -> tuple[int, int]:
        """``(records written to RocksDB so far, offsets left to the end offsets)``.

        Safe from another thread (a snapshot of the partitions being replayed).
        """
        replays = list(self._active.values())
        remaining = sum(max(0, r.end_offset - r.position) for r in replays)
        return self._restored_total, remaining

    def _know_topics(self, topics: set[str]) -> None:
        """Ask the consumer for the metadata of topics it has not assigned yet, before assigning.

        librdkafka asks for a new topic's leaders when a partition of it is
        assigned, but drops that request if no broker connection is up at that
        moment; its next topic scan (once a second) asks again, so the first
        fetch waited up to a second (measured: ~0.9 s of the 1.5 s restore of
        100k records over 6 partitions).  With the topic in the metadata cache
        the fetch starts at once.  Once per topic per consumer; a failure only
        leaves the wait to librdkafka.
        """
        for topic in sorted(topics - self._known_topics):
            try:
                self._consumer.list_topics(topic, timeout=10)
            except Exception as exc:  # noqa: BLE001 - librdkafka's own scan finds it later
                logger.info("metadata of %s not fetched before the restore: %s", topic, exc)
            else:
                self._known_topics.add(topic)

    def remove(self, keys: list[tuple[str, int]]) -> list[PartitionReplay]:
        """Stop replaying these partitions (their engines are the caller's again); the removed."""
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        removed = [self._active.pop(key) for key in keys if key in self._active]
        if removed:
            self._consumer.incremental_unassign(
                [TopicPartition(r.topic, r.partition) for r in removed]
            )
        return removed

    def step(self, timeout_s: float) -> list[PartitionReplay]:
        """One pass: consume, fill and write WriteBatches, finish what reached its end.

        Returns the partitions that finished in this pass.  Raises
        :class:`BrokerRestoreError` (its ``topic``/``partition`` name the
        partition) on a broken or stalled partition; the caller removes it.
        """
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        active = self._active
        self._take(self._consumer.consume(self._fetch_records, timeout=timeout_s))
        if not active:
            return []
        positions = self._consumer.position(
            [TopicPartition(topic, partition) for topic, partition in active]
        )
        now = self._clock()
        finished: list[PartitionReplay] = []
        for tp in positions:
            replay = active[(tp.topic, tp.partition)]
            if tp.offset > replay.position:
                replay.position = tp.offset
                replay.progress_at = now
            if replay.position >= replay.end_offset:
                self._finish(replay)
                finished.append(replay)
            elif now - replay.progress_at > self._stall_timeout_s:
                raise BrokerRestoreError(
                    replay.topic,
                    replay.partition,
                    replay.position,
                    f"no progress for {self._stall_timeout_s:.0f}s towards end offset"
                    f" {replay.end_offset}: an open transaction holds the partition's last"
                    " stable offset (a dead owner's is aborted after transaction.timeout.ms;"
                    " one a broker crash left without its markers hangs until an operator"
                    " ends it: kafka-transactions.sh find-hanging, then abort)",
                )
        if finished:
            self.remove([replay.key for replay in finished])
        return finished

    def _take(self, messages: list[Any]) -> None:
        """Append ``messages`` to their partitions' pending WriteBatches; write the full ones.

        The hot loop of a restore (~1-2 us a record here): a consume returns
        long runs of one partition, so the run's partition is looked up once
        and its pending list, byte count and last offset live in locals until
        the run ends.
        """
        from confluent_kafka import KafkaError  # noqa: PLC0415

        active = self._active
        batch_bytes = self._batch_bytes
        replay: PartitionReplay | None = None
        topic: str | None = None
        partition = -1
        pending: list[tuple[bytes, bytes | None]] = []
        size = 0
        end = 0
        last = -1
        plain = True
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise BrokerRestoreError(
                    message.topic(), message.partition(), message.offset(), error.str()
                )
            p = message.partition()
            t = message.topic()
            if p != partition or t != topic:
                if replay is not None:
                    replay.pending_bytes = size
                    replay.last_offset = last
                topic, partition = t, p
                replay = active.get((t, p))
                if replay is None:
                    continue  # removed meanwhile
                pending = replay.pending
                size = replay.pending_bytes
                end = replay.end_offset
                last = replay.last_offset
                plain = replay.record_format == "plain"
            elif replay is None:
                continue
            offset = message.offset()
            if offset >= end:
                continue
            key = message.key()
            if key is None:
                raise BrokerRestoreError(t, p, offset, "changelog record without a key")
            value = message.value()
            if not plain:
                ((restored, value),) = restored_pairs(
                    replay.record_format,
                    ((key, message.timestamp()[1], value),),
                    expiry_cutoff_ms=replay.expiry_cutoff_ms,
                )
                key = cast("bytes", restored)  # a key in gives a key out
            pending.append((key, value))
            size += len(key) if value is None else len(key) + len(value)
            last = offset
            if size >= batch_bytes:
                replay.pending_bytes = size
                replay.last_offset = last
                self._apply(replay)
                pending = replay.pending
                size = 0
        if replay is not None:
            replay.pending_bytes = size
            replay.last_offset = last

    def _apply(self, replay: PartitionReplay) -> None:
        """Write the pending records of ``replay`` with the applied offset just past them."""
        if not replay.pending:
            return
        count = len(replay.pending)
        replay.engine.write(replay.pending, replay.last_offset + 1)
        replay.restored += count
        self._restored_total += count
        replay.pending = []
        replay.pending_bytes = 0
        if self._listener is not None:
            self._listener.on_batch_restored(
                replay.store, replay.partition, replay.last_offset, count
            )

    def _finish(self, replay: PartitionReplay) -> None:
        """The last WriteBatch: the rest, the end offset, the topic id and the applied time."""
        count = len(replay.pending)
        replay.engine.write(
            replay.pending,
            replay.end_offset,
            meta=applied_meta(replay.topic_id, self._wall_clock_ms()),
        )
        replay.restored += count
        self._restored_total += count
        replay.pending = []
        replay.pending_bytes = 0
        if self._listener is not None:
            if count:
                self._listener.on_batch_restored(
                    replay.store, replay.partition, replay.last_offset, count
                )
            self._listener.on_restore_end(replay.store, replay.partition, replay.restored)
        logger.info(
            "[%s-%s] restored %s records of %s [%s, %s)",
            replay.store,
            replay.partition,
            replay.restored,
            replay.topic,
            replay.start_offset,
            replay.end_offset,
        )


def restore_partition(
    consumer: RestoreConsumer,
    engine: RocksDBEngine,
    *,
    store: str,
    topic: str,
    partition: int,
    topic_id: str,
    start_offset: int,
    end_offset: int,
    batch_bytes: int,
    stall_timeout_s: float,
    listener: StateRestoreListener | None = None,
    wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    clock: Callable[[], float] = time.monotonic,
    record_format: RecordFormat = "plain",
    expiry_cutoff_ms: int | None = None,
) -> int:
    """Replay ``topic``-``partition`` ``[start_offset, end_offset)`` into ``engine``; the count.

    ``record_format`` and ``expiry_cutoff_ms`` as :class:`PartitionReplay` takes them.

    A :class:`RestoreSession` of one partition, stepped until it finishes: ends
    with one WriteBatch holding the applied offset ``end_offset``, the topic id
    and the applied time.
    """
    session = RestoreSession(
        consumer,
        batch_bytes=batch_bytes,
        stall_timeout_s=stall_timeout_s,
        listener=listener,
        wall_clock_ms=wall_clock_ms,
        clock=clock,
    )
    replay = PartitionReplay(
        store=store,
        topic=topic,
        partition=partition,
        topic_id=topic_id,
        engine=engine,
        start_offset=start_offset,
        end_offset=end_offset,
        record_format=record_format,
        expiry_cutoff_ms=expiry_cutoff_ms,
    )
    finished = session.add([replay])
    try:
        while not finished:
            finished = session.step(0.1)
    finally:
        session.remove([replay.key])
    return replay.restored
