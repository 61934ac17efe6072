"""``python -m examples.session_analytics STATE_DIR``: consume a few views and print the sessions."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from examples.session_analytics.consumer import open_sessions, record_view, view
from statestore import StateManager


def main(argv: Sequence[str] | None = None) -> None:
    """Consume 60 views of the demonstration stream, committing each, and print every session."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.session_analytics",
        description="Consume 60 page views of a demonstration stream into a session store, "
        "committing each, and print every session.",
    )
    parser.add_argument(
        "state_dir",
        metavar="STATE_DIR",
        nargs="?",
        type=Path,
        default=Path("session-analytics-state"),
        help="the state directory (default: session-analytics-state)",
    )
    state_dir = parser.parse_args(argv).state_dir
    with StateManager(state_dir) as manager:
        sessions = open_sessions(manager)
        for i in range(60):
            user, timestamp = view(i)
            with manager.transaction():
                record_view(sessions, user, timestamp)
        for session, views in sessions.all():
            minutes = (session.end_ms - session.start_ms) // 60_000
            print(f"{session.key}: {views} views over {minutes} min")


if __name__ == "__main__":
    main()
