"""We read Kafka's: partition directories written by a real broker, opened with ``changelog``.

The broker's directories hold more than segments (``partition.metadata``,
``leader-epoch-checkpoint``, producer-state ``.snapshot`` files and, after its
cleaner, ``.deleted`` leftovers); Kafka keeps its checkpoint files one level up,
so our loader sees no checkpoints and no clean-shutdown marker and re-validates
everything.  We open copies (``Log.open`` locks and writes checkpoints), and
the records must be exactly what the console consumer and DumpLogSegments saw.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from changelog.log.log import Log
from kafka_harness.kafka_runtime import KafkaDist
from tests.kafka.helpers import (
    dump_partition,
    kafka_rows,
    log_config,
    our_rows,
    our_verify,
    segment_files,
    verify_indexes_with_kafka,
)
from tests.kafka.scenario import (
    BATCH_1,
    BATCH_2,
    DROP,
    KEEP,
    KEEP_RETENTION_MS,
    KafkaScenario,
    copy_partition,
)

pytestmark = pytest.mark.kafka


def _open_copy(src: Path, dst_parent: Path, delete_retention_ms: int) -> Log:
    copy = copy_partition(src, dst_parent)
    return Log.open(copy, log_config(delete_retention_ms=delete_retention_ms))


def test_we_read_a_produced_partition(
    kafka_dist: KafkaDist, kafka_scenario: KafkaScenario, tmp_path: Path
) -> None:
    produced = kafka_scenario.produced / f"{KEEP}-0"
    assert len(segment_files(produced, ".log")) >= 4, "segment.bytes should have rolled the log"
    dumped = dump_partition(kafka_dist, produced)
    from_kafka = kafka_rows(dumped)
    assert [(o, k, v) for o, _, k, v in from_kafka] == [
        (i, k, v) for i, (k, v) in enumerate(BATCH_1)
    ]
    assert from_kafka == kafka_scenario.consumed_keep
    assert any(len(b.records) > 1 for f in dumped for b in f.batches), "want multi-record batches"
    assert our_verify(produced).records == len(BATCH_1)

    with _open_copy(produced, tmp_path, KEEP_RETENTION_MS) as log:
        assert log.log_start_offset == 0
        assert log.log_end_offset == len(BATCH_1)
        assert [s.base_offset for s in log.segments] == [
            int(p.name[:20]) for p in segment_files(produced, ".log")
        ]
        assert our_rows(log) == from_kafka
        for segment in log.segments:
            segment.sanity_check()
        copy = log.dir
    # What our loader left behind (it re-validated and may have rebuilt indexes) is still Kafka's.
    assert kafka_rows(dump_partition(kafka_dist, copy)) == from_kafka
    verify_indexes_with_kafka(kafka_dist, copy)
    our_verify(copy)


@pytest.mark.parametrize("topic", [KEEP, DROP])
def test_we_read_a_partition_cleaned_by_kafka(
    kafka_dist: KafkaDist, kafka_scenario: KafkaScenario, tmp_path: Path, topic: str
) -> None:
    cleaned = kafka_scenario.cleaned / f"{topic}-0"
    from_kafka = kafka_rows(dump_partition(kafka_dist, cleaned))
    offsets = [row[0] for row in from_kafka]
    assert offsets == sorted(offsets)
    assert len(offsets) < len(BATCH_1), "Kafka's cleaner should have removed records"
    assert our_verify(cleaned).records == len(from_kafka)
    retention = KEEP_RETENTION_MS if topic == KEEP else 0
    with _open_copy(cleaned, tmp_path, retention) as log:
        expected_end = len(BATCH_1) + (len(BATCH_2) if topic == DROP else 0)
        assert log.log_end_offset == expected_end
        assert our_rows(log) == from_kafka
        # A reader resuming inside a gap continues at the next record.
        gap = next(o + 1 for o, n in itertools.pairwise(offsets) if n > o + 1)
        assert next(iter(log.read(gap))).offset == offsets[offsets.index(gap - 1) + 1]
        for segment in log.segments:
            segment.sanity_check()
