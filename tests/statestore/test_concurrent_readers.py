"""Readers on many threads while one writer buffers and commits: committed state only, never a mix.

The writer keeps an invariant that only whole commits preserve: money moves
between accounts (the total never changes) and a ``version`` key counts
commits.  Before each commit the writer records the exact state it commits
(the model); every read of a reader must equal the model of the version it
shows, entry for entry, and never be a version still pending.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changelog.fs import files
from statestore import StateManager, StoreReader
from statestore.errors import InvalidStateStoreError
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import NO_CLEANER, kill9_and_drain

ACCOUNTS = 40
START = 100
TIMEOUT_S = 60.0


def account(i: int) -> str:
    return f"acct-{i:03d}"


def initial() -> dict[str, Any]:
    state: dict[str, Any] = {account(i): START for i in range(ACCOUNTS)}
    state["version"] = 0
    return state


class Checker:
    """The writer's committed states by version; readers check their reads against them."""

    def __init__(self) -> None:
        self.models: dict[int, dict[str, Any]] = {0: initial()}
        self.pending: int | None = None
        self.errors: list[str] = []
        self.reads = 0
        self._lock = threading.Lock()

    def expect(self, version: int, state: dict[str, Any]) -> None:
        with self._lock:
            self.models[version] = dict(state)

    def check_full(self, what: str, state: dict[str, Any]) -> int:
        """``state`` (every key) must equal the model of its version; returns the version."""
        version = state.get("version")
        with self._lock:
            model = self.models.get(version) if isinstance(version, int) else None
            self.reads += 1
        if model is None:
            self.errors.append(f"{what}: version {version!r} was never committed")
        elif state != model:
            diff = {
                k: (state.get(k), model.get(k))
                for k in model.keys() | state.keys()
                if state.get(k) != model.get(k)
            }
            self.errors.append(f"{what}: a mix at version {version}: {sorted(diff.items())[:5]}")
        return version if isinstance(version, int) else -1


def writer(
    store: Any,
    checker: Checker,
    commits: int,
    rng: random.Random,
    committed: threading.Event | None = None,
) -> None:
    """``commits`` commits of a few transfers each; checks read-your-writes on the way."""
    state = initial()
    for version in range(1, commits + 1):
        for _ in range(rng.randint(1, 6)):
            a, b = rng.sample(range(ACCOUNTS), 2)
            amount = rng.randint(1, 20)
            state[account(a)] -= amount
            state[account(b)] += amount
            store[account(a)] = state[account(a)]
            store[account(b)] = state[account(b)]
            if store.get(account(a)) != state[account(a)]:  # the writer reads its own writes
                checker.errors.append(f"writer lost read-your-writes at {version}")
        state["version"] = version
        store["version"] = version
        checker.expect(version, state)
        store.commit()
        if committed is not None:
            committed.set()


def reader_loop(
    reader: StoreReader[str, Any], checker: Checker, stop: threading.Event, seed: int
) -> None:
    rng = random.Random(seed)
    keys = [account(i) for i in range(ACCOUNTS)] + ["version"]
    while not stop.is_set():
        kind = rng.randrange(4)
        if kind == 0:
            values = reader.get_many(keys)
            checker.check_full("get_many", dict(zip(keys, values, strict=True)))
        elif kind == 1:
            checker.check_full("items", dict(reader.items()))
        elif kind == 2:
            scanned = dict(reader.prefix_scan("acct-"))
            scanned["version"] = reader.get("version")  # a second call: only the sum holds
            if sum(v for k, v in scanned.items() if k != "version") != ACCOUNTS * START:
                checker.errors.append("prefix_scan: the total changed")
        else:
            backwards = list(reader.range(None, None, reverse=True))
            checker.check_full("reverse range", dict(backwards))
            if [k for k, _v in backwards] != sorted((k for k, _v in backwards), reverse=True):
                checker.errors.append("reverse range out of order")


@pytest.mark.parametrize("partitions", [1, 3])
def test_readers_see_only_whole_commits(open_manager: OpenManager, partitions: int) -> None:
    manager = open_manager()
    store = manager.store("bank", partitions=partitions)
    store.put_all(initial())
    store.commit()
    checker = Checker()
    stop = threading.Event()
    readers = [
        threading.Thread(target=reader_loop, args=(store.reader(), checker, stop, seed))
        for seed in range(4)
    ]
    for thread in readers:
        thread.start()
    try:
        writer(store, checker, 300, random.Random(partitions))
    finally:
        stop.set()
        for thread in readers:
            thread.join(TIMEOUT_S)
    assert not any(thread.is_alive() for thread in readers)
    assert checker.errors == []
    assert checker.reads > 20  # the readers did read meanwhile
    assert dict(store.reader().items()) == checker.models[300]


