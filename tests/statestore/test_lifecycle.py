"""The lifecycle table: the moves the spec allows are the ones documented and the ones ``move`` allows.

The expected table is written here, from the spec (a store is built, restored, served, then
closed; a failed store can only be closed and reopened), never read from the implementation.
"""

from __future__ import annotations

import re

import pytest

from statestore.errors import InvalidStateStoreError
from statestore.stores import lifecycle
from statestore.stores.lifecycle import StoreState, move

CREATED, RESTORING, OPEN, FAILED, CLOSED = (
    StoreState.CREATED,
    StoreState.RESTORING,
    StoreState.OPEN,
    StoreState.FAILED,
    StoreState.CLOSED,
)

EXPECTED_MOVES: dict[StoreState, frozenset[StoreState]] = {
    CREATED: frozenset({RESTORING, OPEN, CLOSED, FAILED}),  # a typed store starts open
    RESTORING: frozenset({OPEN, CLOSED, FAILED}),
    OPEN: frozenset({CLOSED, FAILED}),  # never back to restoring: reopen instead
    FAILED: frozenset({CLOSED}),  # out of step with the changelog: only a close, then reopen
    CLOSED: frozenset(),  # terminal
}
"""The legal moves by the spec (DESIGN: explicit states, one table of legal moves)."""


def _documented_moves() -> dict[StoreState, frozenset[StoreState]]:
    """Parse the ``state | meaning | moves to`` table of the module docstring."""
    lines = (lifecycle.__doc__ or "").splitlines()
    border = next(line for line in lines if line.startswith("="))
    third_column = [m.start() for m in re.finditer(r"=+", border)][2]
    rows: dict[StoreState, str] = {}
    current: StoreState | None = None
    for line in lines[lines.index(border) + 3 :]:
        if line.startswith("="):
            break
        match = re.match(r"^``(\w+)``", line)
        if match:
            current = StoreState(match.group(1))
            rows[current] = ""
        if current is not None:
            rows[current] += " " + line[third_column:]
    return {
        state: frozenset(StoreState(word) for word in re.findall(r"[a-z]+", text) if word != "none")
        for state, text in rows.items()
    }


def test_the_documented_table_is_the_specified_table() -> None:
    assert _documented_moves() == EXPECTED_MOVES
    assert set(EXPECTED_MOVES) == set(StoreState)


@pytest.mark.parametrize("current", list(StoreState))
@pytest.mark.parametrize("new", list(StoreState))
def test_move_allows_exactly_the_table(current: StoreState, new: StoreState) -> None:
    if new in EXPECTED_MOVES[current]:
        assert move("kv-0", current, new, "op") is new
    else:
        with pytest.raises(InvalidStateStoreError) as info:
            move("kv-0", current, new, "op")
        assert (info.value.store, info.value.state, info.value.operation) == (
            "kv-0",
            current.value,
            "op",
        )
