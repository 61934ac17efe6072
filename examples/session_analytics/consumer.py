"""The session-analytics consumer, its view stream, and a plain model of its sessions.

Thread-safety: not thread-safe (one thread per consumer, like its store).
"""

from __future__ import annotations

from pathlib import Path

from statestore import LongSerde, SessionStore, StateManager, Windowed
from statestore.testing import Reporter

STORE = "sessions"
GAP_MS = 30 * 60_000
RETENTION_MS = 30 * 24 * 3_600_000


def open_sessions(manager: StateManager) -> SessionStore[str, int]:
    """The consumer's session store (views per session)."""
    return manager.session_store(STORE, retention_ms=RETENTION_MS, value_serde=LongSerde())


def record_view(sessions: SessionStore[str, int], user: str, timestamp_ms: int) -> Windowed[str]:
    """Count a view of ``user`` at ``timestamp_ms`` in its session; returns the session."""
    session, _views = sessions.merge(
        user,
        timestamp_ms,
        inactivity_gap_ms=GAP_MS,
        aggregate=lambda views: (views or 0) + 1,
        merger=lambda a, b: a + b,
    )
    return session


def view(i: int) -> tuple[str, int]:
    """The ``i``-th page view of the demonstration stream: ``(user, time in ms)``, time mostly forward."""
    user = f"user-{(i * 31) % 4}"
    jitter = ((i * 7_919) % 11) * 60_000  # up to 10 minutes out of order
    pause = 45 * 60_000 if i % 13 == 0 else 0  # now and then a user leaves for a while
    return user, i * 5 * 60_000 + pause * (i // 13) - jitter + 10**12


def consume(state_dir: Path, reporter: Reporter, count: int) -> None:
    """Consume ``count`` views of :func:`view`, one transaction each (with the position); ack each.

    Resumes after the committed position.  A ``statestore.testing`` service.
    """
    with StateManager(state_dir) as manager:
        sessions = open_sessions(manager)
        position = manager.metadata.get("position", -1)
        for i in range(position + 1, count):
            user, timestamp = view(i)
            with manager.transaction():
                record_view(sessions, user, timestamp)
                manager.metadata["position"] = i
            reporter.ack(i)


def expected_sessions(last: int) -> dict[tuple[str, int, int], int]:
    """A plain model of the sessions after views ``0..last``: ``{(user, start, end): views}``."""
    sessions: dict[tuple[str, int, int], int] = {}
    for i in range(last + 1):
        user, stamp = view(i)
        near = [
            s
            for s in sessions
            if s[0] == user and s[2] >= stamp - GAP_MS and s[1] <= stamp + GAP_MS
        ]
        start = min([stamp, *(s[1] for s in near)])
        end = max([stamp, *(s[2] for s in near)])
        total = sum(sessions.pop(s) for s in near) + 1
        sessions[(user, start, end)] = total
    return sessions
