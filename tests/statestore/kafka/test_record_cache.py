"""The record cache (:mod:`statestore.stores.caching`) in distributed mode's stack.

Its contract: a get of a cached key is served without RocksDB, and what it serves is the
committed value, whatever the transactions did (commit, abort, rewind), across a restore
(a new stack over the same RocksDB) and a standby's promotion (a new stack over a RocksDB
that the standby wrote).  The stateful machine checks every answer against a plain model:
committed values and the pending writes of the open transaction.  No broker is needed: the
processor's commit of a store is ``changelog_records`` (what it produces), then ``apply``
after ``commit_transaction`` or ``drop_pending`` after an abort or a rewind.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from statestore.config import RocksDBConfig
from statestore.errors import StateStoreError
from statestore.kafka import KafkaStoreSpec, TaskStore
from statestore.kafka.store import TopicChangeLoggingStore
from statestore.serdes import BytesSerde, IntSerde
from statestore.stores.caching import CachingStore
from statestore.stores.engine import RocksDBEngine

ALL_KEYS = [b"a", b"b", b"c", b"d"]
KEYS = st.sampled_from(ALL_KEYS)
VALUES = st.none() | st.integers(min_value=-(2**62), max_value=2**62)


def _task(path: Path, max_entries: int) -> TaskStore[bytes, int]:
    engine = RocksDBEngine.open(path, config=RocksDBConfig(), cache=None)
    return TaskStore(
        name="s",
        partition=0,
        engine=engine,
        key_serde=BytesSerde(),
        value_serde=IntSerde(),
        record_cache_max_entries=max_entries,
    )


def _commit(task: TaskStore[Any, Any]) -> None:
    """What the processor does after ``commit_transaction``: apply at the next offset."""
    task.apply(task.applied_offset + len(task.pending) + 1, {})


def test_a_hit_is_served_from_the_cache(tmp_path: Path) -> None:
    """A key read once is read from the cache: a write to RocksDB behind the stack's back
    (which nothing in the runtime does) is not seen, and without a cache it is."""
    for max_entries, expected in ((100, 1), (0, 2)):
        task = _task(tmp_path / str(max_entries), max_entries)
        task.store.put(b"k", 1)
        _commit(task)
        assert task.store.get(b"k") == 1
        task.engine.write([(b"k", IntSerde().serialize(2))], task.applied_offset + 1)
        assert task.store.get(b"k") == expected
        task.close()


def test_a_miss_is_cached_as_absent_and_a_commit_replaces_it(tmp_path: Path) -> None:
    task = _task(tmp_path / "s", 100)
    assert task.store.get(b"k") is None  # cached: no value
    task.store.put(b"k", 7)
    assert task.store.get(b"k") == 7  # the pending write
    task.drop_pending()  # an aborted transaction: the committed state again
    assert task.store.get(b"k") is None
    task.store.put(b"k", 8)
    _commit(task)
    assert task.store.get(b"k") == 8
    task.store.delete(b"k")
    _commit(task)
    assert task.store.get(b"k") is None
    assert task.engine.get(b"k") is None
    task.close()


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    engine = RocksDBEngine.open(tmp_path / "s", config=RocksDBConfig(), cache=None)
    part = TopicChangeLoggingStore(store="s", partition=0, engine=engine)
    cache = CachingStore(part, max_entries=10)
    keys = [b"%04d" % i for i in range(100)]
    cache.apply({key: key for key in keys[:50]}, 51)
    assert cache.cached_entries <= 10
    for key in keys:
        assert cache.lookup(key) == (key if key in keys[:50] else None)
        assert cache.cached_entries <= 10
    cache.apply(dict.fromkeys(keys[:3], b"x"), 52)
    assert [cache.lookup(key) for key in keys[:4]] == [b"x", b"x", b"x", keys[3]]
    cache.close()
    with pytest.raises(ValueError, match="at least 1"):
        CachingStore(part, max_entries=0)


def test_a_failed_apply_empties_the_cache(tmp_path: Path) -> None:
    engine = RocksDBEngine.open(tmp_path / "s", config=RocksDBConfig(), cache=None)
    part = TopicChangeLoggingStore(store="s", partition=0, engine=engine)
    cache = CachingStore(part, max_entries=10)
    cache.apply({b"a": b"1"}, 2)
    assert cache.lookup(b"a") == b"1"
    engine.close()
    with pytest.raises(StateStoreError):
        cache.apply({b"a": b"2"}, 3)
    assert cache.cached_entries == 0


def test_the_spec_setting() -> None:
    assert KafkaStoreSpec(name="s").record_cache_max_entries == 10_000
    assert KafkaStoreSpec(name="s", record_cache_max_entries=0).record_cache_max_entries == 0
    with pytest.raises(ValueError, match="record_cache_max_entries"):
        KafkaStoreSpec(name="s", record_cache_max_entries=-1)


class RecordCacheMachine(RuleBasedStateMachine):
    """A task's store with a small record cache against a model of committed and pending."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="statestore-cache-"))
        self.path = self.root / "s-0"
        self.max_entries = 3
        self.task = _task(self.path, self.max_entries)
        self.committed: dict[bytes, int] = {}
        self.pending: dict[bytes, int | None] = {}

    def _expected(self, key: bytes) -> int | None:
        if key in self.pending:
            return self.pending[key]
        return self.committed.get(key)

    @rule(key=KEYS, value=VALUES)
    def put(self, key: bytes, value: int | None) -> None:
        self.task.store.put(key, value)
        self.pending[key] = value

    @rule(key=KEYS)
    def get(self, key: bytes) -> None:
        assert self.task.store.get(key) == self._expected(key)

    @rule(keys=st.lists(KEYS, max_size=5))
    def get_many(self, keys: list[bytes]) -> None:
        assert self.task.store.get_many(keys) == [self._expected(key) for key in keys]

    @rule()
    def commit(self) -> None:
        records, _timestamps = self.task.changelog_records()
        assert dict(records) == {
            key: None if value is None else IntSerde().serialize(value)
            for key, value in self.pending.items()
        }
        _commit(self.task)
        for key, value in self.pending.items():
            if value is None:
                self.committed.pop(key, None)
            else:
                self.committed[key] = value
        self.pending.clear()

    @rule()
    def abort_or_rewind(self) -> None:
        """An aborted transaction, or a rewind after a ``process()`` error: the buffer's
        writes are dropped (what the processor does to every store of every task)."""
        self.task.drop_pending()
        self.pending.clear()

    @rule(max_entries=st.integers(min_value=0, max_value=5))
    def restore(self, max_entries: int) -> None:
        """The task closed and restored over the same RocksDB (a restart, a reassignment)."""
        self.task.close()
        self.pending.clear()
        self.max_entries = max_entries
        self.task = _task(self.path, max_entries)

    @rule(
        changes=st.dictionaries(KEYS, VALUES, max_size=4),
        max_entries=st.integers(min_value=1, max_value=5),
    )
    def promote_standby(self, changes: dict[bytes, int | None], max_entries: int) -> None:
        """The task moves away; a standby applies another owner's commits to this RocksDB
        (as :mod:`statestore.kafka.standby` does); then it is promoted: a new stack over it."""
        offset = self.task.applied_offset
        self.task.close()
        self.pending.clear()
        engine = RocksDBEngine.open(self.path, config=RocksDBConfig(), cache=None)
        engine.write(
            [(k, None if v is None else IntSerde().serialize(v)) for k, v in changes.items()],
            offset + len(changes) + 1,
        )
        engine.close()
        for key, value in changes.items():
            if value is None:
                self.committed.pop(key, None)
            else:
                self.committed[key] = value
        self.max_entries = max_entries
        self.task = _task(self.path, max_entries)

    @invariant()
    def gets_see_the_model(self) -> None:
        """Every key read back (more keys than the cache holds: misses and evictions)."""
        assert [self.task.store.get(key) for key in ALL_KEYS] == list(map(self._expected, ALL_KEYS))

    @invariant()
    def scans_see_the_model(self) -> None:
        merged = {**self.committed, **self.pending}
        expected = sorted((k, v) for k, v in merged.items() if v is not None)
        assert list(self.task.store.items()) == expected

    def teardown(self) -> None:
        self.task.close()
        shutil.rmtree(self.root, ignore_errors=True)


TestRecordCacheMachine = RecordCacheMachine.TestCase
TestRecordCacheMachine.settings = settings(stateful_step_count=40)
