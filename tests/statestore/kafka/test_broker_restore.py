"""Restore from a changelog topic (statestore.kafka.restore): the plan's rules and the replay loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from statestore.config import RocksDBConfig
from statestore.kafka import BrokerRestoreError, ChangelogTopicConfig
from statestore.kafka.restore import (
    PartitionReplay,
    RestoreSession,
    plan_broker_restore,
    restore_partition,
    stored_applied_time_ms,
    stored_topic_id,
)
from statestore.stores.engine import RocksDBEngine
from tests.statestore.kafka.fakes import FakeRestoreConsumer

DAY = 86_400_000
CONFIG = ChangelogTopicConfig(delete_retention_ms=DAY, staleness_margin_ms=60_000)
NOW = 10 * DAY


def _plan(**overrides: object) -> object:
    args: dict[str, object] = {
        "applied_offset": 50,
        "has_data": True,
        "stored_topic": "id-1",
        "applied_time_ms": NOW - 1000,
        "topic_id": "id-1",
        "log_start_offset": 0,
        "high_watermark": 100,
        "now_ms": NOW,
        "config": CONFIG,
    }
    args.update(overrides)
    return plan_broker_restore(**args)  # type: ignore[arg-type]


def test_fresh_state_restores_incrementally() -> None:
    plan = _plan()
    assert (plan.start_offset, plan.rebuild) == (50, False)  # type: ignore[attr-defined]


def test_an_empty_store_restores_from_the_log_start() -> None:
    plan = _plan(
        applied_offset=None,
        has_data=False,
        stored_topic=None,
        applied_time_ms=None,
        log_start_offset=7,
    )
    assert (plan.start_offset, plan.rebuild) == (7, False)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"topic_id": "id-2"}, "recreated"),
        ({"applied_time_ms": NOW - DAY + 59_000}, "stale"),
        ({"applied_time_ms": None}, "stale"),
        ({"applied_offset": 101}, "beyond"),
        ({"log_start_offset": 51}, "below"),
        ({"applied_offset": None}, "no applied offset"),
    ],
)
def test_rules_that_force_a_full_restore(overrides: dict[str, object], reason: str) -> None:
    plan = _plan(**overrides)
    assert plan.rebuild, plan  # type: ignore[attr-defined]
    assert reason in plan.reason  # type: ignore[attr-defined]
    assert plan.start_offset == overrides.get("log_start_offset", 0)  # type: ignore[attr-defined]


def test_just_inside_the_staleness_horizon_is_incremental() -> None:
    assert not _plan(applied_time_ms=NOW - DAY + 61_000).rebuild  # type: ignore[attr-defined]


def _engine(tmp_path: Path) -> RocksDBEngine:
    return RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None)


def test_replay_ends_by_position_over_gaps_and_markers(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    # offsets 1, 4 compacted away; 6 and 9 are transaction markers; 7 aborted (not returned)
    records = [(0, b"a", b"1"), (2, b"b", b"2"), (3, b"a", None), (5, b"c", b"3"), (8, b"d", b"4")]
    consumer = FakeRestoreConsumer(records, end_offset=10)
    count = restore_partition(
        consumer,
        engine,
        store="s",
        topic="t",
        partition=0,
        topic_id="id-1",
        start_offset=0,
        end_offset=10,
        batch_bytes=4,
        stall_timeout_s=5,
        wall_clock_ms=lambda: 777,
    )
    assert count == 5
    assert dict(engine.items()) == {b"b": b"2", b"c": b"3", b"d": b"4"}
    assert engine.applied_offset() == 10
    assert stored_topic_id(engine) == "id-1" and stored_applied_time_ms(engine) == 777
    assert consumer.unassigned == 1
    engine.close()


def test_incremental_replay_starts_at_the_stored_offset(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    engine.write([(b"a", b"old")], 3)
    consumer = FakeRestoreConsumer(
        [(0, b"a", b"0"), (3, b"b", b"3"), (4, b"a", b"4")], end_offset=5
    )
    restore_partition(
        consumer,
        engine,
        store="s",
        topic="t",
        partition=0,
        topic_id="id",
        start_offset=3,
        end_offset=5,
        batch_bytes=1000,
        stall_timeout_s=5,
    )
    assert consumer.assigned[0][0].offset == 3
    assert dict(engine.items()) == {b"a": b"4", b"b": b"3"}
    engine.close()


def test_a_restore_that_makes_no_progress_fails(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    consumer = FakeRestoreConsumer([(0, b"a", b"1")], end_offset=5, stuck_at=2)
    ticks = iter(range(0, 1000, 1))
    with pytest.raises(BrokerRestoreError) as caught:
        restore_partition(
            consumer,
            engine,
            store="s",
            topic="t",
            partition=0,
            topic_id="id",
            start_offset=0,
            end_offset=5,
            batch_bytes=1000,
            stall_timeout_s=3,
            clock=lambda: float(next(ticks)),
        )
    assert caught.value.offset == 2 and "no progress" in caught.value.reason
    assert "kafka-transactions.sh find-hanging" in caught.value.reason  # what to do about it
    assert consumer.unassigned == 1
    engine.close()


class _Batches:
    """A StateRestoreListener that records every WriteBatch (store, partition, count)."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, int, int]] = []
        self.ended: list[tuple[str, int, int]] = []

    def on_restore_start(self, store: str, partition: int, start: int, end: int) -> None:
        pass

    def on_batch_restored(self, store: str, partition: int, last: int, count: int) -> None:
        self.batches.append((store, partition, count))

    def on_restore_end(self, store: str, partition: int, total: int) -> None:
        self.ended.append((store, partition, total))


