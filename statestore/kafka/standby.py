"""Standby replicas: warm copies of store partitions this process does not own.

librdkafka's assignors are not pluggable, so standbys cannot be placed through
the group protocol as Kafka Streams does.  Instead every member derives the
same placement from the group membership it reads with
``AdminClient.describe_consumer_groups`` (:func:`standby_partitions`): members
are sorted by member id into a ring, and the standbys of the partitions owned
by a member live on the ``num_standby_replicas`` members after it.  Members
see the same description, so they agree, up to the moment a rebalance is in
flight; a wrong guess costs only a colder restore, never correctness.

A standby partition (:class:`StandbyTasks`) is a RocksDB directory at the same
path an active task would use (segmented by time for window, session and
versioned stores, each record's timestamp put back as a restore does), fed by a dedicated ``read_committed`` consumer
that tails the changelog partition, in WriteBatches that carry the applied
offset (and the topic id).  The applied *time* is written only when the
standby has reached the high watermark, so a standby that lags is never taken
for fresh by the staleness rule.  When the partition becomes active here, the
standby is closed first and the active restore continues incrementally from
its offset: only the tail is replayed.

Thread-safety: not thread-safe; the processor's thread drives it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from statestore.config import RocksDBConfig
from statestore.kafka.config import ChangelogTopicConfig
from statestore.kafka.restore import (
    TOPIC_ID_KEY,
    applied_meta,
    plan_broker_restore,
    stored_applied_time_ms,
    stored_topic_id,
)
from statestore.kafka.store import KafkaStoreSpec
from statestore.kafka.topics import TopicInfo, watermarks
from statestore.stores.engine import RocksDBEngine
from statestore.stores.time.layout import restored_pairs

__all__ = ["StandbyTasks", "group_owners", "standby_partitions"]

logger = logging.getLogger(__name__)


def standby_partitions(
    owners: Mapping[str, Iterable[int]], member_id: str, replicas: int
) -> set[int]:
    """The partitions ``member_id`` keeps standbys of: those owned by the ``replicas``
    members before it in the ring of sorted member ids (never its own)."""
    ring = sorted(owners)
    if replicas < 1 or member_id not in ring or len(ring) < 2:
        return set()
    index = ring.index(member_id)
    own = set(owners[member_id])
    wanted: set[int] = set()
    for step in range(1, min(replicas, len(ring) - 1) + 1):
        wanted.update(owners[ring[(index - step) % len(ring)]])
    return wanted - own


class StandbyTasks:
    """The standby store partitions of this process and the consumer that tails them.

    Invariants: ``_engines`` holds an open engine for every ``(store, p)`` of every
    partition in ``_partitions``; the consumer is assigned exactly their changelog
    partitions, at each engine's applied offset.
    """

    def __init__(
        self,
        *,
        consumer: Any,
        admin: Any,
        state_dir: Path,
        topics: Mapping[str, TopicInfo],
        rocksdb: RocksDBConfig,
        changelog: ChangelogTopicConfig,
        wall_clock_ms: Callable[[], int],
        specs: Mapping[str, KafkaStoreSpec] | None = None,
    ) -> None:
        """``specs``: the stores by name (their engine and record format; absent: key-value)."""
        self._specs = {name: (specs or {}).get(name, KafkaStoreSpec(name=name)) for name in topics}
        self._consumer = consumer
        self._admin = admin
        self._state_dir = state_dir
        self._topics = dict(topics)
        self._by_topic = {info.name: name for name, info in self._topics.items()}
        self._rocksdb = rocksdb
        self._changelog = changelog
        self._wall_clock_ms = wall_clock_ms
        self._engines: dict[tuple[str, int], RocksDBEngine] = {}
        self._fresh: set[tuple[str, int]] = set()
        """Standbys whose applied time was written at the high watermark, with no record since."""
        self._partitions: set[int] = set()
        self.records_applied = 0
        """Changelog records applied to standbys so far."""

    @property
    def partitions(self) -> set[int]:
        """The partitions kept warm here."""
        return set(self._partitions)

    def applied_offset(self, store: str, partition: int) -> int | None:
        """The standby's applied offset (``None``: no standby for it)."""
        engine = self._engines.get((store, partition))
        return None if engine is None else engine.applied_offset()

    def engine(self, store: str, partition: int) -> RocksDBEngine | None:
        """The standby's RocksDB (``None``: no standby for it), for interactive queries: point
        reads from any thread (:mod:`statestore.kafka.query`)."""
        return self._engines.get((store, partition))

    def offsets(self, store: str, partition: int) -> tuple[int, int] | None:
        """``(position, high watermark as last fetched)`` of the standby (``None``: no standby,
        or no fetch yet); the position is at least the applied offset (see :meth:`lag`)."""
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        engine = self._engines.get((store, partition))
        if engine is None:
            return None
        tp = TopicPartition(self._topics[store].name, partition)
        _low, high = self._consumer.get_watermark_offsets(tp, cached=True)
        if high is None or high < 0:
            return None
        position = self._consumer.position([tp])[0].offset
        return max(position, engine.applied_offset() or 0), int(high)

    def lag(self, store: str, partition: int) -> int | None:
        """Offsets between the standby's position and the changelog's high watermark as last
        fetched (``None``: no standby, or no fetch yet).

        The position, not the applied offset: a ``read_committed`` consumer's
        position passes transaction markers, which hold offsets but no record
        (every record consumed is applied in the same :meth:`poll`).
        """
        found = self.offsets(store, partition)
        return None if found is None else max(0, found[1] - found[0])

    def refresh(self, wanted: set[int]) -> None:
        """Keep standbys for exactly ``wanted``: close the others, open and assign the new ones."""
        for p in sorted(self._partitions - wanted):
            self.release(p)
        added = sorted(wanted - self._partitions)
        if not added:
            return
        for p in added:
            for name in self._topics:
                self._engines[(name, p)] = self._open(name, p)
            self._partitions.add(p)
        self._reassign()
        logger.info("standby partitions now %s", sorted(self._partitions))

    def _open(self, name: str, p: int) -> RocksDBEngine:
        info = self._topics[name]
        path = self._state_dir / f"{name}-{p}"
        label = f"[{name}-{p} standby]"
        spec = self._specs[name]
        engine = spec.open_engine(path, config=self._rocksdb, label=label)
        low, high = watermarks(self._admin, info.name, [p])[p]
        plan = plan_broker_restore(
            applied_offset=engine.applied_offset(),
            has_data=not engine.is_empty(),
            stored_topic=stored_topic_id(engine),
            applied_time_ms=stored_applied_time_ms(engine),
            topic_id=info.topic_id,
            log_start_offset=low,
            high_watermark=high,
            now_ms=self._wall_clock_ms(),
            config=self._changelog,
        )
        if plan.rebuild:
            logger.info("%s rebuilding: %s", label, plan.reason)
            engine.close(flush=False)
            RocksDBEngine.destroy(path)
            engine = spec.open_engine(path, config=self._rocksdb, label=label)
        if plan.start_offset >= high:
            # Nothing to replay (an empty partition, or already at its end): caught up now,
            # with no record to apply that would say so (a promotion then stays incremental).
            engine.write(
                [], plan.start_offset, meta=applied_meta(info.topic_id, self._wall_clock_ms())
            )
        elif engine.applied_offset() is None:
            engine.write([], plan.start_offset, meta={TOPIC_ID_KEY: info.topic_id.encode()})
        return engine

    def _reassign(self) -> None:
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        assignment = []
        for (name, p), engine in sorted(self._engines.items()):
            assignment.append(
                TopicPartition(self._topics[name].name, p, engine.applied_offset() or 0)
            )
        if assignment:
            self._consumer.assign(assignment)
        else:
            self._consumer.unassign()

    def release(self, p: int) -> None:
        """Close the standby of partition ``p`` (it is becoming active here, or moved away)."""
        if p not in self._partitions:
            return
        self._partitions.discard(p)
        for name in self._topics:
            if (name, p) in self._engines and (name, p) not in self._fresh:
                self._mark((name, p))  # caught up since the last poll: say so before closing
            self._fresh.discard((name, p))
            engine = self._engines.pop((name, p), None)
            if engine is not None:
                engine.close()
        self._reassign()

    def poll(self, max_records: int = 5000, timeout_s: float = 0.0) -> int:
        """Apply what the changelog partitions have for the standbys; the count applied."""
        if not self._partitions:
            return 0
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        messages = self._consumer.consume(max_records, timeout=timeout_s)
        grouped: dict[tuple[str, int], list[tuple[int, bytes, int, bytes | None]]] = {}
        for message in messages:
            if message.error() is not None or message.key() is None:
                continue
            name = self._by_topic.get(message.topic())
            if name is None or (name, message.partition()) not in self._engines:
                continue
            grouped.setdefault((name, message.partition()), []).append(
                (message.offset(), message.key(), message.timestamp()[1], message.value())
            )
        for (name, p), entries in grouped.items():
            engine = self._engines[(name, p)]
            topic = self._topics[name]
            position = self._consumer.position([TopicPartition(topic.name, p)])[0].offset
            _low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic.name, p), cached=True
            )
            caught_up = high >= 0 and position >= high
            meta = (
                applied_meta(topic.topic_id, self._wall_clock_ms())
                if caught_up
                else {TOPIC_ID_KEY: topic.topic_id.encode()}
            )
            record_format = self._specs[name].record_format
            records: list[tuple[bytes, bytes | None]] = [(k, v) for _o, k, _t, v in entries]
            if record_format != "plain":
                records = [
                    (k, v)
                    for k, v in restored_pairs(
                        record_format,
                        [(k, t, v) for _o, k, t, v in entries],
                        expiry_cutoff_ms=self._specs[name].expiry_cutoff_ms(self._wall_clock_ms()),
                    )
                    if k is not None
                ]
            engine.write(records, entries[-1][0] + 1, meta=meta)
            self.records_applied += len(entries)
            if caught_up:
                self._fresh.add((name, p))
            else:
                self._fresh.discard((name, p))
        self._mark_caught_up(set(grouped))
        return sum(len(entries) for entries in grouped.values())

    def _mark_caught_up(self, written: set[tuple[str, int]]) -> None:
        """Write the applied time of each standby that reached the high watermark without a record.

        The last records of a transaction are followed by its commit marker,
        which a ``read_committed`` consumer passes without returning a record:
        the poll that applied the records saw a position below the high
        watermark, and no later poll has a record to write.  Without this the
        standby would never record an applied time, and its failover would
        rebuild it as stale.
        """
        for key in list(self._engines):
            if key not in written and key not in self._fresh:
                self._mark(key)

    def _mark(self, key: tuple[str, int]) -> None:
        """:meth:`_mark_caught_up` for one standby (``(store, partition)``)."""
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        name, p = key
        engine = self._engines[key]
        topic = self._topics[name]
        tp = TopicPartition(topic.name, p)
        position = self._consumer.position([tp])[0].offset
        _low, high = self._consumer.get_watermark_offsets(tp, cached=True)
        if high is None or high < 0 or position is None or position < high:
            return
        applied = max(engine.applied_offset() or 0, position)
        engine.write([], applied, meta=applied_meta(topic.topic_id, self._wall_clock_ms()))
        self._fresh.add(key)

    def close(self) -> None:
        """Close every standby and the consumer."""
        for p in sorted(self._partitions):
            for name in self._topics:
                engine = self._engines.pop((name, p), None)
                if engine is not None:
                    engine.close()
        self._partitions.clear()
        self._consumer.close()


def group_owners(
    admin: Any, group: str, topic: str, *, timeout_s: float = 5
) -> dict[str, list[int]]:
    """``member id -> partitions of topic`` as the group coordinator describes the group."""
    futures = admin.describe_consumer_groups([group], request_timeout=timeout_s)
    description = futures[group].result(timeout=timeout_s)
    owners: dict[str, list[int]] = {}
    for member in description.members:
        assignment = member.assignment
        tps: Sequence[Any] = assignment.topic_partitions if assignment is not None else []
        owners[member.member_id] = sorted(tp.partition for tp in tps if tp.topic == topic)
    return owners
