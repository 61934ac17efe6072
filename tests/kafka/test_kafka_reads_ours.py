"""Kafka reads ours: Kafka's DumpLogSegments on segments and indexes written by ``changelog``.

A log written by :class:`changelog.log.log.Log` (many segments, batches of 1-9
records, tombstones, timestamps that sometimes go backwards) and the same log
after our cleaner: Kafka finds every batch valid, the same offsets, keys,
values and timestamps as we wrote and read, and accepts our offset and time
indexes (``--verify-index-only``, ``--index-sanity-check``).  The active segment is
preallocated while the log is open (zeros past its last batch): Kafka reads the file
the clean close trimmed, with no invalid trailing bytes.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from changelog.cleaner.clean import clean_log
from changelog.config import CleanerConfig
from changelog.log.log import Log
from kafka_harness.broker import KafkaBroker
from kafka_harness.kafka_runtime import KafkaDist
from tests.kafka.helpers import (
    Row,
    dump_partition,
    kafka_rows,
    log_config,
    our_rows,
    verify_indexes_with_kafka,
)
from tests.kafka.scenario import topic_configs

pytestmark = pytest.mark.kafka

BASE_TS = 1_700_000_000_000
RETENTION_MS = 60_000


def _write(directory: Path, segment_bytes: int = 1024) -> list[Row]:
    """Append 60 batches to ``directory``; return every record written, as rows."""
    rng = random.Random(42)
    written: list[Row] = []
    config = log_config(
        delete_retention_ms=RETENTION_MS, segment_bytes=segment_bytes, index_interval_bytes=100
    )
    with Log.open(directory, config) as log:
        offset = 0
        for i in range(60):
            # Mostly increasing timestamps, sometimes a step back (the time index keeps the max).
            ts = BASE_TS + i * 1000 + (-2500 if i % 7 == 3 else 0)
            pairs: list[tuple[bytes | None, bytes | None]] = []
            for _ in range(rng.randrange(1, 10)):
                key = f"key-{rng.randrange(25):02d}"
                value = None if rng.random() < 0.2 else f"val-{i}-" + "y" * rng.randrange(60)
                pairs.append((key.encode(), None if value is None else value.encode()))
                written.append((offset, ts, key, value))
                offset += 1
            info = log.append(pairs, timestamp_ms=ts)
            assert info.first_offset == offset - len(pairs)
        assert len(log.segments) >= 4
        # preallocated (the default): zeros past the last batch until the clean close trims them
        active = log.active_segment
        assert config.preallocate
        assert active.log_path.stat().st_size > active.size_bytes
    assert active.log_path.stat().st_size == active.size_bytes
    return written


def test_kafka_reads_our_segments_and_indexes(kafka_dist: KafkaDist, tmp_path: Path) -> None:
    directory = tmp_path / "ours-0"
    written = _write(directory)

    dumped = dump_partition(kafka_dist, directory)
    assert kafka_rows(dumped) == written
    for file in dumped:
        for batch in file.batches:
            assert not batch.is_control and not batch.is_transactional
            assert batch.producer_id == -1
            assert batch.delete_horizon_ms is None
            assert batch.count == len(batch.records)
            assert batch.last_offset == batch.records[-1].offset
    assert sum(len(f.batches) for f in dumped) == 60
    assert len(dumped) >= 5
    assert any((directory / f"{p.path.name[:20]}.index").stat().st_size > 0 for p in dumped)
    verify_indexes_with_kafka(kafka_dist, directory)

    with Log.open(directory, log_config(delete_retention_ms=RETENTION_MS)) as log:
        assert our_rows(log) == written


@pytest.mark.parametrize(
    ("segment_bytes", "io_buffer_size_bytes"),
    [(1024, 512 * 1024), (4096, 1024)],
    ids=["one-write-per-segment", "many-writes-per-segment"],
)
def test_kafka_reads_our_cleaned_segments(
    kafka_dist: KafkaDist, tmp_path: Path, segment_bytes: int, io_buffer_size_bytes: int
) -> None:
    """Small I/O buffers make the cleaner append its output in many writes, each
    possibly holding several batches: every index entry must still name the last
    offset of the batch at its position, as Kafka's ``LogSegment.append`` does."""
    directory = tmp_path / "ours-0"
    written = _write(directory, segment_bytes)
    now = BASE_TS + 10 * 60_000
    config = log_config(
        delete_retention_ms=RETENTION_MS, segment_bytes=segment_bytes, index_interval_bytes=100
    )
    with Log.open(directory, config) as log:
        active_base = log.active_segment.base_offset
        cleaner = CleanerConfig(io_buffer_size_bytes=io_buffer_size_bytes)
        stats = clean_log(log, force=True, config=cleaner, now_ms=now)
        assert stats is not None
        cleaned = our_rows(log)
    # What a first pass must keep: the latest record per key below the active
    # segment (tombstones included: their horizon starts now), everything above.
    latest: dict[str, int] = {}
    for row in written:
        if row[0] < active_base:
            latest[row[2]] = row[0]
    expected = [r for r in written if r[0] >= active_base or latest[r[2]] == r[0]]
    assert cleaned == expected
    assert any(r[3] is None for r in cleaned if r[0] < active_base)

    dumped = dump_partition(kafka_dist, directory)
    assert kafka_rows(dumped) == cleaned
    for file in dumped:
        for batch in file.batches:
            has_tombstone = any(r.value is None for r in batch.records)
            if batch.base_offset < active_base and has_tombstone:
                # KIP-534: the first pass that keeps a tombstone stamps its batch.
                assert batch.delete_horizon_ms == now + RETENTION_MS
    verify_indexes_with_kafka(kafka_dist, directory, allow_empty_batch_mismatch=False)


def test_a_broker_serves_our_partition(kafka_dist: KafkaDist, tmp_path: Path) -> None:
    """A real broker adopts a partition directory written by us and serves it to a consumer.

    The topic is created (so the controller knows it), the broker stopped, the
    partition's segment files replaced with ours, and Kafka's clean-shutdown
    marker removed so that its loader re-validates every batch (CRC, offsets)
    and rebuilds the indexes, truncating anything it does not accept.
    """
    written = _write(tmp_path / "ours-0")
    broker = KafkaBroker(kafka_dist, tmp_path / "broker")
    try:
        broker.start({"log.cleaner.enable": "false"})
        broker.create_topic("ours", topic_configs(RETENTION_MS))
        broker.stop()
        target = broker.log_dir / "ours-0"
        for stale in target.iterdir():
            if stale.suffix in (".log", ".index", ".timeindex", ".snapshot"):
                stale.unlink()
        for ours in (tmp_path / "ours-0").iterdir():
            if ours.suffix in (".log", ".index", ".timeindex"):
                shutil.copy2(ours, target / ours.name)
        (broker.log_dir / ".kafka_cleanshutdown").unlink()
        broker.start({"log.cleaner.enable": "false"})
        consumed = broker.consume("ours", len(written))
        broker.stop()
    finally:
        broker.kill()
    assert consumed == written
    console = broker.console_tail(size=10**8)
    assert "Recovering unflushed segment" in console and "recovered for ours-0" in console
    for complaint in ("Found a corrupted index file", "Found invalid", "Corruption found"):
        assert complaint not in console, f"Kafka's loader complained: {complaint}"
