"""A broker in memory for running the whole :class:`~statestore.kafka.Processor` without Kafka.

:class:`FakeCluster` holds topics (partitions of ``(offset, key, value,
headers)`` records, a transaction's commit marker taking one offset), one
consumer group's committed offsets, and hands out fake clients through
:meth:`FakeCluster.clients` (a :class:`~statestore.kafka.clients.KafkaClients`):

* the admin client answers ``list_topics``, ``describe_topics``,
  ``describe_configs``, ``create_topics`` and ``list_offsets``;
* the main consumer assigns every partition of its topics on the first
  ``consume`` (through the ``on_assign`` callback, as librdkafka does; only
  ``member_partitions`` when set), serves records from its positions, and
  reads the group's offsets;
* ``describe_consumer_groups`` describes the open main consumers (their
  ``client.id`` and assignment) and the ``other_members`` a test adds;
* the restore consumer serves changelog partitions ``read_committed``;
* the transactional producer makes records visible only at
  ``commit_transaction``, together with the offsets sent in the transaction;
  ``fail = {step: exception}`` raises at a step (``"always"`` in
  ``fail_always`` keeps raising).

Only what the runtime calls is modelled.  Not thread-safe beyond what the
runtime needs (the restore consumer is used by the restorer thread alone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import MemberAssignment, MemberDescription

from tests.statestore.kafka.fakes import FakeMessage

Record = tuple[int, bytes | None, bytes | None, Any]


def _done(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


class _Partitions:
    def __init__(self, partitions: dict[int, Any]) -> None:
        self.partitions = partitions
        self.error = None


class _Metadata:
    def __init__(self, topics: dict[str, _Partitions]) -> None:
        self.topics = topics


class _Described:
    def __init__(self, partitions: int, topic_id: str) -> None:
        self.partitions = list(range(partitions))
        self.topic_id = topic_id
        self.authorized_operations = None  # as a broker that does not report them


class _Group:
    authorized_operations = None  # as a broker that does not report them

    def __init__(self, members: list[MemberDescription]) -> None:
        self.members = members


class _Entry:
    def __init__(self, value: str) -> None:
        self.value = value


class _Offset:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class FakeCluster:
    """Topics, one group's committed offsets, and the clients (module docstring)."""

    def __init__(self) -> None:
        self.topics: dict[str, list[list[Record]]] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.highs: dict[tuple[str, int], int] = {}
        """High watermarks above ``ends`` (records of undecided transactions); default: the end."""
        self.configs: dict[str, dict[str, str]] = {}
        self.group_offsets: dict[tuple[str, int], int] = {}
        self.producers: list[FakeTxnProducer] = []
        self.member_partitions: set[int] | None = None
        """The partitions the main consumer is assigned (``None``: all)."""
        self.other_members: list[MemberDescription] = []
        """Members of the group besides the main consumers (other instances)."""
        self.group_consumers: list[FakeGroupConsumer] = []

    def create(self, topic: str, partitions: int, configs: Mapping[str, str] = ()) -> None:
        self.topics[topic] = [[] for _ in range(partitions)]
        self.configs[topic] = dict(configs)
        for p in range(partitions):
            self.ends[(topic, p)] = 0

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None) -> int:
        offset = self.ends[(topic, partition)]
        self.topics[topic][partition].append((offset, key, value, None))
        self.ends[(topic, partition)] = offset + 1
        return offset

    def records(self, topic: str) -> list[Record]:
        return [r for partition in self.topics[topic] for r in partition]

    def clients(self) -> FakeClients:
        return FakeClients(self)


