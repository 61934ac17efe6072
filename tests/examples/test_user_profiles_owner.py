"""The distributed user-profile service's write path without a broker: commands and acknowledgements.

:func:`apply_command` runs on a real store partition (local mode, same
``KeyValueStore`` class as in distributed mode); :class:`Acknowledgements`
is driven from a second thread as the processor's thread drives it: an
answer is released only by a commit of the epoch it was staged in.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.user_profiles.owner import (
    Acknowledgements,
    Answer,
    NotAcknowledgedError,
    apply_command,
)
from statestore import StateManager

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Any]:
    with StateManager(tmp_path) as manager:
        yield manager.store("user-profiles")


def _command(op: str, fields: dict[str, Any] | None = None, ts_ms: int = 1000) -> dict[str, Any]:
    return {"rid": "r", "origin": "i1", "op": op, "fields": fields or {}, "ts_ms": ts_ms}


def test_commands_follow_the_services_rules(store: Any) -> None:
    assert apply_command(store, "alice", _command("update", {"a": 1})).status == 404
    assert apply_command(store, "alice", _command("delete")).status == 404
    created = apply_command(store, "alice", _command("create", {"a": 1}, ts_ms=5))
    assert created == Answer(
        201,
        {"id": "alice", "fields": {"a": 1}, "version": 1, "created_ms": 5, "updated_ms": 5},
    )
    assert apply_command(store, "alice", _command("create", {"a": 2})).status == 409
    patched = apply_command(store, "alice", _command("update", {"a": None, "b": 2}, ts_ms=9))
    assert patched.status == 200
    assert patched.body is not None
    assert (patched.body["fields"], patched.body["version"]) == ({"b": 2}, 2)
    assert (patched.body["created_ms"], patched.body["updated_ms"]) == (5, 9)
    replaced = apply_command(store, "alice", _command("replace", {"c": 3}))
    assert (replaced.status, replaced.body and replaced.body["version"]) == (200, 3)
    assert store.get("alice")["fields"] == {"c": 3}
    assert apply_command(store, "alice", _command("delete")) == Answer(204, None)
    assert store.get("alice") is None
    assert apply_command(store, "bob", _command("replace", {"x": 1})).status == 201


def test_a_replayed_command_writes_the_same_profile(store: Any) -> None:
    command = _command("replace", {"a": 1}, ts_ms=77)
    first = apply_command(store, "alice", command)
    store.delete("alice")  # as if the transaction had aborted and the command replays
    assert apply_command(store, "alice", command) == first


def _on_processor_thread(action: Any) -> None:
    thread = threading.Thread(target=action)
    thread.start()
    thread.join(timeout=10)


async def _settled(future: asyncio.Future[Answer]) -> Answer | BaseException:
    try:
        return await asyncio.wait_for(future, 5)
    except NotAcknowledgedError as exc:
        return exc


def test_an_answer_is_released_only_by_a_commit_of_its_epoch() -> None:
    async def scenario() -> None:
        acks = Acknowledgements(asyncio.get_running_loop())
        first = acks.expect("r1", partition=0)
        second = acks.expect("r2", partition=0)
        _on_processor_thread(lambda: acks.stage("r1", Answer(200, {"v": 1}), (0, 0, 0)))
        _on_processor_thread(lambda: acks.stage("r2", Answer(200, {"v": 2}), (0, 0, 0)))
        # the commit of that transaction failed: epoch (1, 0, 0); r1 and r2 replay
        _on_processor_thread(lambda: acks.committed((1, 0, 0)))
        await asyncio.sleep(0.05)
        assert not first.done() and not second.done()
        _on_processor_thread(lambda: acks.stage("r1", Answer(200, {"v": 10}), (1, 0, 0)))
        _on_processor_thread(lambda: acks.committed((1, 0, 0)))
        assert await _settled(first) == Answer(200, {"v": 10})
        assert not second.done()  # not processed again yet: still pending
        _on_processor_thread(lambda: acks.fail({0}, "partitions [0] lost"))
        error = await _settled(second)
        assert isinstance(error, NotAcknowledgedError)
        assert "lost" in error.reason

    asyncio.run(scenario())


def test_failing_partitions_leaves_the_others_pending() -> None:
    async def scenario() -> None:
        acks = Acknowledgements(asyncio.get_running_loop())
        on_zero = acks.expect("a", partition=0)
        on_one = acks.expect("b", partition=1)
        _on_processor_thread(lambda: acks.stage("a", Answer(201, {}), (0, 0, 0)))
        assert acks.fail({0}, "revoked") == 1
        _on_processor_thread(lambda: acks.committed((0, 0, 0)))  # a staged answer of a, dropped
        assert isinstance(await _settled(on_zero), NotAcknowledgedError)
        assert not on_one.done()
        _on_processor_thread(lambda: acks.stage("b", Answer(204, None), (0, 0, 0)))
        assert acks.committed((0, 0, 0)) == 1
        assert await _settled(on_one) == Answer(204, None)
        acks.forget("b")
        _on_processor_thread(lambda: acks.stage("b", Answer(200, {}), (0, 0, 0)))  # not pending
        assert acks.committed((0, 0, 0)) == 0

    asyncio.run(scenario())