@pytest.mark.parametrize("partitions", [1, 3])
def test_an_iterator_keeps_its_moment_across_commits(
    open_manager: OpenManager, partitions: int
) -> None:
    manager = open_manager()
    store = manager.store("bank", partitions=partitions)
    store.put_all(initial())
    store.commit()
    checker = Checker()
    reader = store.reader()
    scan = reader.range()  # opened at version 0
    first = [next(scan) for _ in range(3)]
    writer(store, checker, 20, random.Random(7))  # 20 commits while the scan is open
    rest = dict(first) | dict(scan)
    assert rest == initial()  # all of version 0, none of the 20 commits
    assert reader.get("version") == 20


def test_reader_never_sees_pending_writes_and_the_writer_does(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("kv")
    store["a"] = 1
    store.commit()
    store["a"] = 2
    store["b"] = 3
    seen: list[Any] = []
    thread = threading.Thread(
        target=lambda: seen.extend(
            [store.reader().get("a"), store.reader().get("b"), dict(store.reader().items())]
        )
    )
    thread.start()
    thread.join(TIMEOUT_S)
    assert seen == [1, None, {"a": 1}]
    assert (store.get("a"), store.get("b")) == (2, 3)  # the writer's own reads
    store.commit()
    assert dict(store.reader().items()) == {"a": 2, "b": 3}


@pytest.mark.parametrize("partitions", [1, 3])
def test_readers_do_not_wait_for_the_commits_fsync(
    open_manager: OpenManager, partitions: int
) -> None:
    """A commit held inside its changelog fsync: readers answer meanwhile, with the old state."""
    manager = open_manager()
    store = manager.store("kv", partitions=partitions)
    keys = [f"k{i}" for i in range(12)]
    store.put_all([(key, 0) for key in keys])
    store.commit()
    in_fsync = threading.Event()
    release = threading.Event()

    def hold_fsync(step: str, path: Path) -> None:
        if step == "segment.flush" and "kv-changelog" in str(path) and not release.is_set():
            in_fsync.set()
            release.wait(TIMEOUT_S)

    reader = store.reader()
    store.put_all([(key, 1) for key in keys])
    with files.inject_faults(hold_fsync):
        committer = threading.Thread(target=store.commit)
        committer.start()
        try:
            assert in_fsync.wait(TIMEOUT_S)
            answers: list[Any] = []
            probe = threading.Thread(
                target=lambda: answers.extend(
                    [reader.get_many(keys), dict(reader.items()), reader.get("k0")]
                )
            )
            probe.start()
            probe.join(TIMEOUT_S)
            assert not probe.is_alive(), "a reader waited for the commit's fsync"
            assert answers == [[0] * 12, dict.fromkeys(keys, 0), 0]
        finally:
            release.set()
            committer.join(TIMEOUT_S)
    assert reader.get_many(keys) == [1] * 12


def test_reader_of_a_closed_store_raises(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("kv")
    store["a"] = 1
    store.commit()
    reader = store.reader()
    scan = reader.items()  # opened before the close, read after it
    store.close()
    for read in (
        lambda: reader.get("a"),
        lambda: "a" in reader,
        lambda: reader.get_many(["a", "b"]),
        lambda: list(reader.items()),
        lambda: list(scan),
        reader.approximate_num_entries,
    ):
        with pytest.raises(InvalidStateStoreError) as caught:
            read()
        assert caught.value.store == "kv"  # the store's name, not its RocksDB directory
        assert caught.value.state == "closed"
    with pytest.raises(InvalidStateStoreError):
        store.reader()
    assert manager.store("kv").reader().get("a") == 1  # the reopened store's reader


# ----------------------------------------------------------------------------- kill -9

CHILD = r"""
import random, sys, threading
from statestore import StateManager
from statestore.config import StateManagerConfig
sys.path.insert(0, sys.argv[3])
from tests.statestore.test_concurrent_readers import Checker, initial, reader_loop

state_dir, partitions = sys.argv[1], int(sys.argv[2])
manager = StateManager(state_dir, config=StateManagerConfig(run_cleaner=False))
store = manager.store("bank", partitions=partitions)
if store.reader().get("version") is None:
    store.put_all(initial()); store.commit()
checker = Checker()
start = store.reader().get("version")
checker.models = {start: dict(store.reader().items())}
stop = threading.Event()

def report():
    while not stop.wait(0.01):
        if checker.errors:
            print("ERROR", checker.errors[:3], flush=True)
            stop.set()

threads = [threading.Thread(target=reader_loop, args=(store.reader(), checker, stop, s), daemon=True)
           for s in range(3)]
threads.append(threading.Thread(target=report, daemon=True))
for t in threads: t.start()

# continue from the committed state: the checker's model starts there
rng = random.Random()
state = dict(store.reader().items())
version = state["version"]
while True:
    for _ in range(rng.randint(1, 6)):
        a, b = rng.sample(range(40), 2)
        amount = rng.randint(1, 20)
        state[f"acct-{a:03d}"] -= amount
        state[f"acct-{b:03d}"] += amount
        store[f"acct-{a:03d}"] = state[f"acct-{a:03d}"]
        store[f"acct-{b:03d}"] = state[f"acct-{b:03d}"]
    version += 1
    state["version"] = version
    store["version"] = version
    checker.expect(version, state)
    store.commit()
    print("ACK", version, checker.reads, flush=True)
"""


def _acks(lines: list[str]) -> Iterator[tuple[int, int]]:
    for line in lines:
        if line.startswith("ACK "):
            _tag, version, reads = line.split()
            yield int(version), int(reads)


@pytest.mark.parametrize("partitions", [1, 3])
def test_kill9_under_readers_and_writer(tmp_path: Path, partitions: int) -> None:
    """kill -9 the process mid-load (3 reader threads + the writer): every ack survives, whole."""
    state_dir = tmp_path / "state"
    root = str(Path(__file__).resolve().parents[2])
    for trial in range(2):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(state_dir), str(partitions), root],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        lines: list[str] = []
        try:
            # run until the readers have checked a few hundred reads, then kill
            while True:
                line = child.stdout.readline()
                assert line, child.stderr.read() if child.stderr else ""
                lines.append(line)
                assert not line.startswith("ERROR"), line
                acks = list(_acks(lines[-1:]))
                if acks and acks[0][1] > 300 * (trial + 1):
                    break
        finally:
            out, _err = kill9_and_drain(child, TIMEOUT_S)
        lines.extend(out.splitlines())
        assert not any(line.startswith("ERROR") for line in lines), lines[-3:]
        last_acked = max(version for version, _reads in _acks(lines))
        with StateManager(state_dir, config=NO_CLEANER) as manager:
            state = dict(manager.store("bank").reader().items())
        assert state["version"] in (last_acked, last_acked + 1)
        assert sum(v for k, v in state.items() if k != "version") == ACCOUNTS * START


def test_readers_beside_scoped_writers_on_other_stores(open_manager: OpenManager) -> None:
    """Two writer threads, each in scoped transactions over its own stores; readers of both."""
    manager = open_manager()
    names = ("bank-a", "bank-b")
    stores = {name: manager.store(name, partitions=2) for name in names}
    audits = {name: manager.store(f"{name}-audit") for name in names}
    checkers = {name: Checker() for name in names}
    for store in stores.values():
        store.put_all(initial())
        store.commit()

    def scoped_writer(name: str, seed: int) -> None:
        rng = random.Random(seed)
        store, audit, checker = stores[name], audits[name], checkers[name]
        state = initial()
        for version in range(1, 151):
            with manager.transaction(store, audit):  # scoped: this thread's stores only
                for _ in range(rng.randint(1, 4)):
                    a, b = rng.sample(range(ACCOUNTS), 2)
                    state[account(a)] -= 1
                    state[account(b)] += 1
                    store[account(a)] = state[account(a)]
                    store[account(b)] = state[account(b)]
                state["version"] = version
                store["version"] = version
                audit["version"] = version
                checker.expect(version, state)

    stop = threading.Event()
    readers = [
        threading.Thread(target=reader_loop, args=(stores[name].reader(), checkers[name], stop, i))
        for i, name in enumerate(names * 2)
    ]
    writers = [threading.Thread(target=scoped_writer, args=(n, i)) for i, n in enumerate(names)]
    for thread in readers + writers:
        thread.start()
    for thread in writers:
        thread.join(TIMEOUT_S)
    stop.set()
    for thread in readers:
        thread.join(TIMEOUT_S)
    assert not any(thread.is_alive() for thread in readers + writers)
    for name in names:
        assert checkers[name].errors == []
        assert checkers[name].reads > 5
        assert dict(stores[name].reader().items()) == checkers[name].models[150]
        assert audits[name].reader().get("version") == 150
