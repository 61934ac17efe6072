"""Fake confluent-kafka clients for the state-machine unit tests: no broker, exact control.

:class:`FakeProducer` records every call and assigns offsets per partition
like a broker (a transaction's commit marker takes one offset); it raises a
chosen ``KafkaException`` at a chosen step.  :class:`FakeRestoreConsumer`
serves a changelog partition with gaps (compaction, markers) the way a
``read_committed`` consumer does: records only, the position jumping over
what it does not return.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition


def kafka_exception(
    code: int, *, fatal: bool = False, abortable: bool = False, retriable: bool = False
) -> KafkaException:
    """A ``KafkaException`` carrying a ``KafkaError`` with the given flags."""
    return KafkaException(
        KafkaError(code, "injected", fatal=fatal, retriable=retriable, txn_requires_abort=abortable)
    )


class _Delivered:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return self._partition

    def topic(self) -> str:
        return self._topic


class FakeProducer:
    """A transactional producer; ``fail = {step: exception}`` raises at that step once.

    ``queue_records``: the local queue's capacity; ``produce`` raises ``BufferError``
    when it is full, and ``poll``/``flush`` deliver (empty it), as librdkafka does.
    """

    def __init__(self, *, queue_records: int | None = None) -> None:
        self.queue_records = queue_records
        self.buffer_errors = 0
        self.headers: list[Any] = []
        self.calls: list[str] = []
        self.fail: dict[str, BaseException] = {}
        self.log: dict[tuple[str, int], list[tuple[int, bytes | None, bytes | None]]] = {}
        self.timestamps: dict[tuple[str, int], list[int]] = {}
        """Each produced record's ``timestamp`` argument (0: the producer's clock)."""
        self.committed: list[tuple[str, int, bytes | None, bytes | None]] = []
        self.offsets_sent: list[Any] = []
        self._open: list[tuple[str, int, bytes | None, bytes | None]] = []
        self._reports: list[tuple[Callable[[Any, Any], None] | None, Any]] = []
        self._next: dict[tuple[str, int], int] = {}

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail.pop(name)

    def begin_transaction(self) -> None:
        self._step("begin")

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        on_delivery: Callable[[Any, Any], None] | None = None,
        headers: Any = None,
        timestamp: int = 0,
    ) -> None:
        if self.queue_records is not None and len(self._reports) >= self.queue_records:
            self.buffer_errors += 1
            raise BufferError("Local: Queue full")
        self._step("produce")
        self.headers.append(headers)
        part = max(partition, 0)
        offset = self._next.get((topic, part), 0)
        self._next[(topic, part)] = offset + 1
        self.log.setdefault((topic, part), []).append((offset, key, value))
        self.timestamps.setdefault((topic, part), []).append(timestamp)
        self._open.append((topic, part, key, value))
        self._reports.append((on_delivery, _Delivered(topic, part, offset)))

    def _deliver(self) -> int:
        delivered = len(self._reports)
        for report, message in self._reports:
            if report is not None:
                report(None, message)
        self._reports = []
        return delivered

    def poll(self, timeout: float = -1) -> int:
        return self._deliver()

    def flush(self, timeout: float = -1) -> int:
        self._step("flush")
        self._deliver()
        return 0

    def send_offsets_to_transaction(
        self, positions: list[Any], group_metadata: Any, timeout: float = -1
    ) -> None:
        self._step("send_offsets")
        self.offsets_sent.append((list(positions), group_metadata))

    def _marker(self) -> None:
        for topic, part in {(t, p) for t, p, _k, _v in self._open}:
            self._next[(topic, part)] += 1  # the control record

    def commit_transaction(self, timeout: float = -1) -> None:
        self._step("commit")
        self.committed.extend(self._open)
        self._marker()
        self._open = []

    def abort_transaction(self, timeout: float = -1) -> None:
        self._step("abort")
        self._marker()
        self._open = []


class FakeMessage:
    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        error: Any = None,
        timestamp_ms: int = 0,
    ) -> None:
        self._topic, self._partition = topic, partition
        self._offset, self._key, self._value, self._error = offset, key, value, error
        self._timestamp_ms = timestamp_ms

    def timestamp(self) -> tuple[int, int]:
        """``(TIMESTAMP_CREATE_TIME, ms)`` as confluent-kafka's ``Message.timestamp``."""
        return 1, self._timestamp_ms

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def error(self) -> Any:
        return self._error


class FakeRestoreConsumer:
    """Changelog partitions served like a ``read_committed`` consumer, many at once.

    ``records`` (with gaps) below ``end_offset`` (the high watermark) are what
    every partition holds, unless ``logs`` gives a partition its own
    ``(records, end_offset)``.  ``stuck_at``: no position passes it (an open
    transaction that never ends).  ``consume`` serves the assigned partitions
    round robin, ``per_partition`` records of each per call.
    """

    def __init__(
        self,
        records: list[tuple[int, bytes | None, bytes | None]],
        end_offset: int,
        *,
        stuck_at: int | None = None,
        logs: dict[int, tuple[list[tuple[int, bytes | None, bytes | None]], int]] | None = None,
        per_partition: int = 1000,
        timestamps: dict[int, int] | None = None,
    ) -> None:
        self.records = records
        self.timestamps = timestamps or {}
        """Each offset's CreateTime (0 when not given)."""
        self.end_offset = end_offset
        self.stuck_at = stuck_at
        self.logs = logs or {}
        self.per_partition = per_partition
        self.assigned: list[Any] = []
        self.unassigned = 0
        self.consumes = 0
        self.metadata_requests: list[str | None] = []
        self._positions: dict[tuple[str, int], int] = {}

    def _log(self, partition: int) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
        return self.logs.get(partition, (self.records, self.end_offset))

    def incremental_assign(self, partitions: list[Any]) -> None:
        self.assigned.append(partitions)
        for tp in partitions:
            self._positions[(tp.topic, tp.partition)] = tp.offset

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        self.metadata_requests.append(topic)

    def incremental_unassign(self, partitions: list[Any]) -> None:
        self.unassigned += 1
        for tp in partitions:
            self._positions.pop((tp.topic, tp.partition), None)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        self.consumes += 1
        out: list[Any] = []
        for (topic, partition), position in list(self._positions.items()):
            records, end = self._log(partition)
            limit = end if self.stuck_at is None else min(end, self.stuck_at)
            batch = [
                FakeMessage(topic, partition, o, k, v, timestamp_ms=self.timestamps.get(o, 0))
                for o, k, v in records
                if position <= o < limit
            ][: min(self.per_partition, num_messages - len(out))]
            out.extend(batch)
            if batch:
                self._positions[(topic, partition)] = batch[-1].offset() + 1
            else:
                self._positions[(topic, partition)] = max(position, limit)  # markers, gaps
            if len(out) >= num_messages:
                break
        return out

    def position(self, partitions: list[Any]) -> list[Any]:
        return [
            TopicPartition(tp.topic, tp.partition, self._positions[(tp.topic, tp.partition)])
            for tp in partitions
        ]
