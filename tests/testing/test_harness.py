"""CrashHarness mechanics: kill points, ack accounting, failures, timeouts, fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statestore.testing import (
    CrashHarness,
    ServiceExitError,
    ServiceFailedError,
    ServiceTimeoutError,
)
from tests.testing import services


def _assert_dead(pid: int | None) -> None:
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_runs_to_completion_without_a_kill_point(crash_harness: CrashHarness) -> None:
    run = crash_harness.run(services.journal_service, args=(20,))
    assert not run.killed
    assert run.exitcode == 0
    assert run.result == 20
    assert run.acks == tuple(range(20))
    assert run.last_ack == 19
    assert services.journal_lines(crash_harness.state_dir) == list(range(20))
    assert crash_harness.runs == [run]


def test_kill_after_acks_sigkills_and_every_ack_is_durable(crash_harness: CrashHarness) -> None:
    run = crash_harness.run(services.journal_service, args=(100_000,), kill_after_acks=50)
    assert run.killed
    assert run.exitcode == -9
    assert run.ack_count >= 50
    assert run.acks == tuple(range(run.ack_count))  # nothing lost or reordered in the pipe
    lines = services.journal_lines(crash_harness.state_dir)
    assert lines[: run.ack_count] == list(run.acks)  # acknowledged means durable
    assert len(lines) < 100_000
    _assert_dead(run.pid)


def test_kill_at_mark_waits_for_the_mark(crash_harness: CrashHarness) -> None:
    run = crash_harness.run(services.marking_service, kill_at_mark="warm")
    assert run.killed
    assert run.marks == ("warm",)
    assert run.ack_count >= 3


def test_kill_after_acks_and_mark_needs_both(crash_harness: CrashHarness) -> None:
    run = crash_harness.run(services.marking_service, kill_after_acks=30, kill_at_mark="warm")
    assert run.killed
    assert run.ack_count >= 30


def test_kill_delay_alone_is_a_random_moment(crash_harness: CrashHarness) -> None:
    run = crash_harness.run(services.journal_service, args=(10**9, 0.001), kill_delay_s=0.2)
    assert run.killed
    assert run.exitcode == -9
    assert 0 < run.ack_count < 10**9
    assert run.elapsed_s >= 0.2


def test_service_exception_is_reported_with_the_child_traceback(
    crash_harness: CrashHarness,
) -> None:
    with pytest.raises(ServiceFailedError) as info:
        crash_harness.run(services.failing_service, kill_after_acks=100)
    assert info.value.exception_type == "builtins.ValueError"
    assert "boom in the child" in info.value.traceback_text
    assert info.value.acks == (0, 1)


def test_timeout_kills_the_child(crash_harness: CrashHarness) -> None:
    with pytest.raises(ServiceTimeoutError) as info:
        crash_harness.run(services.hanging_service, kill_after_acks=1, timeout_s=1.5)
    assert info.value.acks == ()
    run = crash_harness.runs[-1]
    _assert_dead(run.pid)


def test_child_dying_on_its_own_is_an_error(crash_harness: CrashHarness) -> None:
    with pytest.raises(ServiceExitError) as info:
        crash_harness.run(services.exiting_service, kill_after_acks=5)
    assert info.value.exitcode == 3
    assert info.value.acks == ("only",)


def test_forkserver_start_method_with_preload(state_dir: Path) -> None:
    harness = CrashHarness(state_dir, start_method="forkserver", preload=["tests.testing.services"])
    run = harness.run(services.journal_service, args=(1000,), kill_after_acks=10)
    assert run.killed
    assert services.journal_lines(state_dir)[: run.ack_count] == list(run.acks)


@pytest.mark.parametrize(
    "kwargs",
    [{"start_method": "fork"}, {"timeout_s": 0}, {"preload": ["json"]}],
)
def test_invalid_harness_settings(state_dir: Path, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        CrashHarness(state_dir, **kwargs)  # type: ignore[arg-type]


def test_invalid_kill_points(crash_harness: CrashHarness) -> None:
    with pytest.raises(ValueError):
        crash_harness.run(services.journal_service, args=(1,), kill_after_acks=-1)
    with pytest.raises(ValueError):
        crash_harness.run(services.journal_service, args=(1,), kill_delay_s=-0.5)


def test_state_dir_fixture_is_fresh_and_shared_with_the_harness(
    state_dir: Path, crash_harness: CrashHarness
) -> None:
    assert state_dir.is_dir()
    assert list(state_dir.iterdir()) == []
    assert crash_harness.state_dir == state_dir
