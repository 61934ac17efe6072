"""The session-analytics example: sessions against a plain model, and kill -9 mid-stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.session_analytics.__main__ import main as session_analytics_main
from examples.session_analytics.consumer import (
    consume,
    expected_sessions,
    open_sessions,
    record_view,
    view,
)
from statestore import SessionStore, StateManager
from statestore.testing import CrashHarness
from tests.examples.cli import helps_then_runs


def _sessions(store: SessionStore[str, int]) -> dict[tuple[str, int, int], int]:
    return {(w.key, w.start_ms, w.end_ms): views for w, views in store.all()}


def test_sessions_match_the_model(tmp_path: Path) -> None:
    with StateManager(tmp_path / "state") as manager:
        store = open_sessions(manager)
        for i in range(200):
            record_view(store, *view(i))
            if i % 17 == 0:
                manager.commit()
        manager.commit()
        expected = expected_sessions(199)
        assert _sessions(store) == expected
        assert len(expected) > 4  # the stream makes several sessions per user
        assert max(expected.values()) > 2  # and merges views into them


def test_survives_kill_9(crash_harness: CrashHarness) -> None:
    for trial in range(3):
        run = crash_harness.run(consume, args=(100_000,), kill_after_acks=100 + 80 * trial)
        assert run.killed
        with crash_harness.reopen() as manager:
            position = manager.metadata.get("position")
            store = open_sessions(manager)
            assert position in (run.last_ack, run.last_ack + 1)  # nothing acknowledged lost
            assert _sessions(store) == expected_sessions(position)  # no half-merged session


def test_the_command_line_helps_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    lines = helps_then_runs(
        session_analytics_main, "python -m examples.session_analytics", tmp_path, capsys
    )
    assert len(lines) == len(expected_sessions(59))
    assert all(" views over " in line for line in lines)
