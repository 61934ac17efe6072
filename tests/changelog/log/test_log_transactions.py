"""Transactions in a log: transactional batches, markers, the LSO, isolation levels, .txnindex."""

from __future__ import annotations

from pathlib import Path

import pytest

from changelog.config import LogConfig
from changelog.errors import CorruptRecordError, InvalidConfigError, InvalidProducerEpochError
from changelog.fs import files
from changelog.log.log import Log
from changelog.record.control import ControlRecordType
from changelog.segment.txn_index import AbortedTxn
from tests.changelog.conftest import FakeClock

COMMIT = ControlRecordType.COMMIT
ABORT = ControlRecordType.ABORT


def kv(log: Log, isolation: str = "read_committed") -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.read(0, isolation=isolation)]  # type: ignore[arg-type]


def txn(log: Log, pid: int, *pairs: tuple[bytes, bytes | None], epoch: int = 0) -> int:
    return log.append_transactional(list(pairs), producer_id=pid, producer_epoch=epoch).first_offset


def mark(log: Log, pid: int, kind: ControlRecordType, epoch: int = 0) -> int:
    return log.append_marker(kind, producer_id=pid, producer_epoch=epoch).first_offset


def test_interleaved_transactions_read_committed_and_uncommitted(open_log: Log) -> None:
    log = open_log
    log.append([(b"plain", b"p0")])  # 0
    txn(log, 1, (b"a", b"a1"))  # 1
    txn(log, 2, (b"b", b"b1"))  # 2
    assert log.last_stable_offset == 1
    assert kv(log) == [(0, b"plain", b"p0")]
    log.append([(b"plain", b"p1")])  # 3: not transactional, but above the LSO
    txn(log, 1, (b"a", b"a2"))  # 4
    mark(log, 2, ABORT)  # 5
    assert log.last_stable_offset == 1  # producer 1 still open
    mark(log, 1, COMMIT)  # 6
    assert log.last_stable_offset == log.log_end_offset == 7
    assert kv(log) == [
        (0, b"plain", b"p0"),
        (1, b"a", b"a1"),
        (3, b"plain", b"p1"),
        (4, b"a", b"a2"),
    ]
    assert kv(log, "read_uncommitted") == [
        (0, b"plain", b"p0"),
        (1, b"a", b"a1"),
        (2, b"b", b"b1"),
        (3, b"plain", b"p1"),
        (4, b"a", b"a2"),
    ]
    # Producer 2 was aborted while producer 1 (first offset 1) was still open.
    assert log.aborted_transactions(0, 7) == [AbortedTxn(2, 2, 5, 1)]
    assert log.open_transactions() == {}


def test_batches_of_a_transaction_get_increasing_sequences(open_log: Log) -> None:
    txn(open_log, 5, (b"a", b"1"), (b"b", b"2"))
    txn(open_log, 5, (b"c", b"3"))
    mark(open_log, 5, COMMIT)
    headers = [h for h, _ in open_log.read_batches(0, isolation="read_uncommitted")]
    assert [(h.base_sequence, h.is_transactional, h.is_control) for h in headers] == [
        (0, True, False),
        (2, True, False),
        (-1, True, True),
    ]


def test_an_older_epoch_is_fenced(open_log: Log) -> None:
    txn(open_log, 3, (b"a", b"1"), epoch=2)
    end = open_log.log_end_offset
    with pytest.raises(InvalidProducerEpochError) as info:
        txn(open_log, 3, (b"a", b"2"), epoch=1)
    assert (info.value.producer_epoch, info.value.current_epoch) == (1, 2)
    with pytest.raises(InvalidProducerEpochError):
        mark(open_log, 3, COMMIT, epoch=1)
    assert open_log.log_end_offset == end


def test_bad_isolation_level(open_log: Log) -> None:
    with pytest.raises(InvalidConfigError):
        list(open_log.read(0, isolation="dirty"))  # type: ignore[arg-type]


