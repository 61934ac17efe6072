"""Lifecycle states of stores and managers, and the one table of legal moves between them.

=============  =========================================================  =========================
state          meaning                                                    moves to
=============  =========================================================  =========================
``created``    built (files open), nothing restored or served yet         restoring, open, closed,
                                                                          failed
``restoring``  replaying the changelog into RocksDB                       open, closed, failed
``open``       serving reads, writes and commits                          closed, failed
``failed``     a commit or flush left the changelog and RocksDB out of    closed
               step: reopen (which restores from the changelog)
``closed``     released; every operation raises                           (none)
=============  =========================================================  =========================

Who holds which states: the change-logging layer of a partition goes
``created -> restoring -> open`` while the builder restores it; the typed
store is built on top of restored partitions, so it starts ``open``; the
state manager goes ``created -> open`` while it locks its directory.  Every
holder checks its state on entry to each operation and raises
:class:`~statestore.errors.InvalidStateStoreError` (naming the holder, the
state and the operation) unless the operation is allowed there.

Thread-safety: the enum and :func:`move` are immutable/pure; each holder says
which thread may change its state.
"""

from __future__ import annotations

import enum
import logging
from typing import Final

from statestore.errors import InvalidStateStoreError

__all__ = ["StoreState", "move"]

logger = logging.getLogger(__name__)


class StoreState(enum.Enum):
    """Lifecycle state of a store or manager (immutable enum members; see :mod:`.lifecycle`)."""

    CREATED = "created"
    RESTORING = "restoring"
    OPEN = "open"
    CLOSED = "closed"
    FAILED = "failed"


_MOVES: Final[dict[StoreState, frozenset[StoreState]]] = {
    StoreState.CREATED: frozenset(
        {StoreState.RESTORING, StoreState.OPEN, StoreState.CLOSED, StoreState.FAILED}
    ),
    StoreState.RESTORING: frozenset({StoreState.OPEN, StoreState.CLOSED, StoreState.FAILED}),
    StoreState.OPEN: frozenset({StoreState.CLOSED, StoreState.FAILED}),
    StoreState.FAILED: frozenset({StoreState.CLOSED}),
    StoreState.CLOSED: frozenset(),
}
"""The legal moves (the table of the module docstring; a test holds the two equal)."""


def move(owner: str, current: StoreState, new: StoreState, operation: str) -> StoreState:
    """``new`` if ``current -> new`` is a legal move, else :class:`InvalidStateStoreError`.

    ``owner`` names the holder (a store name, ``"kv-0"``, ``"manager of DIR"``)
    and ``operation`` what asked for the move; both go into the error.
    """
    if new not in _MOVES[current]:
        raise InvalidStateStoreError(owner, current.value, operation)
    logger.debug("[%s] %s -> %s", owner, current.value, new.value)
    return new
