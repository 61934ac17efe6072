"""The cluster tests' oracle reader against a transaction that a dead producer left open.

A ``read_committed`` consumer's watermark is the partition's last stable offset
(librdkafka asks ListOffsets with the consumer's isolation level), so a reader
that stops there while a killed producer's transaction is still open misses
records that other producers committed after that transaction's first record:
they are committed, but no ``read_committed`` reader can reach them until the
coordinator aborts the open transaction (``transaction.timeout.ms``).  The
oracle reads to the high watermark instead, which waits for that abort.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_harness.broker import KafkaBroker
from tests.kafka.cluster.oracle import read_committed

pytestmark = pytest.mark.timeout(120)

_OPEN_TXN_TIMEOUT_MS = 6_000
"""The dead producer's ``transaction.timeout.ms``: the broker aborts its transaction after it."""


def _end(bootstrap: str, topic: str, isolation: str) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "oracle-ends", "isolation.level": isolation}
    )
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()


def test_read_committed_reads_what_was_committed_behind_a_dead_producers_open_transaction(
    cluster: KafkaBroker,
) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = "oracle-open-transaction"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(timeout=30)
    dead = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "oracle-dead",
            "transaction.timeout.ms": str(_OPEN_TXN_TIMEOUT_MS),
        }
    )
    live = Producer({"bootstrap.servers": bootstrap, "transactional.id": "oracle-live"})
    dead.init_transactions(30)
    live.init_transactions(30)
    dead.begin_transaction()
    dead.produce(topic, b"never committed", partition=0)
    assert dead.flush(30) == 0  # on the broker, in a transaction nobody ends (a kill -9)
    live.begin_transaction()
    live.produce(topic, b"committed", partition=0)
    live.commit_transaction(30)
    # The premise: the open transaction holds the last stable offset at its first record,
    # below the committed record (if it was aborted already, the test proves nothing).
    assert _end(bootstrap, topic, "read_committed") == 0
    assert _end(bootstrap, topic, "read_uncommitted") >= 2  # (the commit marker may follow)

    values = [m.value() for m in read_committed(bootstrap, topic, 1)]

    assert values == [b"committed"]
    # the coordinator aborted the dead transaction meanwhile: nothing is open any more
    assert _end(bootstrap, topic, "read_committed") == _end(bootstrap, topic, "read_uncommitted")
    del dead