class FakeClients:
    """The factory the processor gets: admin, consumers, producer over one cluster."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.consumers: list[Any] = []

    def admin(self, settings: Mapping[str, Any]) -> FakeAdmin:
        return FakeAdmin(self.cluster)

    def consumer(self, settings: Mapping[str, Any]) -> Any:
        if settings.get("auto.offset.reset") == "error":
            consumer: Any = FakeChangelogConsumer(self.cluster)
        else:
            consumer = FakeGroupConsumer(self.cluster, str(settings.get("client.id", "")))
            if "client.id" in settings:  # the main consumer
                self.cluster.group_consumers.append(consumer)
        self.consumers.append(consumer)
        return consumer

    def producer(self, settings: Mapping[str, Any]) -> FakeTxnProducer:
        producer = FakeTxnProducer(self.cluster)
        self.cluster.producers.append(producer)
        return producer


class FakeAdmin:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> _Metadata:
        return _Metadata(
            {
                name: _Partitions(dict.fromkeys(range(len(parts))))
                for name, parts in self.cluster.topics.items()
            }
        )

    def describe_topics(
        self, collection: Any, request_timeout: float = -1, **_options: Any
    ) -> dict[str, Any]:
        return {
            name: _done(_Described(len(self.cluster.topics[name]), f"id-{name}"))
            for name in collection.topic_names
        }

    def describe_consumer_groups(
        self, groups: list[str], request_timeout: float = -1, **_options: Any
    ) -> dict[str, Any]:
        members = [
            MemberDescription(
                member_id=consumer.memberid(),
                client_id=consumer.client_id,
                host="/127.0.0.1",
                assignment=MemberAssignment(
                    [TopicPartition(t, p) for t, p in sorted(consumer.assigned)]
                ),
            )
            for consumer in self.cluster.group_consumers
            if not consumer.closed
        ]
        return {group: _done(_Group(members + self.cluster.other_members)) for group in groups}

    def describe_configs(self, resources: list[Any], request_timeout: float = -1) -> Any:
        return {
            r: _done({k: _Entry(v) for k, v in self.cluster.configs[r.name].items()})
            for r in resources
        }

    def create_topics(self, new: list[Any], request_timeout: float = -1) -> dict[str, Any]:
        for topic in new:
            self.cluster.create(topic.topic, topic.num_partitions, topic.config)
        return {topic.topic: _done(None) for topic in new}

    def list_offsets(self, request: Mapping[Any, Any], **kw: Any) -> dict[Any, Any]:
        committed = getattr(kw.get("isolation_level"), "name", "") != "READ_UNCOMMITTED"

        def latest(key: tuple[str, int]) -> int:
            end = self.cluster.ends[key]
            return end if committed else self.cluster.highs.get(key, end)

        return {
            tp: _done(
                _Offset(
                    0 if type(spec).__name__ == "EarliestSpec" else latest((tp.topic, tp.partition))
                )
            )
            for tp, spec in request.items()
        }


class FakeGroupConsumer:
    """The main consumer: every partition of the subscribed topics, at the group's offsets."""

    def __init__(self, cluster: FakeCluster, client_id: str = "") -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.callbacks: dict[str, Callable[..., None]] = {}
        self.topics: list[str] = []
        self.assigned: set[tuple[str, int]] = set()
        self.paused: set[tuple[str, int]] = set()
        self.positions: dict[tuple[str, int], int] = {}
        self.seeks: list[tuple[str, int, int]] = []
        self.closed = False

    def subscribe(self, topics: list[str], **callbacks: Callable[..., None]) -> None:
        self.topics = topics
        self.callbacks = callbacks

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        if not self.assigned and self.topics:
            self.callbacks["on_assign"](
                self,
                [
                    TopicPartition(t, p)
                    for t in self.topics
                    for p in range(len(self.cluster.topics[t]))
                    if self.cluster.member_partitions is None or p in self.cluster.member_partitions
                ],
            )
        out: list[Any] = []
        for key in sorted(self.assigned - self.paused):
            topic, p = key
            position = self.positions.get(key, 0)
            for offset, k, v, _h in self.cluster.topics[topic][p]:
                if offset >= position and len(out) < num_messages:
                    out.append(FakeMessage(topic, p, offset, k, v))
                    self.positions[key] = offset + 1
        return out

    def incremental_assign(self, partitions: list[Any]) -> None:
        for tp in partitions:
            self.assigned.add((tp.topic, tp.partition))

    def incremental_unassign(self, partitions: list[Any]) -> None:
        for tp in partitions:
            self.assigned.discard((tp.topic, tp.partition))

    def pause(self, partitions: list[Any]) -> None:
        self.paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[Any]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def seek(self, tp: Any) -> None:
        offset = max(tp.offset, 0)
        self.seeks.append((tp.topic, tp.partition, offset))
        self.positions[(tp.topic, tp.partition)] = offset

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return [
            TopicPartition(
                tp.topic,
                tp.partition,
                self.cluster.group_offsets.get((tp.topic, tp.partition), -1001),
            )
            for tp in partitions
        ]

    def commit(self, offsets: list[Any], asynchronous: bool = True) -> None:
        for tp in offsets:
            self.cluster.group_offsets[(tp.topic, tp.partition)] = tp.offset

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def memberid(self) -> str:
        return "member-1"

    def close(self) -> None:
        if self.assigned and "on_revoke" in self.callbacks:
            self.callbacks["on_revoke"](
                self, [TopicPartition(t, p) for t, p in sorted(self.assigned)]
            )
        self.closed = True


