"""Scoped ``manager.transaction(*stores)`` blocks: what a block covers and who owns a store.

Single-threaded semantics first, then two threads choreographed with events
(deterministic: each step waits for the other thread's), then a timing-free
check that blocks over disjoint stores overlap in the coordinator.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from changelog.fs import files
from statestore.errors import (
    InvalidStateStoreError,
    InvalidStoreConfigError,
    TransactionCoordinatorError,
)
from statestore.manager import StateManager
from statestore.txn.coordinator import TRANSACTION_LOG_DIR
from statestore.txn.scope import TransactionScopes
from tests.statestore.helpers import NO_CLEANER


def committed(state: Path, *names: str) -> dict[str, dict[str, Any]]:
    """What a fresh manager reads back from each store (the committed state)."""
    with StateManager(state, config=NO_CLEANER) as manager:
        return {name: dict(manager.store(name).items()) for name in names}


def on_thread(fn: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_a_scoped_block_commits_its_stores_only(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        a, b, c = manager.store("a"), manager.store("b"), manager.store("c")
        c["k"] = "left"
        with manager.transaction(a, b):
            a["k"], b["k"] = 1, 2
            c["k2"] = "also left"
        assert c.pending_count == 2
        assert a.pending_count == b.pending_count == 0
        manager.crash()
    assert committed(state, "a", "b", "c") == {"a": {"k": 1}, "b": {"k": 2}, "c": {}}


def test_a_scoped_block_covers_writes_buffered_before_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        a = manager.store("a")
        a["early"] = 0
        with manager.transaction(a, manager.metadata):
            manager.metadata["position"] = 1
        manager.crash()
    assert committed(state, "a", "__metadata") == {
        "a": {"early": 0},
        "__metadata": {"position": 1},
    }


def test_an_exception_discards_the_scoped_stores_only(tmp_path: Path) -> None:
    with StateManager(tmp_path / "state", config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b")
        b["other"] = 1

        def fails() -> None:
            with manager.transaction(a):
                a["k"] = 1
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            fails()
        assert a.pending_count == 0
        assert b.pending_count == 1


def test_store_transaction_and_nested_blocks_enlist(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        a, b, c, d = (manager.store(n) for n in "abcd")
        d["k"] = "not enlisted"
        with manager.transaction(a):
            a["k"] = 1
            with b.transaction():  # joins and enlists b
                b["k"] = 2
            with manager.transaction(c):  # nested: joins, enlists c
                c["k"] = 3
            assert manager.coordinator.scopes.owner("c") is not None
            with pytest.raises(InvalidStateStoreError):
                manager.commit()
            with pytest.raises(InvalidStateStoreError):
                a.commit()
        assert manager.coordinator.scopes.owner("a") is None  # released at the end
        assert d.pending_count == 1
        manager.crash()
    assert committed(state, "a", "b", "c", "d") == {
        "a": {"k": 1},
        "b": {"k": 2},
        "c": {"k": 3},
        "d": {},
    }


def test_unscoped_block_keeps_its_single_thread_meaning(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b")
        a["before"] = 0
        with manager.transaction():
            a["k"], b["k"] = 1, 2
            with b.transaction():  # joins, nothing committed here
                b["j"] = 3
            assert b.pending_count == 2
        manager.crash()
    assert committed(state, "a", "b") == {"a": {"before": 0, "k": 1}, "b": {"k": 2, "j": 3}}


def test_transaction_refuses_what_is_not_an_open_store_of_this_manager(tmp_path: Path) -> None:
    with (
        StateManager(tmp_path / "one", config=NO_CLEANER) as manager,
        StateManager(tmp_path / "two", config=NO_CLEANER) as other,
    ):
        foreign = other.store("a")
        manager.store("a")
        with pytest.raises(InvalidStoreConfigError), manager.transaction(foreign):
            pass
        closed = manager.store("b")
        closed.close()
        with pytest.raises(InvalidStateStoreError), manager.transaction(closed):
            pass
        assert manager.coordinator.scopes.owner("a") is None


# ------------------------------------------------------------------ two threads


def test_another_threads_block_end_does_not_commit_this_blocks_writes(tmp_path: Path) -> None:
    """The weakness this replaces: a block's end committed every store, another thread's
    half-written block included."""
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b")
        written, done = threading.Event(), threading.Event()

        def other() -> None:
            with manager.transaction(b):
                b["half"] = 1
                written.set()
                done.wait(10)
                raise RuntimeError("this block fails: none of it may be committed")

        thread, errors = on_thread(other)
        assert written.wait(10)
        with manager.transaction(a):
            a["k"] = 1
        manager.commit()  # an unscoped commit leaves b to its owner too
        done.set()
        thread.join()
        assert isinstance(errors[0], RuntimeError)
        manager.crash()
    assert committed(state, "a", "b") == {"a": {"k": 1}, "b": {}}


def test_blocks_sharing_a_store_take_turns(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        a, b, shared = manager.store("a"), manager.store("b"), manager.metadata
        inside, release, second_in = threading.Event(), threading.Event(), threading.Event()

        def first() -> None:
            with manager.transaction(a, shared):
                shared["pos-a"] = 1
                a["k"] = 1
                inside.set()
                release.wait(10)

        def second() -> None:
            with manager.transaction(b, shared):
                second_in.set()
                shared["pos-b"] = 2
                b["k"] = 2

        t1, e1 = on_thread(first)
        assert inside.wait(10)
        t2, e2 = on_thread(second)
        assert not second_in.wait(0.3)  # waits: the metadata store is owned by the first block
        release.set()
        t1.join()
        t2.join()
        assert e1 == e2 == []
        assert second_in.is_set()
        manager.crash()
    assert committed(state, "a", "b", "__metadata") == {
        "a": {"k": 1},
        "b": {"k": 2},
        "__metadata": {"pos-a": 1, "pos-b": 2},
    }


def test_enlisting_a_store_another_block_owns_raises(tmp_path: Path) -> None:
    with StateManager(tmp_path / "state", config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b")
        inside, release = threading.Event(), threading.Event()

        def owner() -> None:
            with manager.transaction(b):
                inside.set()
                release.wait(10)

        thread, errors = on_thread(owner)
        assert inside.wait(10)
        with manager.transaction(a):
            a["k"] = 1
            with pytest.raises(InvalidStateStoreError, match="another thread's transaction"):
                with b.transaction():
                    pass
        release.set()
        thread.join()
        assert errors == []


def test_a_write_into_a_store_another_threads_block_owns_is_refused(tmp_path: Path) -> None:
    """The caller's write never joins another thread's block: ``put`` raises before it is
    buffered, so the block's abort cannot take it and ``commit()`` never returns with it
    uncommitted.  The block's own thread writes as usual, and so does everybody once the
    block ended."""
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b")
        inside, release = threading.Event(), threading.Event()

        def owner() -> None:
            with manager.transaction(b):
                b["mine"] = 1
                inside.set()
                assert release.wait(10)
                raise RuntimeError("the block aborts")

        thread, errors = on_thread(owner)
        assert inside.wait(10)
        a["a"] = 1
        for write in (
            lambda: b.put("caller", 2),
            lambda: b.__setitem__("caller", 2),
            lambda: b.delete("mine"),
            lambda: b.put_all({"caller": 2}),
            lambda: b.put_if_absent("caller", 2),
        ):
            with pytest.raises(InvalidStateStoreError, match="another thread's transaction"):
                write()
        assert manager.commit() == 1  # a's write; b is left to its block
        release.set()
        thread.join(10)
        assert isinstance(errors[0], RuntimeError)
        b["caller"] = 3  # the block ended: b is free again
        manager.commit()
        manager.crash()
    assert committed(state, "a", "b") == {"a": {"a": 1}, "b": {"caller": 3}}


def test_an_unscoped_commit_waits_for_another_unscoped_commit(tmp_path: Path) -> None:
    """Claims: an unscoped commit holding a store makes a second one wait, then cover the rest."""
    scopes = TransactionScopes()
    entered, release, second_done = threading.Event(), threading.Event(), threading.Event()
    seen: list[list[str]] = []

    def first() -> None:
        with scopes.claim_free(["a", "b"]) as covered:
            seen.append(covered)
            entered.set()
            release.wait(10)

    def second() -> None:
        with scopes.claim_free(["b"]) as covered:
            seen.append(covered)
        second_done.set()

    t1, _ = on_thread(first)
    assert entered.wait(10)
    t2, _ = on_thread(second)
    assert not second_done.wait(0.3)
    release.set()
    t1.join()
    t2.join()
    assert seen == [["a", "b"], ["b"]]


def test_blocks_over_disjoint_stores_share_decision_fsyncs(tmp_path: Path) -> None:
    """8 threads x 10 blocks over 2 own stores: every block is one transaction (its own
    PrepareCommit record), and the decisions share fsyncs (fewer flushes of the coordinator's
    log than records).  Holds the coordinator's step T2 until all 8 threads are in it, so the
    overlap does not depend on timing."""
    threads, blocks = 8, 10
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        pairs = [(manager.store(f"d{t}"), manager.store(f"p{t}")) for t in range(threads)]
        barrier = threading.Barrier(threads, timeout=20)
        first_round = threading.local()

        def hook(step: str) -> None:
            if step == "T2" and not getattr(first_round, "done", False):
                first_round.done = True
                barrier.wait()  # every thread's first transaction is past T2 at once

        manager.coordinator.fault_hook = hook
        log = manager.coordinator.log
        records_before, flushes_before = log.log_end_offset, log.group_commit.flushes

        def work(t: int) -> Callable[[], None]:
            data, position = pairs[t]

            def run() -> None:
                for n in range(blocks):
                    with manager.transaction(data, position):
                        data[f"k{n}"] = n
                        position["n"] = n

            return run

        started = [on_thread(work(t)) for t in range(threads)]
        for thread, errors in started:
            thread.join()
            assert errors == []
        manager.coordinator.fault_hook = None
        records = log.log_end_offset - records_before
        flushes = log.group_commit.flushes - flushes_before
        assert records == threads * blocks
        assert flushes < records, (flushes, records)
        manager.crash()
    with StateManager(state, config=NO_CLEANER) as manager:
        for t in range(threads):
            assert dict(manager.store(f"d{t}").items()) == {f"k{n}": n for n in range(blocks)}
            assert manager.store(f"p{t}")["n"] == blocks - 1


# ------------------------------------------------------------------ the decision's crash contract


def test_a_simulated_crash_in_the_decision_propagates_as_itself(tmp_path: Path) -> None:
    """T3 fails the coordinator on any error, but a ``SimulatedCrash`` (a BaseException that
    is not an Exception) is raised as it is, not wrapped; an OSError-like failure is wrapped."""
    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        a, b = manager.store("a"), manager.store("b")
        a["k"], b["k"] = 1, 2

        def die(step: str, path: Path) -> None:
            if TRANSACTION_LOG_DIR in str(path):
                raise files.SimulatedCrash(f"{step} {path.name}")

        with pytest.raises(files.SimulatedCrash), files.inject_faults(die):
            manager.commit()
        assert manager.coordinator.failed
        a["j"], b["j"] = 3, 4
        with pytest.raises(TransactionCoordinatorError) as caught:
            manager.commit()
        assert isinstance(caught.value.__cause__, files.SimulatedCrash)
        manager.crash()
    found = committed(state, "a", "b")
    assert found in ({"a": {}, "b": {}}, {"a": {"k": 1}, "b": {"k": 2}})
