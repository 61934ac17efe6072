"""statestore.aio: commits off the event loop, shared fsyncs, cancellation, typed errors."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from changelog.fs import files
from statestore import StateManager
from statestore.aio import AsyncStateManager, AsyncStore, TransactionState
from statestore.errors import (
    CommitFailedError,
    InvalidStateStoreError,
    RecordTooLargeForLogError,
    SerializationError,
)
from tests.statestore.helpers import NO_CLEANER

T = TypeVar("T")
TIMEOUT_S = 60.0


def run(make: Callable[[], Awaitable[T]]) -> T:
    """Run ``make()`` on a fresh event loop with the test's timeout."""

    async def bounded() -> T:
        return await asyncio.wait_for(make(), TIMEOUT_S)

    return asyncio.run(bounded())


async def open_manager(path: Path) -> AsyncStateManager:
    return await AsyncStateManager.open(path, config=NO_CLEANER)


class FsyncGate:
    """A fault hook on the changelog fsyncs of one store: counts them, can hold or slow them."""

    def __init__(self, store: str, *, delay_s: float = 0.0, hold_first: bool = False) -> None:
        self.store = store
        self.delay_s = delay_s
        self.count = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()
        self.fail_with: OSError | None = None

    def __call__(self, step: str, path: Path) -> None:
        if step != "segment.flush" or f"{self.store}-changelog" not in str(path):
            return
        self.count += 1
        self.entered.set()
        self.release.wait(TIMEOUT_S)
        if self.delay_s:
            time.sleep(self.delay_s)  # a slow disk (the GIL is released meanwhile)
        if self.fail_with is not None:
            raise self.fail_with


def test_put_get_and_transactions(tmp_path: Path) -> None:
    async def main() -> None:
        async with await open_manager(tmp_path / "s") as manager:
            users = await manager.store("users")
            await users.put("alice", {"visits": 1})
            assert await users.get("alice") == {"visits": 1}
            async with users.transaction() as tx:
                alice = await tx.get("alice")
                tx.put("alice", {"visits": alice["visits"] + 1})
                tx.put("bob", {"visits": 7})
                assert await tx.get("bob") == {"visits": 7}  # its own writes
                assert await users.get("bob") is None  # nobody else's view
            assert tx.state is TransactionState.COMMITTED
            assert await users.get_many(["alice", "bob", "carol"]) == [
                {"visits": 2},
                {"visits": 7},
                None,
            ]
            assert [k async for k, _v in users.range("a", "c")] == ["alice", "bob"]
            await users.delete("bob")
            assert not await users.contains("bob")

    run(main)
    with StateManager(tmp_path / "s", config=NO_CLEANER) as manager:  # durable
        assert dict(manager.store("users").items()) == {"alice": {"visits": 2}}


def test_an_exception_or_cancel_in_the_body_aborts(tmp_path: Path) -> None:
    async def main() -> None:
        async with await open_manager(tmp_path / "s") as manager:
            kv = await manager.store("kv")
            tx = kv.transaction()

            async def failing_body() -> None:
                async with tx:
                    tx.put("a", 1)
                    raise KeyError("boom")

            with pytest.raises(KeyError):
                await failing_body()
            assert tx.state is TransactionState.ABORTED
            started = asyncio.Event()

            async def body() -> None:
                async with kv.transaction() as t:
                    t.put("b", 2)
                    started.set()
                    await asyncio.Event().wait()  # until cancelled

            task = asyncio.create_task(body())
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await kv.put("c", 3)  # the lock was let go
            assert [k async for k, _v in kv.range()] == ["c"]

    run(main)


def test_concurrent_read_modify_writes_lose_nothing_and_share_fsyncs(tmp_path: Path) -> None:
    """32 tasks increment one counter: 32, in two fsyncs (the first held until all are accepted)."""
    tasks_n = 32

    async def main(gate: FsyncGate) -> None:
        async with await open_manager(tmp_path / "s") as manager:
            kv = await manager.store("kv")
            txs = [kv.transaction() for _ in range(tasks_n)]

            async def increment(tx: Any) -> None:
                async with tx:
                    tx.put("n", ((await tx.get("n")) or 0) + 1)

            tasks = [asyncio.create_task(increment(txs[0]))]
            while not gate.entered.is_set():  # the first round is in its fsync
                await asyncio.sleep(0.001)
            tasks += [asyncio.create_task(increment(tx)) for tx in txs[1:]]
            while sum(tx.state is TransactionState.ACCEPTED for tx in txs) < tasks_n:
                await asyncio.sleep(0.001)  # every body ran meanwhile, on the loop
            gate.release.set()
            await asyncio.gather(*tasks)
            assert await kv.get("n") == tasks_n
            assert manager.rounds == 2
            assert gate.count == 2  # 32 commits, 2 fsyncs (the close flushes once more)

    with files.inject_faults(gate := FsyncGate("kv", hold_first=True)):
        run(lambda: main(gate))