class FakeChangelogConsumer:
    """The restore consumer: ``read_committed`` over the cluster's committed records."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.positions: dict[tuple[str, int], int] = {}

    def incremental_assign(self, partitions: list[Any]) -> None:
        for tp in partitions:
            self.positions[(tp.topic, tp.partition)] = tp.offset

    def incremental_unassign(self, partitions: list[Any]) -> None:
        for tp in partitions:
            self.positions.pop((tp.topic, tp.partition), None)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> _Metadata:
        return FakeAdmin(self.cluster).list_topics(topic, timeout)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        out: list[Any] = []
        for (topic, p), position in list(self.positions.items()):
            for offset, k, v, _h in self.cluster.topics[topic][p]:
                if offset >= position:
                    out.append(FakeMessage(topic, p, offset, k, v))
            self.positions[(topic, p)] = self.cluster.ends[(topic, p)]
        return out

    def position(self, partitions: list[Any]) -> list[Any]:
        return [
            TopicPartition(tp.topic, tp.partition, self.positions[(tp.topic, tp.partition)])
            for tp in partitions
        ]

    def close(self) -> None:
        pass


class FakeTxnProducer:
    """A transactional producer whose records become visible at ``commit_transaction``."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.calls: list[str] = []
        self.fail: dict[str, BaseException] = {}
        self.fail_always: dict[str, BaseException] = {}
        self._open: list[tuple[str, int, bytes | None, bytes | None, Any, Any]] = []
        self._offsets: list[Any] = []

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail_always:
            raise self.fail_always[name]
        if name in self.fail:
            raise self.fail.pop(name)

    def init_transactions(self, timeout: float = -1) -> None:
        self._step("init")

    def begin_transaction(self) -> None:
        self._step("begin")
        self._open, self._offsets = [], []

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        on_delivery: Callable[[Any, Any], None] | None = None,
        headers: Any = None,
    ) -> None:
        self._step("produce")
        self._open.append((topic, max(partition, 0), key, value, headers, on_delivery))

    def poll(self, timeout: float = -1) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        self._step("flush")
        return 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> _Metadata:
        return FakeAdmin(self.cluster).list_topics(topic, timeout)

    def send_offsets_to_transaction(
        self, positions: list[Any], group_metadata: Any, timeout: float = -1
    ) -> None:
        self._step("send_offsets")
        self._offsets = list(positions)

    def commit_transaction(self, timeout: float = -1) -> None:
        self._step("commit")
        touched: set[tuple[str, int]] = set()
        for topic, partition, key, value, headers, report in self._open:
            offset = self.cluster.ends[(topic, partition)]
            self.cluster.topics[topic][partition].append((offset, key, value, headers))
            self.cluster.ends[(topic, partition)] = offset + 1
            touched.add((topic, partition))
            if report is not None:
                report(None, FakeMessage(topic, partition, offset, key, value))
        for topic, partition in touched:
            self.cluster.ends[(topic, partition)] += 1  # the commit marker
        for tp in self._offsets:
            self.cluster.group_offsets[(tp.topic, tp.partition)] = tp.offset
        self._open, self._offsets = [], []

    def abort_transaction(self, timeout: float = -1) -> None:
        self._step("abort")
        self._open, self._offsets = [], []