def test_a_session_restores_many_partitions_at_once(tmp_path: Path) -> None:
    partitions = 48
    per = 300
    logs = {
        p: ([(o, f"k{p}-{o}".encode(), b"v" * 10) for o in range(0, per * 2, 2)], per * 2 + 1)
        for p in range(partitions)
    }
    consumer = FakeRestoreConsumer([], 0, logs=logs, per_partition=100)
    listener = _Batches()
    session = RestoreSession(consumer, batch_bytes=1000, stall_timeout_s=5, listener=listener)
    engines = [
        RocksDBEngine.open(tmp_path / f"db-{p}", config=RocksDBConfig(), cache=None)
        for p in range(partitions)
    ]
    replays = [
        PartitionReplay(
            store="s",
            topic="t",
            partition=p,
            topic_id="id",
            engine=engines[p],
            start_offset=0,
            end_offset=per * 2 + 1,
        )
        for p in range(partitions)
    ]
    assert session.add(replays) == []
    assert len(consumer.assigned) == 1, "one assignment of every partition"
    # the topic's metadata is asked for once, before the assignment (no wait for
    # librdkafka's once-a-second topic scan)
    assert consumer.metadata_requests == ["t"]
    finished: list[PartitionReplay] = []
    steps = 0
    while len(finished) < partitions:
        finished.extend(session.step(0.01))
        steps += 1
        assert steps < 100
    # every partition advances in every step: the steps are those of one partition (+1 to
    # see the end), not the sum over partitions
    assert steps <= per // 100 + 2, steps
    assert session.active == 0 and consumer.unassigned >= 1
    for engine in engines:
        assert len(dict(engine.items())) == per
        assert engine.applied_offset() == per * 2 + 1
        engine.close()
    # WriteBatches sized by bytes: 1000 bytes of ~16-byte records, never a whole partition
    sizes = [count for _s, _p, count in listener.batches]
    assert max(sizes) < per and sum(sizes) == partitions * per
    assert sorted(listener.ended) == [("s", p, per) for p in range(partitions)]


def test_a_partition_with_nothing_to_replay_finishes_when_added(tmp_path: Path) -> None:
    consumer = FakeRestoreConsumer([], 0)
    session = RestoreSession(consumer, batch_bytes=1000, stall_timeout_s=5)
    engine = _engine(tmp_path)
    replay = PartitionReplay(
        store="s",
        topic="t",
        partition=0,
        topic_id="id",
        engine=engine,
        start_offset=7,
        end_offset=7,
    )
    assert session.add([replay]) == [replay]
    assert consumer.assigned == [] and engine.applied_offset() == 7
    assert stored_topic_id(engine) == "id"
    engine.close()


@pytest.mark.parametrize("start", [0, 2])
def test_a_ttl_store_restores_expired_values_as_deletes(tmp_path: Path, start: int) -> None:
    """The broker restore applies the local rule: a value stamped at or before the cutoff is a
    delete, so an older live value (applied before ``start``, or earlier in the replay) goes."""
    engine = _engine(tmp_path)
    stamp = (NOW).to_bytes(8, "big")
    engine.write([(b"a", stamp + b"old")], 2)  # what an incremental restore starts from
    # a@1 live for long; a@2 stamped earlier and expired; b@3 live; c@4 expired
    records = [(1, b"a", b"v1"), (2, b"a", b"v2"), (3, b"b", b"v3"), (4, b"c", b"v4")]
    timestamps = {1: NOW, 2: NOW - 500, 3: NOW - 10, 4: NOW - 100}
    consumer = FakeRestoreConsumer(records, end_offset=5, timestamps=timestamps)
    restore_partition(
        consumer,
        engine,
        store="s",
        topic="t",
        partition=0,
        topic_id="id",
        start_offset=start,
        end_offset=5,
        batch_bytes=1000,
        stall_timeout_s=5,
        record_format="timestamped",
        expiry_cutoff_ms=NOW - 100,
    )
    assert dict(engine.items()) == {b"b": (NOW - 10).to_bytes(8, "big") + b"v3"}
    engine.close()
