"""The example services as crash-harness service functions (module level, so children can import them).

Each runs the real service code over a real StateManager in a child process
and acks after every commit has returned, as ``statestore.testing`` expects.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from examples.balances.processor import open_balances, process
from examples.user_profiles.service import STORE_NAME as PROFILES
from examples.user_profiles.service import NotFoundError, Profile, ProfileService
from statestore import StateManager
from statestore.aio import AsyncStateManager
from statestore.testing import Reporter

USERS = 12


def balances_service(
    state_dir: Path, reporter: Reporter, input_path: str, commit_every: int
) -> int:
    """Process the whole input (resuming after the committed position); ack each position line."""
    with StateManager(state_dir) as manager:
        store = open_balances(manager)
        reporter.mark("restored")
        with Path(input_path).open("rb") as source:
            summary = process(
                store,
                manager.metadata,
                manager.commit,
                source,
                seekable=True,
                commit_every=commit_every,
                on_commit=lambda position: reporter.ack(position.line),
            )
    return summary.end.line


def profile_ops(seed: int, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """A reproducible list of ``(action, user, fields)`` operations."""
    rng = random.Random(seed)
    ops: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(count):
        user = f"user-{rng.randrange(USERS):02d}"
        roll = rng.random()
        if roll < 0.45:
            ops.append(("replace", user, {"name": f"n{i}", "score": i}))
        elif roll < 0.8:
            ops.append(("update", user, {"score": i, "tag": None if i % 3 else f"t{i}"}))
        else:
            ops.append(("delete", user, {}))
    return ops


def profiles_service(state_dir: Path, reporter: Reporter, seed: int, count: int) -> int:
    """Apply :func:`profile_ops` through ProfileService (on statestore.aio), resuming after the acked count.

    Acks the index of every operation after its commit returned (operations
    that find no profile change nothing and are acked too).
    """

    async def serve() -> None:
        async with await AsyncStateManager.open(state_dir) as manager:
            service = ProfileService(await manager.store(PROFILES, value_type=Profile))
            for index, (action, user, fields) in enumerate(profile_ops(seed, count)):
                try:
                    if action == "replace":
                        await service.replace(user, fields)
                    elif action == "update":
                        await service.update(user, fields)
                    else:
                        await service.delete(user)
                except NotFoundError:
                    pass
                reporter.ack(index)

    asyncio.run(serve())
    return count
