"""Task states: every move, legal and illegal, against the spec (Kafka Streams' ``Task.State``).

The expected moves are written out here from the spec, not read from
``statestore.kafka.tasks.MOVES``: created -> restoring | suspended, restoring ->
running | suspended, running -> suspended, suspended -> restoring | closed;
closed is terminal (a partition that comes back gets a new task).
"""

from __future__ import annotations

import itertools

import pytest

from statestore.kafka import IllegalTaskStateError
from statestore.kafka.tasks import Task, TaskState

LEGAL = {
    ("created", "restoring"),
    ("created", "suspended"),
    ("restoring", "running"),
    ("restoring", "suspended"),
    ("running", "suspended"),
    ("suspended", "restoring"),
    ("suspended", "closed"),
}
STATES = ["created", "restoring", "running", "suspended", "closed"]
PATH_TO = {  # a legal path from created to each state
    "created": [],
    "restoring": ["restoring"],
    "running": ["restoring", "running"],
    "suspended": ["suspended"],
    "closed": ["suspended", "closed"],
}


def _task_in(state: str) -> Task:
    task = Task(7, [])
    for step in PATH_TO[state]:
        task.move(TaskState(step))
    assert task.state is TaskState(state)
    return task


def test_a_new_task_is_created() -> None:
    assert Task(3, []).state is TaskState.CREATED


@pytest.mark.parametrize(("source", "target"), list(itertools.product(STATES, STATES)))
def test_every_move(source: str, target: str) -> None:
    task = _task_in(source)
    if (source, target) in LEGAL:
        task.move(TaskState(target))
        assert task.state is TaskState(target)
    else:
        with pytest.raises(IllegalTaskStateError) as refused:
            task.move(TaskState(target))
        assert (refused.value.partition, refused.value.state, refused.value.target) == (
            7,
            source,
            target,
        )
        assert task.state is TaskState(source), "a refused move keeps the state"


def test_run_takes_the_stores_and_the_committed_offsets() -> None:
    task = _task_in("restoring")
    task.run({}, {"in": 42})
    assert task.state is TaskState.RUNNING
    assert task.positions == task.committed == {"in": 42}
    task.positions["in"] = 50
    assert task.committed == {"in": 42}, "positions and committed are separate"


def test_only_a_suspended_task_closes() -> None:
    running = _task_in("running")
    with pytest.raises(IllegalTaskStateError):
        running.close()
    running.move(TaskState.SUSPENDED)
    running.close()
    assert running.state is TaskState.CLOSED
