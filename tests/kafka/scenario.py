"""The Kafka side of the conformance tests: what a real broker writes, and how its cleaner compacts it.

:func:`run_kafka_scenario` drives one broker (one storage directory) through two runs:

1. **Produce, cleaner off** (``log.cleaner.enable=false``).  Two compacted topics,
   ``keep`` (``delete.retention.ms`` = one day) and ``drop`` (``delete.retention.ms=0``),
   with ``segment.bytes=2048`` and small producer batches, each receive the same
   :data:`BATCH_1` through ``kafka-console-producer`` (tombstones via ``null.marker``).
   ``kafka-console-consumer`` reads ``keep`` back.  Four more topics (:data:`COMPRESSED`,
   ``keep``'s settings and ``compression.type=producer``) get :data:`BATCH_1` with record
   headers (:data:`HEADERS_1`) from a producer compressing with gzip, snappy, lz4, zstd.  Clean shutdown; both partition
   directories are copied to ``produced/`` (the cleaner's input).
2. **Clean, cleaner on** (``log.cleaner.backoff.ms=100``, topic
   ``min.cleanable.dirty.ratio=0.01``).  Kafka's cleaner makes its first pass over
   every topic: dirty section ``[0, base offset of the active segment)``; it keeps
   tombstones and stamps their batches with a delete horizon of ``now + delete.retention.ms``.
   Kafka 3.9 starts a pass only for dirty data (``LogCleanerManager.grabFilthiestCompactedLog``:
   dirty ratio or ``max.compaction.lag.ms``), so to get the second pass on ``drop``
   the scenario then produces :data:`BATCH_2` after ``segment.ms`` has passed: the
   first append rolls the old active segment (it becomes dirty and cleanable) and
   :data:`BATCH_2` lands, as one batch, in the new active segment, which no pass
   touches.  The second pass removes the tombstones whose horizon (the first
   pass's time + 0) has passed.  We wait for each pass through Kafka's
   ``cleaner-offset-checkpoint``; clean shutdown; both directories are copied to
   ``cleaned/``.

Every JVM is killed by the ``finally`` blocks even when a step fails.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kafka_harness.broker import KafkaBroker
from kafka_harness.kafka_runtime import KafkaDist, KafkaRuntimeError

__all__ = [
    "BATCH_1",
    "BATCH_2",
    "CODECS",
    "COMPRESSED",
    "HEADERS_1",
    "KafkaScenario",
    "copy_partition",
    "read_kafka_checkpoint",
    "run_kafka_scenario",
]

SEGMENT_BYTES: Final = 2048
INDEX_INTERVAL_BYTES: Final = 128
SEGMENT_MS: Final = 1500
KEEP_RETENTION_MS: Final = 86_400_000

KEEP: Final = "keep"
DROP: Final = "drop"
CODECS: Final = ("gzip", "snappy", "lz4", "zstd")
COMPRESSED: Final = {codec: f"z-{codec}" for codec in CODECS}
"""Topics whose producer compresses with each codec (topic ``compression.type=producer``,
``delete.retention.ms`` one day, :data:`BATCH_1` with :data:`HEADERS_1`)."""


def _batch_1() -> list[tuple[str, str | None]]:
    """240 records over 30 keys: overwrites, tombstones, re-creations, varied value sizes."""
    rng = random.Random(9)
    records: list[tuple[str, str | None]] = []
    for i in range(240):
        key = f"k{rng.randrange(30):03d}"
        if rng.random() < 0.15:
            records.append((key, None))
        else:
            records.append((key, f"v{i:04d}-" + "x" * rng.randrange(0, 40)))
    # Keys whose last word is a tombstone at the very end (in the segment that stays
    # active during the first pass) and at the very start, and one never overwritten.
    records += [("t-late-1", "a"), ("t-late-2", "b"), ("t-late-1", None), ("t-late-2", None)]
    records.insert(0, ("solo", "only-once"))
    records.insert(1, ("t-first", "x"))
    records.insert(2, ("t-first", None))
    return records


BATCH_1: Final = _batch_1()
HEADERS_1: Final = [
    [("i", str(i))] + ([("third", "yes")] if i % 3 == 0 else []) for i in range(len(BATCH_1))
]
"""The record headers sent with :data:`BATCH_1` to the :data:`COMPRESSED` topics."""
BATCH_2: Final[list[tuple[str, str | None]]] = [
    ("n-001", "new-1"),
    ("n-002", "new-2"),
    ("k001", "overwritten-late"),
    ("k002", None),
    ("n-001", "new-1b"),
]


def topic_configs(delete_retention_ms: int) -> dict[str, str]:
    """The settings of both topics (and, in Kafka's words, of our logs in the tests)."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(SEGMENT_BYTES),
        "segment.ms": str(SEGMENT_MS),
        "index.interval.bytes": str(INDEX_INTERVAL_BYTES),
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": str(delete_retention_ms),
    }


_PRODUCER: Final = {"batch.size": "400", "linger.ms": "5", "acks": "all"}
_PRODUCER_ONE_BATCH: Final = {"batch.size": "65536", "linger.ms": "500", "acks": "all"}


@dataclass(frozen=True)
class KafkaScenario:
    """Paths and observations of one scenario run (see the module docstring)."""

    produced: Path
    """``produced/keep-0`` and ``produced/drop-0``: the broker's partition directories after run 1."""
    cleaned: Path
    """``cleaned/keep-0`` and ``cleaned/drop-0``: the same after Kafka's cleaner (run 2)."""
    broker_log_dir: Path
    """The broker's own log directory (after both runs), with its checkpoint files."""
    consumed_keep: list[tuple[int, int, str, str | None]]
    """``(offset, timestamp_ms, key, value)`` as ``kafka-console-consumer`` read ``keep`` in run 1."""
    compressed_first_active: dict[str, int]
    """Per codec: the base offset of the active segment of its topic during Kafka's first pass."""
    batch_2_offset: int
    """The offset of the first :data:`BATCH_2` record in ``drop`` (= records in :data:`BATCH_1`)."""
    timings: dict[str, float]
    """Seconds per step, for the report."""


