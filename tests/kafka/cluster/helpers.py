"""Steps shared by the distributed-mode tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from examples.balances import cluster as balances

__all__ = ["feed_until", "has_event", "poll_each", "standbys_caught_up", "wait_caught_up"]


def wait_caught_up(bootstrap: str, app: str, timeout_s: float = 120) -> None:
    """Wait until the group's committed offsets reach the end of every input partition."""
    deadline = time.monotonic() + timeout_s
    while balances.group_lag(bootstrap, app) != 0:
        assert time.monotonic() < deadline, f"the group {app} did not catch up in {timeout_s}s"
        time.sleep(0.5)


def feed_until(
    bootstrap: str,
    app: str,
    txns: Sequence[dict[str, object]],
    done: Callable[[], bool],
    *,
    chunk: int = 50,
    timeout_s: float = 90,
) -> int:
    """Feed ``txns`` in chunks (a pause between them) until ``done()``; how many were fed.

    Chunks make sure several commits happen, whatever the workers' speed.
    """
    fed = 0
    deadline = time.monotonic() + timeout_s
    while not done():
        assert fed < len(txns), "fed everything and the condition never held"
        assert time.monotonic() < deadline, f"condition not reached in {timeout_s}s"
        balances.feed(bootstrap, txns[fed : fed + chunk], app)
        fed += chunk
        time.sleep(0.3)
    return min(fed, len(txns))


def has_event(worker: Any, name: str) -> Callable[[], bool]:
    """A ``done`` for :func:`feed_until`: the worker printed event ``name``."""
    return lambda: any(e["event"] == name for e in worker.all_events())


def standbys_caught_up(standby: Any, owner: Any) -> bool:
    """Whether ``standby`` (a :class:`~statestore.kafka.Processor`) keeps a standby of every
    partition ``owner`` runs, each at its changelog's end."""
    lags = standby.standby_lag()
    return (
        len(owner.assignment) > 0
        and set(lags) == set(owner.assignment)
        and all(lag == 0 for stores in lags.values() for lag in stores.values())
    )


def poll_each(*processors: Any, timeout_s: float = 0.05) -> Callable[[], None]:
    """A step for ``run_until``: one ``poll_once(timeout_s)`` of each processor in turn."""

    def step() -> None:
        for processor in processors:
            processor.poll_once(timeout_s)

    return step