async def _lag_probe(stop: asyncio.Event, lags: list[float], period_s: float = 0.001) -> None:
    """A loop-lag probe: how late the loop wakes this task from each 1 ms sleep, in seconds."""
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(period_s)
        lags.append(time.perf_counter() - before - period_s)


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


FSYNC_DELAY_S = 0.02
"""Every changelog fsync of this test is slowed to this (a slow disk): one on the loop shows."""
LAG_P50_BOUND_S = 0.005
"""Half of the probe's wake-ups while commits run are at most 5 ms late.  Commits run on the
loop (the control) make most wake-ups at least ``FSYNC_DELAY_S`` late.  The median, not a
higher quantile or the maximum: on this shared 2-core machine those are the scheduler's.  At
load average 11 an idle loop alone measured p50 0.25-2.4 ms, p90 6-8 ms and a worst wake-up of
8-24 ms (docs/serving.md)."""
LAG_MAX_BOUND_S = 0.2
"""The single worst wake-up, bounded loosely for that reason (340 ms was seen once at load
14); it still catches a stall such as the slowed fsyncs of 16 writers run on the loop."""


class _StepThreads:
    """A fault hook recording which threads run the changelog's append and fsync steps."""

    def __init__(self, inner: Callable[[str, Path], None]) -> None:
        self.inner = inner
        self.threads: set[int] = set()

    def __call__(self, step: str, path: Path) -> None:
        if step in ("segment.append", "segment.flush"):
            self.threads.add(threading.get_ident())
        self.inner(step, path)


@pytest.mark.parametrize("off_loop", [True, False])
def test_commits_never_block_the_loop(tmp_path: Path, off_loop: bool) -> None:
    """16 writers x 5 commits, fsyncs slowed to 20 ms: no changelog append or fsync runs on the
    loop's thread, and a loop-lag probe stays within the bounds; the control (the same commits
    run on the loop) blocks it."""
    loop_thread: list[int] = []

    async def main() -> list[float]:
        loop_thread.append(threading.get_ident())
        async with await open_manager(tmp_path / "s") as manager:
            kv = await manager.store("kv")
            stop = asyncio.Event()
            lags: list[float] = []
            probe = asyncio.create_task(_lag_probe(stop, lags))

            async def writer(i: int) -> None:
                for n in range(5):
                    await kv.put(f"k{i}", n)

            async def blocking_writer(i: int) -> None:  # the control: commits on the loop
                for n in range(5):
                    kv.sync.put(f"k{i}", n)
                    kv.sync.commit()
                    await asyncio.sleep(0)

            if off_loop:
                await asyncio.gather(*(writer(i) for i in range(16)))
            else:
                await asyncio.gather(*(blocking_writer(i) for i in range(16)))
            stop.set()
            await probe
            assert await kv.get_many([f"k{i}" for i in range(16)]) == [4] * 16
            return lags

    steps = _StepThreads(FsyncGate("kv", delay_s=FSYNC_DELAY_S))
    with files.inject_faults(steps):
        lags = run(main)
    p50, worst = _quantile(lags, 0.5), max(lags)
    if off_loop:
        assert steps.threads and loop_thread[0] not in steps.threads
        assert p50 < LAG_P50_BOUND_S, f"median loop lag {p50 * 1000:.1f} ms, {len(lags)} wake-ups"
        assert worst < LAG_MAX_BOUND_S, f"the loop was blocked for {worst * 1000:.1f} ms"
    else:
        assert loop_thread[0] in steps.threads
        assert p50 >= FSYNC_DELAY_S  # the probe sees a blocked loop


def test_a_cancelled_commit_is_still_committed_and_the_caller_can_find_out(tmp_path: Path) -> None:
    async def main(gate: FsyncGate) -> None:
        async with await open_manager(tmp_path / "s") as manager:
            kv = await manager.store("kv")
            tx = kv.transaction()
            tx.put("a", 1)
            waiter = asyncio.create_task(tx.commit())
            while not gate.entered.is_set():  # accepted and in its round's fsync
                await asyncio.sleep(0.001)
            assert tx.state is TransactionState.ACCEPTED
            try:
                waiter.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiter
                assert not tx.done()
            finally:
                gate.release.set()
            await tx.wait()  # the outcome, after the cancel
            assert tx.state is TransactionState.COMMITTED
            assert await kv.get("a") == 1

    with files.inject_faults(gate := FsyncGate("kv", hold_first=True)):
        run(lambda: main(gate))
    with StateManager(tmp_path / "s", config=NO_CLEANER) as manager:
        assert manager.store("kv").get("a") == 1


