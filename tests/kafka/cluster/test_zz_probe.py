from __future__ import annotations

import time
from pathlib import Path

import msgpack
from confluent_kafka import Producer

from kafka_harness.broker import KafkaBroker
from tests.kafka.cluster.time_app import TimeApp


def test_probe(cluster: KafkaBroker, tmp_path: Path) -> None:
    app = TimeApp(cluster.bootstrap_servers, "probe-future")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    now = int(time.time() * 1000)
    for seq in range(5):
        ts = now + (2 * 3_600_000 if seq == 3 else 0)
        producer.produce(app.input, key=b"u1", value=msgpack.packb({"seq": seq, "ts": ts}))
    assert producer.flush(30) == 0
    processor = app.processor(tmp_path)
    started = time.monotonic()
    try:
        with processor:
            while time.monotonic() - started < 90:
                processor.poll_once(0.2)
    except Exception as exc:
        print("RAISED", type(exc).__mro__, repr(exc), "after", time.monotonic() - started)
        raise
