"""The docs' python blocks that need a Kafka broker run as written, on the kafka tier's broker.

Each block whose first line is ``# Needs a Kafka broker (BOOTSTRAP_SERVERS); topics: ...``
(tests/test_docs_snippets.py finds them) runs on its own in a fresh directory, in a
subprocess, with ``BOOTSTRAP_SERVERS`` set and its topics created first; a failure names the
page and the block's line.  The first topic gets three input records before the block runs (whether the block's
bounded loop reaches them depends on how fast the group forms: only the run is checked).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kafka_harness.broker import KafkaBroker
from tests.test_docs_snippets import broker_blocks, run_page

pytestmark = pytest.mark.kafka

BLOCKS = broker_blocks()


def test_the_docs_have_broker_blocks() -> None:
    assert any(page == "docs/scale-out.md" for page, _line, _code, _topics in BLOCKS)


@pytest.mark.parametrize(
    ("page", "line", "code", "topics"), BLOCKS, ids=[f"{b[0]}:{b[1]}" for b in BLOCKS]
)
@pytest.mark.timeout(300)
def test_the_broker_block_runs_as_written(
    page: str, line: int, code: str, topics: list[str], cluster: KafkaBroker, tmp_path: Path
) -> None:
    for topic in topics:
        cluster.create_topic(topic, {})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for key, value in [("alice", "5"), ("bob", "7"), ("alice", "-2")]:
        producer.produce(topics[0], key=key.encode(), value=value.encode())  # the block's input
    assert producer.flush(60) == 0
    done = run_page(
        [(line, code)],
        tmp_path,
        timeout_s=240,
        env={"BOOTSTRAP_SERVERS": cluster.bootstrap_servers},
    )
    failed = re.search(r"FAILED-BLOCK (\d+)", done.stderr)
    assert done.returncode == 0, f"the block at {page}:{line} failed ({failed}):\n{done.stderr}"
