"""Transactions against a real broker: Kafka writes them, we read them; we write them, Kafka reads them.

The broker side is :mod:`tests.kafka.txn_scenario` (Kafka's Java producers,
interleaved record by record, about a third of the transactions aborted, plus
a non-transactional producer).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from changelog.fs import files
from changelog.log.log import Log
from changelog.record.control import ControlRecordType
from kafka_harness.dump_parser import parse_log_dump, parse_txn_index_dump
from kafka_harness.kafka_runtime import KafkaDist
from tests.kafka.helpers import segment_files
from tests.kafka.scenario import copy_partition
from tests.kafka.txn_scenario import TxnScenario, run_txn_scenario

pytestmark = pytest.mark.kafka

Row = tuple[int, str, str | None]


@pytest.fixture(scope="module")
def txn_scenario(kafka_dist: KafkaDist, tmp_path_factory: pytest.TempPathFactory) -> TxnScenario:
    """One broker run of the transaction scenario."""
    scenario = run_txn_scenario(kafka_dist, tmp_path_factory.mktemp("kafka-txn"))
    print(f"kafka: transaction scenario timings {scenario.timings}")
    return scenario


def _config() -> LogConfig:
    return LogConfig(
        segment_bytes=1024,
        index_interval_bytes=128,
        min_cleanable_dirty_ratio=0.01,
        min_compaction_lag_ms=0,
        delete_retention_ms=86_400_000,
        cleanup_policy="compact",
    )


def _rows(log: Log, isolation: str) -> list[Row]:
    out: list[Row] = []
    for record in log.read(0, isolation=isolation):  # type: ignore[arg-type]
        assert record.key is not None
        out.append(
            (
                record.offset,
                record.key.decode(),
                None if record.value is None else record.value.decode(),
            )
        )
    return out


def test_we_read_exactly_what_kafkas_consumer_reads(
    txn_scenario: TxnScenario, tmp_path: Path
) -> None:
    produced = txn_scenario.produced
    assert len(segment_files(produced, ".log")) >= 5
    assert len(segment_files(produced, ".txnindex")) >= 2, (
        "want aborted transactions in several segments"
    )
    committed, uncommitted = txn_scenario.read_committed, txn_scenario.read_uncommitted
    assert len(uncommitted) > len(committed) > 20  # aborted records exist
    assert any(k == "shadow" and v == "aborted-0" for _o, k, v in uncommitted)
    with Log.open(copy_partition(produced, tmp_path), _config()) as log:
        assert log.open_transactions() == {}
        assert log.last_stable_offset == txn_scenario.committed_end == log.log_end_offset
        assert _rows(log, "read_committed") == committed
        assert _rows(log, "read_uncommitted") == uncommitted


def test_our_rebuilt_txnindex_is_byte_for_byte_kafkas(
    txn_scenario: TxnScenario, tmp_path: Path
) -> None:
    produced = txn_scenario.produced
    kafkas = {p.name: p.read_bytes() for p in segment_files(produced, ".txnindex")}
    copy = copy_partition(produced, tmp_path)
    for name in kafkas:
        (copy / name).unlink()  # ours must come from the log alone (loader pass L10)
    with Log.open(copy, _config()) as log:
        assert sum(len(s.txn_index) for s in log.segments) == sum(
            len(b) // 34 for b in kafkas.values()
        )
    ours = {p.name: p.read_bytes() for p in segment_files(copy, ".txnindex")}
    assert ours == kafkas


def test_kafka_reads_our_transactional_segments_and_txnindex(
    kafka_dist: KafkaDist, tmp_path: Path
) -> None:
    directory = tmp_path / "ours-0"
    expected_markers: dict[int, str] = {}
    with Log.open(directory, _config()) as log:
        for round_ in range(6):
            for pid in (1, 2, 3):
                log.append_transactional(
                    [(f"k{pid}{round_}".encode(), f"v{pid}-{round_}".encode())],
                    producer_id=pid,
                    producer_epoch=round_ // 3,
                )
            log.append([(b"plain", f"p{round_}".encode())])
            for pid in (3, 1, 2):
                kind = (
                    ControlRecordType.ABORT if (pid + round_) % 3 == 0 else ControlRecordType.COMMIT
                )
                info = log.append_marker(kind, producer_id=pid, producer_epoch=round_ // 3)
                expected_markers[info.first_offset] = kind.name
        entries = {
            files.segment_file_name(s.base_offset, ".txnindex"): [
                (0, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
                for e in s.txn_index.entries
            ]
            for s in log.segments
            if len(s.txn_index)
        }
    assert entries, "some aborted transactions"
    logs = segment_files(directory, ".log")
    dump = kafka_dist.dump_log_segments(logs, "--deep-iteration", "--print-data-log")
    parsed = parse_log_dump(dump.stdout)
    markers: dict[int, str] = {}
    for file in parsed.values():
        assert file.invalid_trailing_bytes == 0
        for batch in file.batches:
            assert batch.is_valid
            if batch.is_control:
                assert batch.is_transactional and batch.base_sequence == -1
                (record,) = batch.records
                assert record.marker is not None
                markers[record.offset] = record.marker
            elif batch.producer_id >= 0:
                assert batch.is_transactional and batch.base_sequence >= 0
    assert markers == expected_markers
    indexes = segment_files(directory, ".txnindex")
    dumped = parse_txn_index_dump(kafka_dist.dump_log_segments(indexes).stdout)
    assert {p.name: e for p, e in dumped.items()} == entries


def _markers(log: Log) -> list[tuple[int, int]]:
    return [
        (h.base_offset, h.producer_id)
        for h, _ in log.read_batches(0, isolation="read_uncommitted")
        if h.is_control and h.records_count
    ]


def test_our_cleaner_keeps_exactly_what_kafkas_keeps(
    txn_scenario: TxnScenario, tmp_path: Path
) -> None:
    with Log.open(copy_partition(txn_scenario.cleaned, tmp_path / "kafka"), _config()) as kafkas:
        kafka_rows = _rows(kafkas, "read_uncommitted")
        kafka_markers = _markers(kafkas)
    with Log.open(copy_partition(txn_scenario.produced, tmp_path / "ours"), _config()) as ours:
        before = _rows(ours, "read_uncommitted")
        stats = clean_log(ours, force=True)
        assert stats is not None
        our_rows = _rows(ours, "read_uncommitted")
        our_markers = _markers(ours)
        committed_after = _rows(ours, "read_committed")
    assert our_rows == kafka_rows
    assert our_markers == kafka_markers
    # Not vacuous: the cleaner removed aborted and shadowed records, and kept the committed
    # value that an aborted record shadowed.
    assert len(our_rows) < len(before)
    assert ("shadow", "aborted-0") not in [(k, v) for _o, k, v in our_rows]
    assert ("shadow", "committed-0") in [(k, v) for _o, k, v in our_rows]
    assert our_rows == committed_after  # nothing aborted is left below the cleaned range
