"""``python -m examples.session_analytics STATE_DIR``: consume a few views and print the sessions."""

from __future__ import annotations

import sys
from pathlib import Path

from examples.session_analytics.consumer import open_sessions, record_view, view
from statestore import StateManager


def main() -> None:
    """Consume 60 views of the demonstration stream, committing each, and print every session."""
    state_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "session-analytics-state")
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
