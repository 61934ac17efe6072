"""Group commit of one store: threads committing one put each share fsyncs, and none returns early."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from changelog.fs import files
from statestore.txn.commit_lock import CommitLock
from tests.statestore.conftest import OpenManager

TIMEOUT_S = 60.0


def test_a_ticket_is_covered_only_by_a_later_take_that_committed() -> None:
    lock = CommitLock()
    ticket = lock.ticket()
    assert lock.acquire_unless_covered(ticket)  # nothing committed yet: the caller commits
    take = lock.next_take()
    assert take == ticket
    lock.committed(take)
    lock.release()
    assert not lock.acquire_unless_covered(ticket)  # covered: no lock, nothing to do
    assert lock.acquire_unless_covered(lock.ticket())  # a new ticket is not covered
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()


def test_acquire_take_numbers_the_take_or_returns_0_once_covered_while_waiting() -> None:
    lock = CommitLock()
    assert lock.acquire_take() == 1  # uncontended: held, take 1
    results: list[int] = []
    waiter = threading.Thread(target=lambda: results.append(lock.acquire_take()))
    waiter.start()  # its ticket is 2: the next take covers its writes
    deadline = time.monotonic() + TIMEOUT_S
    while lock.queue_length() < 1:  # queued behind the lock: poll the lock's count, bounded
        assert time.monotonic() < deadline
        time.sleep(0.0005)
    take = lock.next_take()  # the holder takes again (2): the waiter's writes are in it
    lock.committed(take)
    lock.release()
    waiter.join(TIMEOUT_S)
    assert results == [0]  # covered: returned without the lock, which it passed on
    assert not lock.locked()
    assert lock.acquire_take() == 3
    lock.release()


def test_waiters_get_the_lock_in_arrival_order() -> None:
    lock = CommitLock()
    lock.acquire()
    order: list[int] = []
    queued = [threading.Event() for _ in range(5)]

    def waiter(i: int) -> None:
        queued[i].set()
        with lock:
            order.append(i)

    threads = []
    for i in range(5):  # each starts only once the one before it is queued behind the lock
        thread = threading.Thread(target=waiter, args=(i,))
        thread.start()
        threads.append(thread)
        queued[i].wait(TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        while lock.queue_length() < i + 1:  # in the queue: poll the lock's count, bounded
            assert time.monotonic() < deadline
            time.sleep(0.0005)
    lock.release()
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert order == [0, 1, 2, 3, 4]
    assert not lock.locked()


@pytest.mark.parametrize(("threads", "bound"), [(4, 0.5), (16, 0.25)])
def test_threads_committing_one_store_share_fsyncs(
    open_manager: OpenManager, threads: int, bound: float
) -> None:
    """Each thread: put, commit, then check its write is applied (so durable) on return."""
    manager = open_manager()
    store = manager.store("kv")
    reader = store.reader()
    fsyncs = 0
    errors: list[str] = []
    start = threading.Barrier(threads)

    def slow_disk(step: str, path: Path) -> None:
        nonlocal fsyncs
        if step == "segment.flush" and "kv-changelog" in str(path):
            fsyncs += 1
            time.sleep(0.005)  # a disk with 5 ms fsyncs

    def work(t: int) -> None:
        start.wait(TIMEOUT_S)
        for i in range(20):
            store.put(f"t{t}", i)
            store.commit()
            if reader.get(f"t{t}") != i:  # returned before a commit carrying it was durable
                errors.append(f"thread {t} commit {i} returned before its write was applied")

    with files.inject_faults(slow_disk):
        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(TIMEOUT_S)
    assert errors == []
    commits = threads * 20
    assert fsyncs <= bound * commits, f"{fsyncs} fsyncs for {commits} commits"
    assert reader.get_many([f"t{t}" for t in range(threads)]) == [19] * threads
