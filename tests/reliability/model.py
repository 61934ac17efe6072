"""The deterministic workload of the reliability tests and its plain-dict model.

Commit ``i`` of a workload seeded with ``seed`` is a function of ``(seed, i)``
alone: a few puts and deletes over a small key space plus the key
:data:`SEQ_KEY` set to ``i``.  So the state after commit ``i`` is
:func:`model_after` ``(seed, i)`` whatever crashes happened on the way, and a
recovered state that carries ``SEQ_KEY = j`` must equal ``model_after(seed, j)``
exactly: that one comparison checks atomicity (no part of commit ``j + 1``, all
of commit ``j``) and, with ``j >= last acknowledged``, durability.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

SEQ_KEY = b"__seq__"
KEY_SPACE = 40

Ops = list[tuple[bytes, bytes | None]]


def commit_ops(seed: int, i: int) -> Ops:
    """The mutations of commit ``i``: 1-6 puts/deletes (about 1 in 6 a delete), then ``SEQ_KEY``."""
    rng = random.Random(seed * 1_000_003 + i)
    ops: Ops = []
    for _ in range(rng.randint(1, 6)):
        key = b"k%03d" % rng.randrange(KEY_SPACE)
        if rng.random() < 0.17:
            ops.append((key, None))
        else:
            pad = rng.randbytes(rng.choice((0, 8, 40, 200)))
            ops.append((key, b"%d:%s:" % (i, key) + pad))
    ops.append((SEQ_KEY, b"%d" % i))
    return ops


def apply(state: dict[bytes, bytes], ops: Iterable[tuple[bytes, bytes | None]]) -> None:
    """Apply mutations in order (``None`` deletes)."""
    for key, value in ops:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value


def model_after(seed: int, last: int) -> dict[bytes, bytes]:
    """The state after commits ``0..last`` (``last = -1``: empty)."""
    state: dict[bytes, bytes] = {}
    for i in range(last + 1):
        apply(state, commit_ops(seed, i))
    return state


def seq_of(state: dict[bytes, bytes]) -> int:
    """The last commit a state claims to contain (``-1`` if none)."""
    raw = state.get(SEQ_KEY)
    return -1 if raw is None else int(raw)


class ModelCache:
    """Incrementally computed models for one seed (verification of many trials stays linear)."""

    def __init__(self, seed: int) -> None:
        """Start at the empty state."""
        self.seed = seed
        self._states: list[dict[bytes, bytes]] = [{}]  # index j + 1 = after commit j

    def after(self, last: int) -> dict[bytes, bytes]:
        """The state after commit ``last``."""
        while len(self._states) <= last + 1:
            state = dict(self._states[-1])
            apply(state, commit_ops(self.seed, len(self._states) - 1))
            self._states.append(state)
        return self._states[last + 1]
