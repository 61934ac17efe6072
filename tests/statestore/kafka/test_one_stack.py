"""One store stack for both modes: the same operations give the same answers and the same errors.

Local mode: :meth:`StateManager.store`.  Distributed mode: the store a
:class:`~statestore.kafka.TaskStore` builds over a RocksDB engine, as the
processor hands it to ``process`` (committed the way the processor commits
it: :meth:`TaskStore.apply` after the transaction).  No broker is needed: the
change-logging layer is the only part that differs, and it is not reached
until the commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog import LogConfig
from statestore import KeyValueStore, StateManager
from statestore.config import RocksDBConfig
from statestore.errors import (
    DeserializationError,
    InvalidStateStoreError,
    RecordTooLargeForLogError,
    SerializationError,
    StateStoreError,
    UnsupportedStoreOperationError,
)
from statestore.kafka import TaskStore
from statestore.metrics.registry import MetricsRegistry
from statestore.metrics.snapshot import nest_samples
from statestore.serdes import MsgpackSerde, StringSerde
from statestore.stores.engine import RocksDBEngine
from statestore.stores.spec import RECORD_OVERHEAD_BYTES
from tests.statestore.helpers import NO_CLEANER

MAX_MESSAGE_BYTES = 4096


class _Picky(MsgpackSerde):
    """A value serde that refuses to read back one stored value (a value written by an older
    version of the application, say)."""

    def deserialize(self, data: bytes, /) -> Any:
        value = super().deserialize(data)
        if value == "unreadable":
            raise ValueError("this value cannot be read back")
        return value


Commit = Callable[[], None]


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[KeyValueStore[Any, Any], Commit]]:
    with StateManager(tmp_path / "local", config=NO_CLEANER) as manager:
        store = manager.store(
            "s",
            key_serde=StringSerde(),
            value_serde=_Picky(),
            log_config=LogConfig(max_message_bytes=MAX_MESSAGE_BYTES),
        )

        def commit() -> None:
            store.commit()

        yield store, commit


@pytest.fixture
def distributed(tmp_path: Path) -> Iterator[tuple[KeyValueStore[Any, Any], Commit]]:
    engine = RocksDBEngine.open(tmp_path / "s-0", config=RocksDBConfig(), cache=None)
    task: TaskStore[Any, Any] = TaskStore(
        name="s",
        partition=0,
        engine=engine,
        key_serde=StringSerde(),
        value_serde=_Picky(),
        max_record_bytes=MAX_MESSAGE_BYTES - RECORD_OVERHEAD_BYTES,
    )
    offset = 0

    def commit() -> None:  # what the processor does after commit_transaction
        nonlocal offset
        offset += len(task.pending) + 1  # the records, then the transaction's marker
        task.apply(offset, {})

    yield task.store, commit
    task.close()


def _outcome(operation: Callable[[], Any]) -> Any:
    """What an operation returned (iterators drained), or the type of error it raised."""
    try:
        result = operation()
        if isinstance(result, Iterator):
            result = list(result)
    except StateStoreError as exc:
        return type(exc)
    return result


def _script(store: KeyValueStore[Any, Any], commit: Commit) -> list[Any]:
    """The same operations on either store; every answer and error type, in order."""
    big = "x" * MAX_MESSAGE_BYTES
    steps: list[Callable[[], Any]] = [
        lambda: store.put("a", {"n": 1}),
        lambda: store.put("b", [1, 2]),
        lambda: store.put("c", "three"),
        lambda: store.get("a"),  # pending: read-your-writes
        lambda: store.range("a", "c"),
        commit,
        lambda: store.get("b"),  # committed
        lambda: store.delete("b"),  # a pending tombstone hides the committed value
        lambda: store.get("b", "gone"),
        lambda: "b" in store,
        store.range,
        store.reverse_range,
        lambda: store.prefix_scan("a"),
        lambda: store.get_many(["a", "b", "c", "d"]),
        lambda: store.put_if_absent("a", 9),
        lambda: store.put_if_absent("d", 4),
        lambda: store.put_all([("e", 5), ("f", None)]),
        lambda: list(store.keys()),
        lambda: list(store.values()),
        lambda: len(store),
        lambda: store.pending_count,
        commit,
        store.items,
        # bad input: typed errors before anything is buffered
        lambda: store.put(None, 1),
        lambda: store.get(None),
        lambda: store.put(b"bytes key", 1),
        lambda: store.put("k", object()),
        lambda: store.put("k", big),
        lambda: store.put_all([("k", 1), ("big", big)]),
        lambda: store.pending_count,
        # a stored value the serde cannot read back
        lambda: store.put("u", "unreadable"),
        commit,
        lambda: store.get("u"),
        store.items,
        lambda: store["a"],
        lambda: store.partitions,
    ]
    return [_outcome(step) for step in steps]


def test_both_modes_give_the_same_answers_and_errors(
    local: tuple[KeyValueStore[Any, Any], Commit],
    distributed: tuple[KeyValueStore[Any, Any], Commit],
) -> None:
    assert type(local[0]) is type(distributed[0]) is KeyValueStore
    local_outcomes = _script(*local)
    distributed_outcomes = _script(*distributed)
    assert distributed_outcomes == local_outcomes
    # and the answers are the spec's, not just equal to each other
    assert local_outcomes[3] == {"n": 1}
    assert local_outcomes[4] == [("a", {"n": 1}), ("b", [1, 2])]
    assert local_outcomes[8] == "gone"
    assert local_outcomes[13] == [{"n": 1}, None, "three", None]
    assert local_outcomes[17] == ["a", "c", "d", "e"]
    assert local_outcomes[23:29] == [
        SerializationError,
        SerializationError,
        SerializationError,
        SerializationError,
        RecordTooLargeForLogError,
        RecordTooLargeForLogError,
    ]
    assert local_outcomes[29] == 0  # nothing of the refused writes was buffered
    assert local_outcomes[32:34] == [DeserializationError, DeserializationError]
    assert local_outcomes[35] == 1


def test_what_distributed_mode_cannot_do_raises_a_typed_error_that_says_why(
    distributed: tuple[KeyValueStore[Any, Any], Commit],
) -> None:
    store, commit = distributed
    store.put("a", 1)
    for operation in (
        store.commit,
        store.abort,
        lambda: store.changelog,
        lambda: contextlib.ExitStack().enter_context(store.transaction()),
    ):
        with pytest.raises(UnsupportedStoreOperationError, match="Kafka transaction") as caught:
            operation()
        assert caught.value.store == "s"
        assert caught.value.reason
    assert store.changelogs == ()
    assert store.pending_count == 1  # nothing was committed or dropped by the refusals
    commit()
    assert store.get("a") == 1


def test_a_closed_task_store_refuses_like_a_closed_local_store(
    local: tuple[KeyValueStore[Any, Any], Commit],
    distributed: tuple[KeyValueStore[Any, Any], Commit],
) -> None:
    for store, _commit in (local, distributed):
        store.close()
        with pytest.raises(InvalidStateStoreError):
            store.get("a")
        with pytest.raises(InvalidStateStoreError):
            store.put("a", 1)


def test_the_runtime_applies_exactly_what_it_produced(tmp_path: Path) -> None:
    """``pending`` is what the runtime produces; ``apply`` writes it with the broker offset and
    drops it from the buffer; ``drop_pending`` (an abort) drops it without touching RocksDB."""
    engine = RocksDBEngine.open(tmp_path / "t-1", config=RocksDBConfig(), cache=None)
    task: TaskStore[str, Any] = TaskStore(
        name="t", partition=1, engine=engine, key_serde=StringSerde(), value_serde=MsgpackSerde()
    )
    try:
        task.store.put("a", 1)
        task.store.put("b", 2)
        task.store.delete("b")
        assert dict(task.pending) == {b"a": MsgpackSerde().serialize(1), b"b": None}
        task.apply(3, {b"k": b"v"})
        assert (task.applied_offset, task.engine.applied_offset()) == (3, 3)
        assert task.engine.meta(b"k") == b"v"
        assert not task.pending and task.store.get("a") == 1
        task.store.put("a", 2)
        assert task.drop_pending() == 1
        assert task.store.get("a") == 1 and task.engine.applied_offset() == 3
    finally:
        task.close()


def test_both_modes_count_the_same_operations_and_commits(tmp_path: Path) -> None:
    """The metered layer is the same in both modes: at ``DEBUG`` the same script counts the same
    puts, gets and deletes, and each commit that wrote records counts once."""
    debug = attrs.evolve(NO_CLEANER, metrics_recording_level="DEBUG")
    wanted = ("put-total", "get-total", "delete-total", "commit-total", "records-committed-total")
    with StateManager(tmp_path / "local", config=debug) as manager:
        store = manager.store(
            "s",
            key_serde=StringSerde(),
            value_serde=_Picky(),
            log_config=LogConfig(max_message_bytes=MAX_MESSAGE_BYTES),
        )
        _script(store, store.commit)  # type: ignore[arg-type]
        (local,) = manager.metrics()["stores"]["s"].values()
    registry = MetricsRegistry(level="DEBUG")
    engine = RocksDBEngine.open(tmp_path / "s-0", config=RocksDBConfig(), cache=None)
    task: TaskStore[Any, Any] = TaskStore(
        name="s",
        partition=0,
        engine=engine,
        key_serde=StringSerde(),
        value_serde=_Picky(),
        max_record_bytes=MAX_MESSAGE_BYTES - RECORD_OVERHEAD_BYTES,
        metrics=registry,
    )
    offset = 0

    def commit() -> None:
        nonlocal offset
        offset += len(task.pending) + 1
        task.apply(offset, {})

    try:
        _script(task.store, commit)
        (distributed,) = nest_samples(registry.samples())["stores"]["s"].values()
    finally:
        task.close()
    assert {name: distributed[name] for name in wanted} == {name: local[name] for name in wanted}
    assert local["commit-total"] == 3 and local["put-total"] > 0 and local["get-total"] > 0
    assert distributed["applied-offset"] == offset
