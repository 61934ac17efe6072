"""``manager.transaction()``, ``store.transaction()``, the metadata store, and what a commit writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from changelog import Log
from changelog.log.isolation import READ_UNCOMMITTED
from statestore.errors import InvalidStateStoreError, TransactionLogCorruptError
from statestore.manager import StateManager
from statestore.txn.coordinator import TRANSACTION_LOG_DIR
from statestore.txn.record import TransactionState, decode_value, encode_key
from tests.statestore.helpers import NO_CLEANER


def batches(log: Log) -> list[tuple[bool, bool]]:
    """``(is_transactional, is_control)`` of every batch, markers included."""
    return [
        (header.is_transactional, header.is_control)
        for header, _data in log.read_batches(0, isolation=READ_UNCOMMITTED)
    ]


def decisions(state: Path) -> list[TransactionState]:
    with Log.open(state / TRANSACTION_LOG_DIR) as log:
        return [decode_value(r.value, offset=r.offset).state for r in log.read(0) if r.value]


def test_one_partition_commit_is_one_plain_batch_and_no_decision(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        store = manager.store("a")
        store["k"] = 1
        manager.commit()
        assert batches(store.changelog) == [(False, False)]
    # O2 at open, T6 at close; no PrepareCommit
    assert decisions(state) == [TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT]


def test_a_commit_over_two_stores_is_a_transaction_with_markers_and_a_decision(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b")
        a["k"], b["k"] = 1, 2
        assert manager.commit() == 2
        for log in (a.changelog, b.changelog):
            assert batches(log) == [(True, False), (True, True)]
            assert log.last_stable_offset == log.log_end_offset == 2
        assert manager.coordinator.waiting()  # the markers are not fsynced yet
    assert decisions(state) == [
        TransactionState.EMPTY,
        TransactionState.PREPARE_COMMIT,
        TransactionState.COMPLETE_COMMIT,
    ]
    with StateManager(state, config=NO_CLEANER) as manager:
        assert manager.coordinator.waiting() == {}  # the clean close made every marker durable
        assert manager.store("a")["k"] == 1
        assert manager.store("b")["k"] == 2


def test_manager_transaction_commits_every_store_or_discards_all(tmp_path: Path) -> None:
    with StateManager(tmp_path / "s", config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b", partitions=2)
        with manager.transaction():
            a["x"] = 1
            b["y"] = 2
            manager.metadata["position"] = 10
        assert (a["x"], b["y"], manager.metadata["position"]) == (1, 2, 10)
        assert a.pending_count == b.pending_count == 0

        def fails() -> None:
            with manager.transaction():
                a["x"] = 100
                manager.metadata["position"] = 11
                _ = 1 / 0

        with pytest.raises(ZeroDivisionError):
            fails()
        assert a.pending_count == 0
        assert (a["x"], manager.metadata["position"]) == (1, 10)


def test_inside_a_manager_transaction_store_transaction_joins_and_commits_raise(
    tmp_path: Path,
) -> None:
    with StateManager(tmp_path / "s", config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b")
        with manager.transaction():
            with a.transaction():
                a["x"] = 1
            assert a.pending_count == 1  # joined: not committed at the inner block's end
            with manager.transaction():  # nested: joins too
                b["y"] = 2
            assert b.pending_count == 1
            with pytest.raises(InvalidStateStoreError, match=r"inside manager\.transaction"):
                a.commit()
            with pytest.raises(InvalidStateStoreError, match=r"inside manager\.transaction"):
                manager.commit()
        assert a.pending_count == b.pending_count == 0
        assert (a["x"], b["y"]) == (1, 2)

        def fails() -> None:
            with manager.transaction():
                with a.transaction():
                    a["x"] = 5
                raise KeyError("boom")

        with pytest.raises(KeyError):
            fails()
        assert a["x"] == 1


def test_store_transaction_alone_is_atomic_over_its_partitions(tmp_path: Path) -> None:
    state = tmp_path / "s"
    with StateManager(state, config=NO_CLEANER) as manager:
        p = manager.store("p", partitions=3)
        with p.transaction():
            for i in range(12):
                p[f"k{i}"] = i
        for log in p.changelogs:
            assert batches(log) == [(True, False), (True, True)]

        def fails() -> None:
            with p.transaction():
                p["k0"] = -1
                raise RuntimeError

        with pytest.raises(RuntimeError):
            fails()
        assert p["k0"] == 0


def test_a_transaction_of_another_thread_is_not_this_threads(tmp_path: Path) -> None:
    import threading  # noqa: PLC0415

    with StateManager(tmp_path / "s", config=NO_CLEANER) as manager:
        a = manager.store("a")
        inside = threading.Event()
        leave = threading.Event()

        def hold() -> None:
            with manager.transaction():
                inside.set()
                leave.wait(10)

        thread = threading.Thread(target=hold)
        thread.start()
        inside.wait(10)
        a["x"] = 1
        assert a.commit() == 1  # this thread is not inside the other's block
        leave.set()
        thread.join()


def test_a_corrupt_decision_refuses_the_open_and_changes_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER):
        pass
    with Log.open(state / TRANSACTION_LOG_DIR) as log:
        log.append([(encode_key(), b"\x00\x64garbage")])
    before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file() and p.name != ".lock"}
    with pytest.raises(TransactionLogCorruptError) as caught:
        StateManager(state, config=NO_CLEANER)
    assert caught.value.offset == 2
    after = {p: p.read_bytes() for p in state.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before
    with pytest.raises(TransactionLogCorruptError):  # the lock was released: same verdict
        StateManager(state, config=NO_CLEANER)


def test_a_partition_refusing_its_batch_aborts_the_others_and_keeps_the_writes(
    tmp_path: Path,
) -> None:
    """T1 fails on one partition (batch over max_message_bytes): the others get ABORT markers."""
    from changelog.config import LogConfig  # noqa: PLC0415
    from statestore.errors import CommitFailedError  # noqa: PLC0415

    state = tmp_path / "s"
    with StateManager(state, config=NO_CLEANER) as manager:
        a = manager.store("a")
        small = manager.store("small", log_config=LogConfig(max_message_bytes=1024))
        a["x"] = 1
        for i in range(8):
            small[f"k{i}"] = "v" * 200  # each record fits, the batch does not
        with pytest.raises(CommitFailedError) as caught:
            manager.commit()
        assert caught.value.written is False
        assert a.state.value == small.state.value == "open"
        assert a.pending_count == 1 and small.pending_count == 8  # still buffered
        assert batches(a.changelog)[-1] == (True, True)  # a's data ended by a marker: ABORT
        assert a.changelog.aborted_transactions(0, a.changelog.log_end_offset)
        small.abort()
        small["k0"] = "fits"
        assert manager.commit() == 2
    with StateManager(state, config=NO_CLEANER) as manager:
        assert manager.store("a")["x"] == 1
        small = manager.store("small", log_config=LogConfig(max_message_bytes=1024))
        assert dict(small.items()) == {"k0": "fits"}


def test_a_marker_that_fails_fails_its_partition_and_the_commit_stands(tmp_path: Path) -> None:
    """T4 fails on one partition (an I/O error): the others get their markers and RocksDB."""
    from statestore.errors import CommitFailedError  # noqa: PLC0415

    state = tmp_path / "s"
    with StateManager(state, config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b")
        a["x"], b["y"] = 1, 2
        broken = b.changelog

        def fail(*_args: object, **_kwargs: object) -> None:
            raise OSError(5, "injected EIO")

        broken.append_marker = fail  # type: ignore[method-assign]
        with pytest.raises(CommitFailedError) as caught:
            manager.commit()
        assert caught.value.written is True and caught.value.store == "b"
        assert b.state.value == "failed"
        assert a.state.value == "open" and a["x"] == 1 and a.pending_count == 0
        assert batches(a.changelog) == [(True, False), (True, True)]
        del broken.append_marker
        b = manager.store("b")  # reopened: recovery rolls its transaction forward
        assert b["y"] == 2
    with StateManager(state, config=NO_CLEANER) as manager:
        assert (manager.store("a")["x"], manager.store("b")["y"]) == (1, 2)


def test_an_exhausted_epoch_draws_a_new_producer_id(tmp_path: Path) -> None:
    from statestore.txn.record import (  # noqa: PLC0415
        TransactionStateRecord,
        encode_value,
    )

    state = tmp_path / "s"
    with StateManager(state, config=NO_CLEANER) as manager:
        pid = manager.coordinator.producer_id
    with Log.open(state / TRANSACTION_LOG_DIR) as log:
        record = TransactionStateRecord(
            producer_id=pid,
            producer_epoch=32766,
            state=TransactionState.EMPTY,
            last_update_timestamp_ms=0,
            partitions=(),
        )
        log.append([(encode_key(), encode_value(record))])
    with StateManager(state, config=NO_CLEANER) as manager:
        assert manager.coordinator.producer_id != pid
        assert manager.coordinator.producer_epoch == 0


def test_another_producers_open_transaction_is_aborted_at_open(tmp_path: Path) -> None:
    state = tmp_path / "s"
    with StateManager(state, config=NO_CLEANER) as manager:
        a = manager.store("a")
        a["kept"] = 1
        a.commit()
    with Log.open(state / "a-changelog-0") as log:  # as a broker-written partition might hold
        log.append_transactional([(b"foreign", b"\xa1x")], producer_id=77, producer_epoch=3)
        log.append([(b"after", b"\x02")])
        assert log.last_stable_offset == 1
    with StateManager(state, config=NO_CLEANER) as manager:
        a = manager.store("a")
        assert dict(a.items()) == {"kept": 1, "after": 2}  # "after" was behind the open one
        assert [t.producer_id for t in a.changelog.aborted_transactions(0, 10)] == [77]
