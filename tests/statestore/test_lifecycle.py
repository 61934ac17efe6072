"""The lifecycle table: the docstring's table and the code's moves are the same, and illegal moves raise."""

from __future__ import annotations

import re

import pytest

from statestore.errors import InvalidStateStoreError
from statestore.stores import lifecycle
from statestore.stores.lifecycle import StoreState, move


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


def test_the_documented_table_is_the_table_in_the_code() -> None:
    assert _documented_moves() == lifecycle._MOVES
    assert set(lifecycle._MOVES) == set(StoreState)


@pytest.mark.parametrize("current", list(StoreState))
@pytest.mark.parametrize("new", list(StoreState))
def test_move_allows_exactly_the_table(current: StoreState, new: StoreState) -> None:
    if new in lifecycle._MOVES[current]:
        assert move("kv-0", current, new, "op") is new
    else:
        with pytest.raises(InvalidStateStoreError) as info:
            move("kv-0", current, new, "op")
        assert (info.value.store, info.value.state, info.value.operation) == (
            "kv-0",
            current.value,
            "op",
        )
