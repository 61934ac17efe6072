"""A task of the runtime: partition ``p`` of every input topic and of every store, and its states.

States and the one table of legal moves (:data:`MOVES`), as Kafka Streams'
``Task.State``::

    CREATED ----> RESTORING ----> RUNNING
       |              |              |
       +------------> SUSPENDED <----+
                      |     |
            RESTORING <-----+-----> CLOSED

* ``CREATED``: assigned (inputs paused), nothing opened yet;
* ``RESTORING``: the restorer owns the task's RocksDB and replays the
  changelog partitions; the poll thread does not touch the stores;
* ``RUNNING``: restored, inputs resumed at the committed offsets; records
  are processed and committed;
* ``SUSPENDED``: revoked or lost: no more processing, the buffers dropped
  (after the revoke's commit);
* ``CLOSED``: RocksDB closed, its lock released for a new owner.  Terminal
  here: unlike Kafka Streams (which revives a closed task for a corrupted
  store), a partition that comes back gets a new task.

A task moves only through :meth:`Task.move`; any other move raises
:class:`IllegalTaskStateError`.

Thread-safety: a task is used by the processor's thread only; while it is
``RESTORING`` its stores belong to the restorer thread, which hands them
over with the restore's result.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

from statestore.kafka.errors import IllegalTaskStateError
from statestore.kafka.handlers import ProcessingErrorContext
from statestore.kafka.store import TaskStore

__all__ = ["MOVES", "Task", "TaskState"]


class TaskState(enum.Enum):
    """Where a task is in its life (Kafka Streams' ``Task.State``)."""

    CREATED = "created"
    RESTORING = "restoring"
    RUNNING = "running"
    SUSPENDED = "suspended"
    CLOSED = "closed"


MOVES: Final[Mapping[TaskState, frozenset[TaskState]]] = {
    TaskState.CREATED: frozenset({TaskState.RESTORING, TaskState.SUSPENDED}),
    TaskState.RESTORING: frozenset({TaskState.RUNNING, TaskState.SUSPENDED}),
    TaskState.RUNNING: frozenset({TaskState.SUSPENDED}),
    TaskState.SUSPENDED: frozenset({TaskState.RESTORING, TaskState.CLOSED}),
    TaskState.CLOSED: frozenset(),
}
"""The legal moves: ``MOVES[from]`` holds every state a task in ``from`` may move to."""


class Task:
    """Partition ``p``: its input partitions, stores, positions and committed offsets.

    Invariants: ``stores`` (and ``user_stores``, their user-facing stores) is
    empty unless the state is ``RUNNING`` or ``SUSPENDED`` (a restoring task's
    stores are the restorer's); while
    ``RUNNING``, ``positions`` and ``committed`` map every input topic of the
    task to the next offset to process / the last committed one, and the
    stores hold only committed data plus the current buffer.
    """

    def __init__(self, partition: int, inputs: list[Any]) -> None:
        self.partition = partition
        self.inputs = inputs
        """The input ``TopicPartition`` s of the task (one per input topic)."""
        self.stores: dict[str, TaskStore[Any, Any]] = {}
        self.user_stores: dict[str, Any] = {}
        """The store user code gets for each name (each :attr:`TaskStore.store`)."""
        self.positions: dict[str, int] = {}
        self.committed: dict[str, int] = {}
        self.skip: dict[tuple[str, int], ProcessingErrorContext] = {}
        """Records the handler said to skip, by (topic, offset), until a commit passes them."""
        self._state = TaskState.CREATED

    @property
    def state(self) -> TaskState:
        """The current state."""
        return self._state

    def move(self, target: TaskState) -> None:
        """Move to ``target``, or raise :class:`IllegalTaskStateError` (the state is kept)."""
        if target not in MOVES[self._state]:
            raise IllegalTaskStateError(self.partition, self._state.value, target.value)
        self._state = target

    def run(self, stores: dict[str, TaskStore[Any, Any]], committed: dict[str, int]) -> None:
        """RESTORING -> RUNNING with the restored ``stores``, at the ``committed`` offsets."""
        self.move(TaskState.RUNNING)
        self.stores = stores
        self.user_stores = {name: store.store for name, store in stores.items()}
        self.committed = dict(committed)
        self.positions = dict(committed)

    def close(self) -> None:
        """SUSPENDED -> CLOSED: close every store (its RocksDB lock is released)."""
        self.move(TaskState.CLOSED)
        stores, self.stores = self.stores, {}
        self.user_stores = {}
        for store in stores.values():
            store.close()
