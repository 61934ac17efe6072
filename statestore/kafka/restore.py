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

How (:func:`restore_partition`): a dedicated consumer, manually assigned,
``isolation.level=read_committed``, ``auto.offset.reset=none`` (a vanished
offset is an error, never a silent jump), reads from the start offset until
its *position* reaches the end offset captured before the restore (the high
watermark).  The position, not the last record: transaction markers and
aborted records occupy offsets that a ``read_committed`` consumer never
returns.  Records go through :func:`statestore.restore.replay` (WriteBatches
with the applied offset inside, values never decoded); the final WriteBatch
also stores the topic id and the applied time.

Thread-safety: runs on the caller's thread; the consumer and the engine are
used by nobody else meanwhile.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

from statestore.kafka.config import ChangelogTopicConfig
from statestore.kafka.errors import BrokerRestoreError
from statestore.stores.engine import RocksDBEngine
from statestore.stores.restore import RestorePlan, StateRestoreListener, plan_restore

__all__ = [
    "APPLIED_TIME_KEY",
    "TOPIC_ID_KEY",
    "RestoreConsumer",
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


class RestoreConsumer(Protocol):
    """What a restore needs of a consumer (confluent-kafka's ``Consumer`` has it)."""

    def assign(self, partitions: list[Any]) -> None:
        """Assign exactly these partitions (with their start offsets)."""

    def unassign(self) -> None:
        """Drop the assignment."""

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        """Up to ``num_messages`` messages."""
        ...

    def position(self, partitions: list[Any]) -> list[Any]:
        """The next offset to fetch per partition."""
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


def _batches(
    consumer: RestoreConsumer,
    *,
    topic: str,
    partition: int,
    end_offset: int,
    fetch_records: int,
    stall_timeout_s: float,
    clock: Callable[[], float],
) -> Callable[[int], Iterator[list[tuple[int, bytes | None, bytes | None]]]]:
    from confluent_kafka import KafkaError, TopicPartition  # noqa: PLC0415

    def read(start_offset: int) -> Iterator[list[tuple[int, bytes | None, bytes | None]]]:
        tp = TopicPartition(topic, partition, start_offset)
        consumer.assign([tp])
        position = start_offset
        last_progress = clock()
        try:
            while position < end_offset:
                messages = consumer.consume(fetch_records, timeout=0.2)
                entries: list[tuple[int, bytes | None, bytes | None]] = []
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise BrokerRestoreError(topic, partition, position, error.str())
                    entries.append((message.offset(), message.key(), message.value()))
                if entries:
                    yield entries
                reached = consumer.position([TopicPartition(topic, partition)])[0].offset
                if reached > position:
                    position = reached
                    last_progress = clock()
                elif clock() - last_progress > stall_timeout_s:
                    raise BrokerRestoreError(
                        topic,
                        partition,
                        position,
                        f"no progress for {stall_timeout_s:.0f}s towards end offset {end_offset}"
                        " (an open transaction of a dead owner lasts up to transaction.timeout.ms)",
                    )
        finally:
            consumer.unassign()

    return read


def _replay(
    read: Callable[[int], Iterator[list[tuple[int, bytes | None, bytes | None]]]],
    engine: RocksDBEngine,
    *,
    store: str,
    topic: str,
    partition: int,
    start_offset: int,
    end_offset: int,
    batch_records: int,
    listener: StateRestoreListener | None,
) -> int:
    """Apply the records of ``[start_offset, end_offset)`` in WriteBatches; the count.

    Each WriteBatch carries the applied offset just past its last record (values
    stay bytes); the listener hears of each one, as in the local restore.
    """
    if listener is not None:
        listener.on_restore_start(store, partition, start_offset, end_offset)
    restored = 0
    pending: list[tuple[bytes, bytes | None]] = []
    last = start_offset - 1

    def apply() -> None:
        nonlocal pending, restored
        try:
            engine.write(pending, last + 1)
        except (KeyError, TypeError) as exc:  # a record without a key
            raise BrokerRestoreError(
                store, partition, last, f"changelog record without a key: {exc}"
            ) from exc
        restored += len(pending)
        if listener is not None:
            listener.on_batch_restored(store, partition, last, len(pending))
        pending = []

    if start_offset < end_offset:
        for entries in read(start_offset):
            for offset, key, value in entries:
                if offset >= end_offset:
                    break
                if key is None:
                    raise BrokerRestoreError(
                        topic, partition, offset, "changelog record without a key"
                    )
                pending.append((key, value))
                last = offset
            if len(pending) >= batch_records:
                apply()
    if pending:
        apply()
    if listener is not None:
        listener.on_restore_end(store, partition, restored)
    return restored


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
    batch_records: int,
    stall_timeout_s: float,
    listener: StateRestoreListener | None = None,
    wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Replay ``topic``-``partition`` ``[start_offset, end_offset)`` into ``engine``; the count.

    Ends with one WriteBatch holding the applied offset ``end_offset``, the
    topic id and the applied time.
    """
    read = _batches(
        consumer,
        topic=topic,
        partition=partition,
        end_offset=end_offset,
        fetch_records=min(batch_records, 10_000),
        stall_timeout_s=stall_timeout_s,
        clock=clock,
    )
    restored = _replay(
        read,
        engine,
        store=store,
        topic=topic,
        partition=partition,
        start_offset=start_offset,
        end_offset=end_offset,
        batch_records=batch_records,
        listener=listener,
    )
    engine.write([], end_offset, meta=applied_meta(topic_id, wall_clock_ms()))
    engine.flush()
    logger.info(
        "[%s-%s] restored %s records of %s [%s, %s)",
        store,
        partition,
        restored,
        topic,
        start_offset,
        end_offset,
    )
    return restored
