"""Same compaction: Kafka's cleaner and ours, on the same segments with the same settings.

The input is the broker's own partition directories before its cleaner ran
(``produced/``, see :mod:`tests.kafka.scenario`); Kafka's result is the same
directories after its cleaner (``cleaned/``).  We copy the input, run our
cleaner the way Kafka's ran, and compare the surviving ``(offset, key, value)``
sets.

Tombstone timing is controlled through ``delete.retention.ms``:

* ``keep`` (one day): one pass each.  Both keep the latest tombstone of each
  key (its delete horizon, ``now + one day``, is far away) and stamp it.
* ``drop`` (0): Kafka's first pass stamps tombstones with the horizon ``now``;
  its second pass (started by the new dirty data of ``BATCH_2``, see the
  scenario) removes the stamped ones.  Tombstones that the second pass reaches
  for the first time (those in the segment that was active during the first
  pass) are only stamped, and stay.  We do the same: pass 1, roll, append
  ``BATCH_2``, pass 2 one second later.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from changelog.cleaner.clean import clean_log
from changelog.config import CleanerConfig
from changelog.log.log import Log
from kafka_harness.kafka_runtime import KafkaDist
from tests.kafka.helpers import Row, dump_partition, kafka_rows, log_config, our_rows
from tests.kafka.scenario import (
    BATCH_2,
    DROP,
    KEEP,
    KEEP_RETENTION_MS,
    KafkaScenario,
    copy_partition,
    read_kafka_checkpoint,
)

pytestmark = pytest.mark.kafka

Survivor = tuple[int, str, str | None]


def _survivors(rows: list[Row]) -> set[Survivor]:
    return {(offset, key, value) for offset, _, key, value in rows}


def _tombstones(rows: list[Row]) -> set[int]:
    return {row[0] for row in rows if row[3] is None}


def test_same_compaction_keeping_tombstones(
    kafka_dist: KafkaDist, kafka_scenario: KafkaScenario, tmp_path: Path
) -> None:
    produced = kafka_scenario.produced / f"{KEEP}-0"
    before = kafka_rows(dump_partition(kafka_dist, produced))
    kafka_dump = dump_partition(kafka_dist, kafka_scenario.cleaned / f"{KEEP}-0")
    kafka_after = kafka_rows(kafka_dump)

    copy = copy_partition(produced, tmp_path)
    now = int(time.time() * 1000)
    with Log.open(copy, log_config(delete_retention_ms=KEEP_RETENTION_MS)) as log:
        active_base = log.active_segment.base_offset
        stats = clean_log(log, force=True, config=CleanerConfig(), now_ms=now)
        assert stats is not None
        ours_after = our_rows(log)
    kafka_checkpoint = read_kafka_checkpoint(
        kafka_scenario.broker_log_dir / "cleaner-offset-checkpoint"
    )
    assert kafka_checkpoint[(KEEP, 0)] == active_base  # both cleaned [0, active segment)

    assert _survivors(ours_after) == _survivors(kafka_after)
    assert len(kafka_after) < len(before)
    assert _tombstones(kafka_after), "the comparison should include kept tombstones"
    # Kept records keep their timestamps, in both.
    assert sorted(ours_after) == sorted(kafka_after)

    ours_dump = dump_partition(kafka_dist, copy)
    assert kafka_rows(ours_dump) == ours_after
    for dumped in (kafka_dump, ours_dump):
        for file in dumped:
            for batch in file.batches:
                if batch.base_offset < active_base and any(r.value is None for r in batch.records):
                    assert batch.delete_horizon_ms is not None, f"{file.path}: unstamped tombstone"


def test_same_compaction_dropping_tombstones(
    kafka_dist: KafkaDist, kafka_scenario: KafkaScenario, tmp_path: Path
) -> None:
    produced = kafka_scenario.produced / f"{DROP}-0"
    before = kafka_rows(dump_partition(kafka_dist, produced))
    kafka_after = kafka_rows(dump_partition(kafka_dist, kafka_scenario.cleaned / f"{DROP}-0"))
    batch_2 = [row for row in kafka_after if row[0] >= kafka_scenario.batch_2_offset]
    assert [(k, v) for _, _, k, v in batch_2] == BATCH_2  # the active segment is never cleaned
    assert len({ts for _, ts, _, _ in batch_2}) >= 1

    copy = copy_partition(produced, tmp_path)
    first_pass = int(time.time() * 1000)
    with Log.open(copy, log_config(delete_retention_ms=0)) as log:
        first_active = log.active_segment.base_offset
        assert clean_log(log, force=True, config=CleanerConfig(), now_ms=first_pass) is not None
        after_first = our_rows(log)
        # Kafka rolled here: BATCH_2 came after segment.ms.  It was one batch with its
        # producer's timestamps; we append the same records as one batch.
        log.roll()
        assert log.active_segment.base_offset == kafka_scenario.batch_2_offset
        info = log.append(
            [(k.encode(), None if v is None else v.encode()) for k, v in BATCH_2],
            timestamp_ms=batch_2[0][1],
        )
        assert info.first_offset == kafka_scenario.batch_2_offset
        assert (
            clean_log(log, force=True, config=CleanerConfig(), now_ms=first_pass + 1000) is not None
        )
        ours_after = our_rows(log)

    assert _survivors(ours_after) == _survivors(kafka_after)
    # The comparison is not vacuous: the first pass kept tombstones below the first
    # active segment, the second removed them; tombstones it saw first stay.
    dropped = {o for o in _tombstones(after_first) if o < first_active}
    assert dropped
    assert not dropped & _tombstones(kafka_after)
    assert {
        o for o in _tombstones(kafka_after) if first_active <= o < kafka_scenario.batch_2_offset
    }
    assert len(kafka_after) < len(before)