def copy_partition(src: Path, dst_parent: Path) -> Path:
    """Copy a partition directory (keeping its ``<topic>-<partition>`` name) under ``dst_parent``."""
    dst_parent.mkdir(parents=True, exist_ok=True)
    dst = dst_parent / src.name
    shutil.copytree(src, dst)
    return dst


def read_kafka_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Parse one of Kafka's offset checkpoint files (version 0, count, ``topic partition offset``)."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    if len(lines) < 2 or lines[0] != "0":
        return {}  # being rewritten right now; the caller polls again
    entries: dict[tuple[str, int], int] = {}
    for line in lines[2:]:
        topic, partition, offset = line.split()
        entries[(topic, int(partition))] = int(offset)
    if len(entries) != int(lines[1]):
        return {}
    return entries


def _wait_for_checkpoint(
    broker: KafkaBroker, expected: dict[tuple[str, int], int], timeout_s: float
) -> None:
    """Wait until Kafka's ``cleaner-offset-checkpoint`` holds ``expected`` (its cleaner's passes)."""
    path = broker.log_dir / "cleaner-offset-checkpoint"
    deadline = time.monotonic() + timeout_s
    seen: dict[tuple[str, int], int] = {}
    while time.monotonic() < deadline:
        seen = read_kafka_checkpoint(path)
        if all(seen.get(tp) == offset for tp, offset in expected.items()):
            return
        if not broker.running:
            raise KafkaRuntimeError("the broker died while cleaning:\n" + broker.console_tail())
        time.sleep(0.2)
    raise KafkaRuntimeError(
        f"Kafka's cleaner did not reach {expected} in {timeout_s}s (checkpoint: {seen}):\n"
        + broker.console_tail()
    )


def _active_base_offset(partition_dir: Path) -> int:
    return max(int(p.name.split(".")[0]) for p in partition_dir.glob("*.log"))


def run_kafka_scenario(dist: KafkaDist, work: Path, *, timeout_s: float = 180) -> KafkaScenario:
    """Run both broker runs under ``work``; the broker is killed on any failure."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()

    def lap(label: str) -> None:
        nonlocal t0
        now = time.monotonic()
        timings[label] = round(now - t0, 2)
        t0 = now

    broker = KafkaBroker(dist, work / "broker")
    try:
        broker.start({"log.cleaner.enable": "false"}, timeout_s=timeout_s)
        lap("run 1: format + broker start")
        broker.create_topic(KEEP, topic_configs(KEEP_RETENTION_MS), timeout_s=timeout_s)
        broker.create_topic(DROP, topic_configs(0), timeout_s=timeout_s)
        for topic in COMPRESSED.values():
            configs = {**topic_configs(KEEP_RETENTION_MS), "compression.type": "producer"}
            broker.create_topic(topic, configs, timeout_s=timeout_s)
        lap("run 1: create 6 topics")
        broker.produce(KEEP, BATCH_1, producer_properties=_PRODUCER, timeout_s=timeout_s)
        broker.produce(DROP, BATCH_1, producer_properties=_PRODUCER, timeout_s=timeout_s)
        for codec, topic in COMPRESSED.items():
            broker.produce(
                topic,
                BATCH_1,
                producer_properties={**_PRODUCER, "compression.type": codec},
                headers=HEADERS_1,
                timeout_s=timeout_s,
            )
        lap("run 1: produce 6 x 245 records")
        consumed = broker.consume(KEEP, len(BATCH_1), timeout_s=timeout_s)
        lap("run 1: consume 245 records")
        broker.stop()
        lap("run 1: broker stop")
        produced = work / "produced"
        topics = (KEEP, DROP, *COMPRESSED.values())
        for topic in topics:
            copy_partition(broker.log_dir / f"{topic}-0", produced)
        first_active = {t: _active_base_offset(produced / f"{t}-0") for t in topics}

        broker.start(
            {"log.cleaner.enable": "true", "log.cleaner.backoff.ms": "100"}, timeout_s=timeout_s
        )
        lap("run 2: broker start")
        _wait_for_checkpoint(broker, {(t, 0): first_active[t] for t in topics}, timeout_s)
        lap("run 2: Kafka's first cleaner pass on every topic")
        time.sleep(SEGMENT_MS / 1000 + 0.5)  # so that BATCH_2 rolls the active segment
        broker.produce(DROP, BATCH_2, producer_properties=_PRODUCER_ONE_BATCH, timeout_s=timeout_s)
        _wait_for_checkpoint(broker, {(DROP, 0): len(BATCH_1)}, timeout_s)
        lap("run 2: produce BATCH_2 + Kafka's second pass on drop")
        broker.stop()
        lap("run 2: broker stop")
        cleaned = work / "cleaned"
        for topic in topics:
            copy_partition(broker.log_dir / f"{topic}-0", cleaned)
    finally:
        broker.kill()
    return KafkaScenario(
        produced=produced,
        cleaned=cleaned,
        broker_log_dir=broker.log_dir,
        consumed_keep=consumed,
        compressed_first_active={c: first_active[t] for c, t in COMPRESSED.items()},
        batch_2_offset=len(BATCH_1),
        timings=timings,
    )
