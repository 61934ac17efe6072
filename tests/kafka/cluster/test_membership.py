"""Group membership on a real broker: static membership (KIP-345), clean shutdown, rebalance
listeners, standby lag.  The broker's session timeout is 6 s (conftest)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples.balances import cluster as balances
from examples.balances.transactions import generate
from kafka_harness.broker import KafkaBroker
from statestore.kafka import KafkaClientError, Processor, RebalanceEvent
from tests.kafka.cluster.helpers import wait_caught_up
from tests.kafka.cluster.oracle import PARTITIONS, App, run_until

SESSION_TIMEOUT_S = 6


@pytest.fixture
def app_factory(cluster: KafkaBroker) -> Callable[..., App]:
    return lambda name, **kw: App(cluster.bootstrap_servers, name, **kw)


def _poll_all(*processors: Processor) -> Callable[[], None]:
    def poll() -> None:
        for processor in processors:
            processor.poll_once(0.05)

    return poll


def test_a_static_member_restarted_in_time_gets_its_partitions_back_unnoticed(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("member-static")
    app.feed(200)
    seen: list[RebalanceEvent] = []
    first = app.processor(
        tmp_path / "a", instance_id="a", static_membership=True, on_rebalance=seen.append
    )
    second = app.processor(tmp_path / "b", instance_id="b", static_membership=True)
    with first:
        second.start()
        try:
            run_until(
                _poll_all(first, second),
                lambda: (
                    len(first.assignment) == len(second.assignment) == PARTITIONS // 2
                    and app.committed_end()
                ),
            )
            mine = second.assignment
            seen.clear()
        finally:
            second.close()  # a clean shutdown of a static member: the broker keeps its place
        app.feed(100)
        restarted = app.processor(tmp_path / "b", instance_id="b", static_membership=True)
        with restarted:
            run_until(
                _poll_all(first, restarted),
                lambda: restarted.assignment == mine and app.committed_end(),
                timeout_s=SESSION_TIMEOUT_S * 3,
                every_s=0.2,
            )
        assert seen == [], f"the other member noticed the restart: {seen}"
        assert first.assignment != [] and set(first.assignment).isdisjoint(mine)
    app.check()


def test_a_second_process_with_the_same_static_instance_id_is_refused(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("member-dup")
    first = app.processor(tmp_path / "a", instance_id="same", static_membership=True)
    twin = app.processor(
        tmp_path / "b", instance_id="same", static_membership=True, static_rejoin_timeout_ms=3000
    )
    errors: list[KafkaClientError] = []
    with first:
        run_until(_poll_all(first), lambda: len(first.assignment) == PARTITIONS)
        twin.start()
        try:
            deadline = time.monotonic() + 60
            while not errors:
                assert time.monotonic() < deadline, "the twin was never refused"
                for processor in (first, twin):
                    try:
                        processor.poll_once(0.05)
                    except KafkaClientError as exc:
                        errors.append(exc)
        finally:
            twin.close()
    assert "instance ID is still used" in errors[0].reason, errors[0]


def test_a_dynamic_member_leaves_at_once_on_a_clean_shutdown(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("member-leave")
    seen: list[RebalanceEvent] = []
    first = app.processor(tmp_path / "a", instance_id="a", on_rebalance=seen.append)
    second = app.processor(tmp_path / "b", instance_id="b")
    with first:
        with second:
            run_until(
                _poll_all(first, second),
                lambda: len(first.assignment) == len(second.assignment) == PARTITIONS // 2,
            )
            theirs = tuple(second.assignment)
        left = time.monotonic()
        run_until(_poll_all(first), lambda: len(first.assignment) == PARTITIONS, every_s=0.05)
        took_s = time.monotonic() - left
        seen_before_close = list(seen)
    assert took_s < SESSION_TIMEOUT_S, f"{took_s:.1f}s: waited for the session timeout"
    # alone first (all), then the other member's half revoked, then given back on its leave
    assert seen[0] == RebalanceEvent(kind="assigned", partitions=tuple(range(PARTITIONS)))
    assert RebalanceEvent(kind="revoked", partitions=theirs) in seen
    assert seen_before_close[-1] == RebalanceEvent(kind="assigned", partitions=theirs)
    assert seen[-1] == RebalanceEvent(kind="revoked", partitions=tuple(range(PARTITIONS)))


def test_standby_lag_is_reported_per_partition(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("member-lag")
    settings = {"num_standby_replicas": 1, "standby_refresh_ms": 200}
    first = app.processor(tmp_path / "a", instance_id="a", **settings)
    second = app.processor(tmp_path / "b", instance_id="b", **settings)
    with first, second:
        run_until(
            _poll_all(first, second),
            lambda: bool(first.standby_partitions) and bool(second.standby_partitions),
        )
        app.feed(300)

        def caught_up() -> bool:
            lags = [
                lag
                for processor in (first, second)
                for stores in processor.standby_lag().values()
                for lag in stores.values()
            ]
            return app.committed_end() and bool(lags) and all(lag == 0 for lag in lags)

        run_until(_poll_all(first, second), caught_up)
        lag = second.standby_lag()
        assert set(lag) == set(second.standby_partitions)
        assert all(set(stores) == {"sums"} for stores in lag.values())
        metrics = second.metrics()
        assert metrics["standby-lag"] == lag
        assert metrics["task-states"] == dict.fromkeys(second.assignment, "running")
        assert metrics["commit-total"] >= 1 and metrics["process-total"] >= 1
    app.check()


def test_a_static_member_restarted_after_kill_9_joins_once_the_broker_releases_it(
    cluster: KafkaBroker, workers: Callable[..., Any]
) -> None:
    # The broker holds a static member that died without leaving until its session
    # timeout, refusing the restarted process's join meanwhile (UNRELEASED_INSTANCE_ID):
    # the processor keeps joining instead of stopping, and runs once released.
    app = "member-kill9"
    balances.create_topics(cluster.bootstrap_servers, 2, app)
    first = workers("s1", app, "--static-membership")
    first.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    first.kill()
    again = workers("s1", app, "--static-membership")
    again.wait_for(
        lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2,
        timeout_s=SESSION_TIMEOUT_S * 5,
    )
    again.wait_for_log("not released yet", lambda _line: True, timeout_s=5)


def test_classic_static_member_restarted_after_kill_9_resumes_before_its_session_expires(
    cluster: KafkaBroker, workers: Callable[..., Any]
) -> None:
    # The classic protocol (KIP-345 proper): a static member that rejoins replaces its dead
    # predecessor at once; a dynamic one would wait for the session timeout (10 s here).
    app = "member-classic"
    balances.create_topics(cluster.bootstrap_servers, 2, app)
    flags = ("--static-membership", "--group-protocol", "classic")
    first = workers("c1", app, *flags)
    first.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    first.kill()
    restarted = time.monotonic()
    again = workers("c1", app, *flags)
    again.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2, timeout_s=60)
    took_s = time.monotonic() - restarted
    assert took_s < 10, f"{took_s:.1f}s: the restart waited for the session timeout"
    txns = list(generate(300, 20, seed=5))
    balances.feed(cluster.bootstrap_servers, txns, app)
    wait_caught_up(cluster.bootstrap_servers, app)
    ok, detail = balances.verify(cluster.bootstrap_servers, txns, app)
    assert ok, detail