def test_txnindex_lives_in_the_segment_of_the_marker(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    with Log.open(log_dir, small_config, clock) as log:
        first = txn(log, 1, (b"k", b"x" * 300))
        for n in range(4):  # rolls: 1024-byte segments
            txn(log, 1, (b"k%d" % n, b"y" * 300))
        marker = mark(log, 1, ABORT)
        assert len(log.segments) > 2
        holder = log.segments[-1]
        assert holder.txn_index.entries == (AbortedTxn(1, first, marker, marker + 1),)
        assert all(len(s.txn_index) == 0 for s in log.segments[:-1])
        assert kv(log) == []
        log.append([(b"after", b"1")])
        assert kv(log) == [(marker + 1, b"after", b"1")]
    names = sorted(p.name for p in log_dir.glob("*.txnindex"))
    assert names == [files.segment_file_name(holder.base_offset, ".txnindex")]


def test_reopen_rebuilds_state_and_lost_or_damaged_txnindex(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    with Log.open(log_dir, small_config, clock) as log:
        txn(log, 1, (b"a", b"1"))
        txn(log, 2, (b"b", b"2"))
        mark(log, 1, ABORT)
        txn(log, 3, (b"c", b"3"))  # left open
        expected = log.aborted_transactions(0, log.log_end_offset)
        lso = log.last_stable_offset
    (index_file,) = log_dir.glob("*.txnindex")
    good = index_file.read_bytes()
    for damage in (None, good[:-3], b"\x00\x07" + good[2:]):  # lost, torn, bad version
        if damage is None:
            index_file.unlink()
        else:
            index_file.write_bytes(damage)
        with Log.open(log_dir, small_config, clock) as log:
            assert log.aborted_transactions(0, log.log_end_offset) == expected
            assert log.last_stable_offset == lso == 1
            assert log.open_transactions() == {2: 1, 3: 3}
            assert kv(log) == []
        assert index_file.read_bytes() == good


def test_state_survives_a_crash(log_dir: Path, small_config: LogConfig, clock: FakeClock) -> None:
    log = Log.open(log_dir, small_config, clock)
    txn(log, 1, (b"a", b"1"))
    mark(log, 1, COMMIT)
    txn(log, 2, (b"b", b"2"))
    log.abandon()
    with Log.open(log_dir, small_config, clock) as again:
        assert again.open_transactions() == {2: 2}
        assert kv(again) == [(0, b"a", b"1")]
        mark(again, 2, ABORT)
        assert kv(again) == [(0, b"a", b"1")]
        assert again.aborted_transactions(0, again.log_end_offset) == [AbortedTxn(2, 2, 3, 4)]


def test_truncation_rebuilds_the_producer_state(open_log: Log) -> None:
    txn(open_log, 1, (b"a", b"1"))
    mark(open_log, 1, ABORT)
    open_log.append([(b"z", b"1")])
    assert open_log.last_stable_offset == 3
    open_log.truncate_to(1)  # the marker goes: the transaction is open again
    assert open_log.open_transactions() == {1: 0}
    assert open_log.last_stable_offset == 0
    assert open_log.aborted_transactions(0, 5) == []
    assert not any(p.stat().st_size for p in open_log.dir.glob("*.txnindex"))


def test_a_corrupt_marker_is_reported_and_the_open_changes_nothing(
    log_dir: Path, small_config: LogConfig, clock: FakeClock
) -> None:
    with Log.open(log_dir, small_config, clock) as log:
        txn(log, 1, (b"a", b"1"))
        mark(log, 1, COMMIT)
        segment = log.segments[-1].log_path
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF  # inside the marker's record, under its CRC
    segment.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in log_dir.iterdir() if p.is_file()}
    with pytest.raises(CorruptRecordError) as info:
        Log.open(log_dir, small_config, clock)
    assert info.value.path == segment
    after = {p.name: p.read_bytes() for p in log_dir.iterdir() if p.is_file() and p.name != ".lock"}
    before.pop(".lock", None)
    assert after == before
