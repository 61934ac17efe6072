"""Compressed partitions, both ways, against Kafka 3.9.2: one codec at a time.

* Kafka writes, we read: the scenario's :data:`~tests.kafka.scenario.COMPRESSED`
  topics (a Java producer compressing with gzip, snappy, lz4, zstd, with record
  headers): our ``Log.read`` yields the records DumpLogSegments prints, with
  the headers the producer sent.
* Same compaction on compressed input: our cleaner on a copy of the produced
  partition keeps the records Kafka's cleaner kept, and rewrites batches in
  their own codec, as Kafka's.
* We write, Kafka reads: DumpLogSegments reads our compressed segments (and the
  same after our cleaner) record for record and accepts our indexes; one
  broker adopts our four partitions and a Java consumer reads them back.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from changelog.cleaner.clean import clean_log
from changelog.log.log import Log
from kafka_harness.broker import KafkaBroker
from kafka_harness.kafka_runtime import KafkaDist
from tests.kafka.helpers import (
    Row,
    dump_partition,
    kafka_rows,
    log_config,
    our_rows,
    our_verify,
    verify_indexes_with_kafka,
)
from tests.kafka.scenario import (
    BATCH_1,
    CODECS,
    COMPRESSED,
    HEADERS_1,
    KEEP_RETENTION_MS,
    KafkaScenario,
    copy_partition,
    read_kafka_checkpoint,
    topic_configs,
)

pytestmark = pytest.mark.kafka

BASE_TS = 1_700_000_000_000


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_what_a_compressing_producer_wrote(
    kafka_dist: KafkaDist, kafka_scenario: KafkaScenario, tmp_path: Path, codec: str
) -> None:
    produced = kafka_scenario.produced / f"{COMPRESSED[codec]}-0"
    dumped = dump_partition(kafka_dist, produced, compression=codec)
    assert all(b.compression == codec for f in dumped for b in f.batches)
    from_kafka = kafka_rows(dumped)
    assert [(o, k, v) for o, _, k, v in from_kafka] == [
        (i, k, v) for i, (k, v) in enumerate(BATCH_1)
    ]
    assert our_verify(produced).records == len(BATCH_1)
    copy = copy_partition(produced, tmp_path)
    with Log.open(copy, log_config(delete_retention_ms=KEEP_RETENTION_MS)) as log:
        assert our_rows(log) == from_kafka
        headers = [
            tuple((k, None if v is None else v.decode()) for k, v in r.headers) for r in log.read()
        ]
    assert headers == [tuple(h) for h in HEADERS_1]
    assert [list(r.header_keys) for r in kafka_rows_records(dumped)] == [
        [k for k, _ in h] for h in HEADERS_1
    ]


def kafka_rows_records(dumped: list) -> list:
    return [record for file in dumped for record in file.records]


@pytest.mark.parametrize("codec", CODECS)
def test_same_compaction_on_compressed_input(
    kafka_dist: KafkaDist, kafka_scenario: KafkaScenario, tmp_path: Path, codec: str
) -> None:
    topic = COMPRESSED[codec]
    kafka_cleaned = kafka_scenario.cleaned / f"{topic}-0"
    theirs = kafka_rows(dump_partition(kafka_dist, kafka_cleaned, compression=codec))
    assert len(theirs) < len(BATCH_1)
    copy = copy_partition(kafka_scenario.produced / f"{topic}-0", tmp_path)
    with Log.open(copy, log_config(delete_retention_ms=KEEP_RETENTION_MS)) as log:
        first_active = kafka_scenario.compressed_first_active[codec]
        assert log.active_segment.base_offset == first_active
        stats = clean_log(log, force=True)
        assert stats is not None and stats.end_offset == first_active
        mine = our_rows(log)
    assert {(o, k, v) for o, _, k, v in mine} == {(o, k, v) for o, _, k, v in theirs}
    dumped = dump_partition(kafka_dist, copy, compression=codec)
    assert kafka_rows(dumped) == mine
    verify_indexes_with_kafka(kafka_dist, copy, allow_empty_batch_mismatch=False)
    assert (
        read_kafka_checkpoint(kafka_scenario.broker_log_dir / "cleaner-offset-checkpoint")[
            (topic, 0)
        ]
        >= first_active
    )


def _write(directory: Path, codec: str) -> list[Row]:
    written: list[Row] = []
    config = log_config(
        delete_retention_ms=60_000,
        segment_bytes=1024,
        index_interval_bytes=100,
        compression_type=codec,
    )
    with Log.open(directory, config) as log:
        offset = 0
        for i in range(60):
            ts = BASE_TS + i * 1000 + (-2500 if i % 7 == 3 else 0)
            pairs: list[tuple[bytes | None, bytes | None]] = []
            for j in range(1 + i % 9):
                key = f"key-{(i * 7 + j) % 25:02d}"
                value = None if (i + j) % 5 == 0 else f"val-{i}-{j}-" + "y" * (i % 40)
                pairs.append((key.encode(), None if value is None else value.encode()))
                written.append((offset, ts, key, value))
                offset += 1
            log.append(pairs, timestamp_ms=ts)
        assert len(log.segments) >= 3
    return written


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_reads_our_compressed_segments_and_after_our_cleaner(
    kafka_dist: KafkaDist, tmp_path: Path, codec: str
) -> None:
    directory = tmp_path / "ours-0"
    written = _write(directory, codec)
    dumped = dump_partition(kafka_dist, directory, compression=codec)
    assert kafka_rows(dumped) == written
    assert all(b.compression == codec for f in dumped for b in f.batches)
    verify_indexes_with_kafka(kafka_dist, directory)
    with Log.open(directory, log_config(delete_retention_ms=60_000, segment_bytes=1024)) as log:
        assert clean_log(log, force=True, now_ms=BASE_TS + 600_000) is not None
        cleaned = our_rows(log)
    assert len(cleaned) < len(written)
    assert kafka_rows(dump_partition(kafka_dist, directory, compression=codec)) == cleaned
    verify_indexes_with_kafka(kafka_dist, directory, allow_empty_batch_mismatch=False)


def test_a_broker_serves_our_compressed_partitions(kafka_dist: KafkaDist, tmp_path: Path) -> None:
    """One broker adopts a partition of ours per codec; a Java consumer reads each back."""
    written = {codec: _write(tmp_path / f"ours-{codec}" / "t-0", codec) for codec in CODECS}
    broker = KafkaBroker(kafka_dist, tmp_path / "broker")
    consumed: dict[str, list[Row]] = {}
    try:
        broker.start({"log.cleaner.enable": "false"})
        for codec in CODECS:
            broker.create_topic(f"ours-{codec}", topic_configs(60_000))
        broker.stop()
        for codec in CODECS:
            target = broker.log_dir / f"ours-{codec}-0"
            for stale in target.iterdir():
                if stale.suffix in (".log", ".index", ".timeindex", ".snapshot"):
                    stale.unlink()
            for ours in (tmp_path / f"ours-{codec}" / "t-0").iterdir():
                if ours.suffix in (".log", ".index", ".timeindex"):
                    shutil.copy2(ours, target / ours.name)
        (broker.log_dir / ".kafka_cleanshutdown").unlink()
        broker.start({"log.cleaner.enable": "false"})
        for codec in CODECS:
            consumed[codec] = broker.consume(f"ours-{codec}", len(written[codec]))
        broker.stop()
    finally:
        broker.kill()
    assert consumed == written
    console = broker.console_tail(size=10**8)
    for complaint in ("Found a corrupted index file", "Found invalid", "Corruption found"):
        assert complaint not in console, f"Kafka's loader complained: {complaint}"
