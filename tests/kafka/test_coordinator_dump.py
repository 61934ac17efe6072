"""Kafka's DumpLogSegments reads what the local transaction coordinator writes.

A state directory written through :class:`StateManager`: committed
transactions over two stores (three partitions), one undecided transaction
(crash after T2) that the next open aborts with ABORT markers, and one
decided without markers (crash after T3) that the next open rolls forward.
Kafka's tool must read every store changelog segment (transactional batches,
COMMIT and ABORT markers), the ``.txnindex`` of the aborted one, and the
coordinator's own ``__transaction_state-0`` without complaint.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from changelog.fs import files
from changelog.log.log import Log
from kafka_harness.dump_parser import parse_log_dump, parse_txn_index_dump
from kafka_harness.kafka_runtime import KafkaDist
from statestore.manager import StateManager
from statestore.partitioner import partition_for
from statestore.txn.coordinator import TRANSACTION_LOG_DIR
from tests.kafka.helpers import segment_files
from tests.statestore.helpers import NO_CLEANER

pytestmark = pytest.mark.kafka


class Crash(BaseException):
    pass


def _crash_at(step: str) -> object:
    def hook(name: str) -> None:
        if name == step:
            raise Crash(step)

    return hook


def _write(manager: StateManager, n: int) -> None:
    """Commit ``n``: a key in ``a`` and at least one key in each partition of ``b``."""
    a, b = manager.store("a"), manager.store("b", partitions=2)
    a[f"a{n}"] = n
    covered: set[int] = set()
    j = 0
    while covered != {0, 1}:
        key = f"b{n}-{j}"
        b[key] = n
        covered.add(partition_for(key.encode(), 2))
        j += 1


def _crashed_commit(state: Path, n: int, step: str) -> None:
    manager = StateManager(state, config=NO_CLEANER)
    _write(manager, n)
    manager.coordinator.fault_hook = _crash_at(step)  # type: ignore[assignment]
    with pytest.raises(Crash):
        manager.commit()
    manager.crash()


def test_kafka_reads_a_state_dir_the_coordinator_wrote(
    kafka_dist: KafkaDist, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        for n in range(3):
            _write(manager, n)
            manager.commit()
    _crashed_commit(state, 3, "T2")  # undecided: aborted at the next open
    with StateManager(state, config=NO_CLEANER) as manager:
        _write(manager, 4)
        manager.commit()
    _crashed_commit(state, 5, "T3")  # decided: rolled forward at the next open
    with StateManager(state, config=NO_CLEANER) as manager:
        _write(manager, 6)
        manager.commit()
        assert manager.store("a")["a5"] == 5
        assert "a3" not in manager.store("a")

    for directory in (state / "a-changelog-0", state / "b-changelog-0", state / "b-changelog-1"):
        with Log.open(directory) as log:
            expected_entries = {
                files.segment_file_name(s.base_offset, ".txnindex"): [
                    (0, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
                    for e in s.txn_index.entries
                ]
                for s in log.segments
                if len(s.txn_index)
            }
        dump = kafka_dist.dump_log_segments(
            segment_files(directory, ".log"), "--deep-iteration", "--print-data-log"
        )
        markers: list[str] = []
        for file in parse_log_dump(dump.stdout).values():
            assert file.invalid_trailing_bytes == 0
            for batch in file.batches:
                assert batch.is_valid
                assert batch.is_transactional, directory  # every commit here is a transaction
                if batch.is_control:
                    (record,) = batch.records
                    assert record.marker is not None
                    markers.append(record.marker)
        # commits 0, 1, 2, ABORT of 3, 4, the rolled-forward 5, 6
        assert markers == ["COMMIT"] * 3 + ["ABORT"] + ["COMMIT"] * 3, directory
        assert len(expected_entries) == 1, directory  # the aborted transaction's entry
        indexes = segment_files(directory, ".txnindex")
        dumped = parse_txn_index_dump(kafka_dist.dump_log_segments(indexes).stdout)
        assert {p.name: e for p, e in dumped.items()} == expected_entries

    # Without --print-data-log: our values are binary (the parser of the printed form wants
    # text); Kafka reads every batch and record all the same.
    coordinator_dump = kafka_dist.dump_log_segments(
        segment_files(state / TRANSACTION_LOG_DIR, ".log"), "--deep-iteration"
    )
    out = coordinator_dump.stdout
    print(out[-600:])
    batch_lines = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    record_lines = [line for line in out.splitlines() if line.startswith("| offset:")]
    assert batch_lines and all("isvalid: true" in line for line in batch_lines)
    assert all("isTransactional: false" in line for line in batch_lines)
    assert all("keySize: 20" in line for line in record_lines)  # every key: our transactional id
    # an Empty record per open (5), a PrepareCommit per decided transaction (6),
    # a CompleteCommit per clean close (3)
    assert len(record_lines) == 5 + 6 + 3
    assert "invalid" not in out.lower().replace("isvalid", "")
