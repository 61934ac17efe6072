"""The rate-limiter example: its decisions against a model, and kill -9 in the middle of its stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.rate_limiter.__main__ import main as rate_limiter_main
from examples.rate_limiter.limiter import (
    BUCKET_MS,
    LIMIT,
    WINDOW_MS,
    RateLimiter,
    expected_counts,
    serve,
)
from statestore import StateManager
from statestore.testing import CrashHarness
from tests.examples.cli import helps_then_runs


def _counts(limiter: RateLimiter) -> dict[tuple[str, int], int]:
    return {(w.key, w.start_ms): count for w, count in limiter.store.all()}


def test_limits_each_user_in_any_window(tmp_path: Path) -> None:
    with StateManager(tmp_path / "state") as manager:
        limiter = RateLimiter(manager, limit=2, window_ms=1_000, bucket_ms=100)
        assert [limiter.allow("a", t) for t in (0, 10, 20, 990, 1_005, 1_050)] == [
            True,
            True,
            False,
            False,
            True,  # the bucket of 0-99 has left the window (1_005 - 1_000 = 5 > 0..99's start)
            True,
        ]
        assert limiter.allow("b", 20)  # other users are counted apart
        manager.commit()


def test_survives_kill_9(crash_harness: CrashHarness) -> None:
    for trial in range(3):
        run = crash_harness.run(serve, args=(100_000,), kill_after_acks=150 + 100 * trial)
        assert run.killed
        with crash_harness.reopen() as manager:
            position = manager.metadata.get("position")
            limiter = RateLimiter(manager, limit=LIMIT, window_ms=WINDOW_MS, bucket_ms=BUCKET_MS)
            assert position in (run.last_ack, run.last_ack + 1)  # nothing acknowledged lost
            assert _counts(limiter) == expected_counts(position)  # decisions match the inputs


def test_the_command_line_helps_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    lines = helps_then_runs(rate_limiter_main, "python -m examples.rate_limiter", tmp_path, capsys)
    assert len(lines) == 40
    assert all(line.endswith(("allowed", "limited")) for line in lines)