def test_typed_errors_reach_every_transaction_of_a_failed_round(tmp_path: Path) -> None:
    async def main(gate: FsyncGate) -> None:
        async with await open_manager(tmp_path / "s") as manager:
            kv: AsyncStore[Any, Any] = await manager.store("kv")
            with pytest.raises(SerializationError):
                await kv.put("a", object())
            with pytest.raises(RecordTooLargeForLogError):
                await kv.put("a", b"x" * (2 << 20))
            await kv.put("ok", 1)
            gate.fail_with = OSError(5, "injected EIO")
            txs = [kv.transaction() for _ in range(5)]
            for i, tx in enumerate(txs):
                tx.put(f"k{i}", i)
            outcomes = await asyncio.gather(*(tx.commit() for tx in txs), return_exceptions=True)
            assert all(isinstance(o, CommitFailedError) and o.written for o in outcomes)
            assert all(tx.state is TransactionState.FAILED for tx in txs)
            with pytest.raises(InvalidStateStoreError):  # the store failed, as in the sync API
                await kv.put("b", 2)
            gate.fail_with = None
            kv = await manager.store("kv")  # reopened: restored from the changelog
            await kv.put("b", 2)
            got = await kv.get_many(["ok", "b", *(f"k{i}" for i in range(5))])
            assert got[:2] == [1, 2]

    with files.inject_faults(gate := FsyncGate("kv")):
        run(lambda: main(gate))


def test_a_transaction_over_two_stores_is_atomic(tmp_path: Path) -> None:
    async def main() -> None:
        async with await open_manager(tmp_path / "s") as manager:
            a = await manager.store("a")
            b = await manager.store("b")
            await a.put("x", 10)
            async with manager.transaction(a, b) as tx:
                x = await tx.get(a, "x")
                tx.put(a, "x", x - 3)
                tx.put(b, "x", 3)
            assert (await a.get("x"), await b.get("x")) == (7, 3)
            tx = manager.transaction(a, b)
            tx.put(a, "x", 0)
            tx.put(b, "y", b"x" * (2 << 20))
            with pytest.raises(RecordTooLargeForLogError):  # b refuses its part: a's is dropped
                await tx.commit()
            await a.put("z", 1)
            assert (await a.get("x"), await b.get("y")) == (7, None)

    run(main)
    with StateManager(tmp_path / "s", config=NO_CLEANER) as manager:
        assert dict(manager.store("a").items()) == {"x": 7, "z": 1}


def test_a_closed_manager_refuses(tmp_path: Path) -> None:
    async def main() -> None:
        manager = await open_manager(tmp_path / "s")
        kv = await manager.store("kv")
        await kv.put("a", 1)
        await manager.aclose()
        with pytest.raises(InvalidStateStoreError):
            await manager.store("kv")
        with pytest.raises(InvalidStateStoreError):
            await kv.get("a")

    run(main)


def test_a_large_transaction_is_encoded_between_turns_of_the_loop(tmp_path: Path) -> None:
    """2,000 writes are serialized 256 at a time, the loop running other tasks in between;
    they commit as one: all of them, in one round."""

    async def main() -> None:
        async with await open_manager(tmp_path / "s") as manager:
            kv = await manager.store("kv")
            tx = kv.transaction()
            for i in range(2000):
                tx.put(f"k{i:04d}", i)
            committing = asyncio.create_task(tx.commit())
            turns = 0
            while tx.state is TransactionState.OPEN:  # each turn: one chunk encoded
                turns += 1
                await asyncio.sleep(0)
            assert turns >= 2000 // 256  # the loop ran between the chunks
            await committing
            assert tx.state is TransactionState.COMMITTED
            assert manager.rounds == 1
            keys = [f"k{i:04d}" for i in range(2000)]
            assert await kv.get_many(keys) == list(range(2000))

    run(main)


def test_a_cancel_while_a_large_transaction_is_encoded_aborts_it(tmp_path: Path) -> None:
    """Cancelled before its writes were buffered: aborted, nothing written, the store's lock
    free for the next transaction."""

    async def main() -> None:
        async with await open_manager(tmp_path / "s") as manager:
            kv = await manager.store("kv")
            tx = kv.transaction()
            for i in range(2000):
                tx.put(f"k{i:04d}", i)
            committing = asyncio.create_task(tx.commit())
            await asyncio.sleep(0)  # begun: the lock taken, the first chunk encoded
            await asyncio.sleep(0)
            assert tx.state is TransactionState.OPEN
            committing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await committing
            assert tx.state is TransactionState.ABORTED
            assert tx.done()
            await kv.put("after", 1)  # the lock was released
            assert await kv.get("after") == 1
            assert await kv.get("k0000") is None
            assert manager.rounds == 1  # only the put's round

    run(main)
