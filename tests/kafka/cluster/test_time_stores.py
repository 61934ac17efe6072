"""Stores in time in distributed mode, against a real broker.

The application of :mod:`tests.kafka.cluster.time_app` keeps a window, a
session, a versioned and a timestamped store per task; the oracle checks the
output topic and every changelog topic against a model of the inputs, and a
processor restoring from the topics alone against the same model.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from kafka_harness.broker import KafkaBroker
from statestore.kafka import ChangelogTopicMismatchError, changelog_topic_name
from statestore.partitioner import partition_for
from tests.kafka.cluster.conftest import Worker
from tests.kafka.cluster.oracle import run_until
from tests.kafka.cluster.time_app import HISTORY_MS, PARTITIONS, RETENTION_MS, TimeApp

pytestmark = pytest.mark.timeout(300)

DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {name: entry.value for name, entry in entries.items()}


def finish_and_check(app: TimeApp, state_dir: Path) -> None:
    """A processor restoring from the topics alone finishes the inputs; oracle and stores agree."""
    with app.processor(state_dir) as processor:
        run_until(
            lambda: processor.poll_once(0.1),
            lambda: len(processor.stores("counts")) == PARTITIONS and app.committed_end(),
        )
        processor.commit()
        app.check_stores(processor)
    app.check()


def test_changelog_topics_are_created_as_kafka_streams_creates_them(
    cluster: KafkaBroker, tmp_path: Path
) -> None:
    app = TimeApp(cluster.bootstrap_servers, "time-topics")
    app.feed(300)
    finish_and_check(app, tmp_path / "a")
    configs = {
        store: topic_configs(cluster.bootstrap_servers, changelog_topic_name(app.name, store))
        for store in ("counts", "sessions", "latest", "seen")
    }
    for store in ("counts", "sessions"):
        assert configs[store]["cleanup.policy"] == "compact,delete"
        assert configs[store]["retention.ms"] == str(RETENTION_MS + DAY_MS)
    assert configs["latest"]["cleanup.policy"] == "compact"
    assert configs["latest"]["min.compaction.lag.ms"] == str(HISTORY_MS + DAY_MS)
    assert configs["seen"]["cleanup.policy"] == "compact"
    for store in configs:  # their records carry event times: any distance ahead is taken
        assert configs[store]["message.timestamp.after.max.ms"] == str(2**63 - 1)
    # The restore of a second processor from the same topics, into an empty state dir.
    finish_and_check(app, tmp_path / "b")


@pytest.mark.parametrize(
    ("store", "configs", "setting"),
    [
        ("counts", {"cleanup.policy": "compact,delete", "retention.ms": "60000"}, "retention.ms"),
        (
            "latest",
            {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"},
            "min.compaction.lag.ms",
        ),
        ("latest", {"cleanup.policy": "compact,delete"}, "cleanup.policy"),
        ("sessions", {"cleanup.policy": "delete"}, "cleanup.policy"),
    ],
)
def test_an_existing_topic_that_does_not_fit_the_store_type_is_refused(
    cluster: KafkaBroker, tmp_path: Path, store: str, configs: dict[str, str], setting: str
) -> None:
    name = f"time-refused-{store}-{setting.replace('.', '-')}"
    app = TimeApp(cluster.bootstrap_servers, name)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = changelog_topic_name(name, store)
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, config=configs)])[topic].result(
        timeout=30
    )
    # Once the broker lists it: a topic created under a starting processor is validated
    # after the missing ones are created (a race the refusal cannot cover).
    run_until(lambda: None, lambda: topic in admin.list_topics(timeout=30).topics, every_s=0.1)
    processor = app.processor(tmp_path)
    with pytest.raises(ChangelogTopicMismatchError) as refused:
        processor.start()
    processor.close()
    assert refused.value.topic == topic
    assert refused.value.setting == setting
    changelogs = {
        t
        for t in admin.list_topics(timeout=30).topics
        if t.startswith(f"{name}-") and t.endswith("-changelog")
    }
    assert changelogs <= {topic}  # no other changelog topic was created


def test_a_record_the_broker_refuses_fails_the_feed(cluster: KafkaBroker) -> None:
    # Event times more than message.timestamp.after.max.ms (an hour by default) ahead of the
    # broker's clock are refused: the feed says so instead of modelling records never written.
    app = TimeApp(
        cluster.bootstrap_servers,
        "time-refused-feed",
        base_ms=int(time.time() * 1000) + 2 * HOUR_MS,
    )
    with pytest.raises(AssertionError, match="3 of 3 records refused") as refused:
        app.feed(3)
    assert "seq 0 " in str(refused.value), str(refused.value)


def test_event_times_hours_ahead_of_the_broker_clock_commit(
    cluster: KafkaBroker, tmp_path: Path
) -> None:
    """A store in time's changelog records carry the event times, not the producer's clock:
    the topics are created to take any (Kafka 4 refuses a record more than an hour ahead by
    default, which would fail every commit holding one), and a restore reads them back."""
    app = TimeApp(
        cluster.bootstrap_servers, "time-ahead", base_ms=int(time.time() * 1000) + 2 * HOUR_MS
    )
    app.feed(60, stamp_records=False)  # the inputs stamped now, their event times 2 h ahead
    finish_and_check(app, tmp_path / "a")
    finish_and_check(app, tmp_path / "b")  # restored from the topics alone


def test_an_existing_topic_with_a_time_limit_is_named_in_a_warning(
    cluster: KafkaBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    name = "time-limit-warning"
    app = TimeApp(cluster.bootstrap_servers, name)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = changelog_topic_name(name, "seen")
    limited = {
        "cleanup.policy": "compact",
        "delete.retention.ms": str(DAY_MS),
        "message.timestamp.after.max.ms": str(HOUR_MS),
    }
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, config=limited)])[topic].result(
        timeout=30
    )
    run_until(lambda: None, lambda: topic in admin.list_topics(timeout=30).topics, every_s=0.1)
    processor = app.processor(tmp_path)
    with caplog.at_level(logging.WARNING, logger="statestore.kafka"):
        processor.start()
    processor.close()
    warned = [r.getMessage() for r in caplog.records if topic in r.getMessage()]
    assert any(f"message.timestamp.after.max.ms={HOUR_MS}" in m for m in warned), warned
    assert topic_configs(cluster.bootstrap_servers, topic)["message.timestamp.after.max.ms"] == (
        str(HOUR_MS)  # accepted as it is, never altered
    )


@pytest.fixture
def start_worker(tmp_path: Path, cluster: KafkaBroker) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(instance: str, app: str, *extra: str) -> Worker:
        argv = [
            sys.executable,
            "-m",
            "tests.kafka.cluster.time_app",
            "worker",
            "--bootstrap",
            cluster.bootstrap_servers,
            "--app",
            app,
            "--state-dir",
            str(tmp_path / f"state-{instance}"),
            "--instance",
            instance,
            *extra,
        ]
        worker = Worker(argv, tmp_path / f"{instance}-{len(started)}.stderr")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.release()


def test_kill_9_mid_transaction_with_stores_in_time_is_exactly_once(
    cluster: KafkaBroker, tmp_path: Path, start_worker: Callable[..., Worker]
) -> None:
    app = TimeApp(cluster.bootstrap_servers, "time-kill9")
    victim = start_worker("w1", app.name, "--hang-in-txn-after", "2")
    survivor = start_worker("w2", app.name)
    mine = set(
        victim.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)[
            "partitions"
        ]
    )
    survivor.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
    # 40 records at a time, each time until the victim commits again or hangs (a few rounds:
    # the records, one event-time second apart, stay far below the hour ahead of the broker's
    # clock past which it refuses them)
    commits = 0
    while True:
        fed = len(app.fed)
        app.feed(40)
        if all(partition_for(u.encode(), PARTITIONS) not in mine for _s, u, _t in app.fed[fed:]):
            continue  # nothing for the victim: it has nothing to commit
        event = victim.wait_for(
            lambda e, after=commits: (
                e["event"] == "in-transaction" or (e["event"] == "commit" and e["commits"] > after)
            ),
            timeout_s=60,
        )
        if event["event"] == "in-transaction":
            break
        commits = event["commits"]
    victim.kill()  # its open transaction holds window, session and versioned records
    app.feed(500)
    survivor.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 4, 90)
    run_until(lambda: None, app.committed_end, timeout_s=150)
    survivor.stop()
    finish_and_check(app, tmp_path / "checker")


def test_failover_to_a_standby_window_store_restores_only_the_tail(
    cluster: KafkaBroker, tmp_path: Path, start_worker: Callable[..., Worker]
) -> None:
    app = TimeApp(cluster.bootstrap_servers, "time-standby")
    first = start_worker("w1", app.name, "--standby-replicas", "1")
    second = start_worker("w2", app.name, "--standby-replicas", "1")
    for worker in (first, second):
        worker.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2, 90)
        worker.wait_for(lambda e: e["event"] == "standbys" and len(e["partitions"]) == 2, 90)
    for _ in range(5):
        app.feed(200)
        run_until(lambda: None, app.committed_end, timeout_s=90)
    moved = next(
        e["partitions"] for e in reversed(first.all_events()) if e["event"] == "assignment"
    )
    deadline_events = second.all_events
    run_until(
        lambda: None,
        lambda: _standbys_caught_up(deadline_events(), moved),
        timeout_s=60,
    )
    before = len(second.all_events())
    first.kill()
    second.wait_for(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 4, 90)
    run_until(
        lambda: None,
        lambda: (
            {
                e["partition"]
                for e in second.all_events()[before:]
                if e["event"] == "restored" and e["store"] == "counts"
            }
            >= set(moved)
        ),
        timeout_s=60,
    )
    restored = [
        e
        for e in second.all_events()[before:]
        if e["event"] == "restored" and e["partition"] in moved and e["store"] == "counts"
    ]
    assert restored and all(not e["rebuilt"] for e in restored), [
        (e["partition"], e["end"], e["reason"]) for e in restored
    ]
    assert sum(e["records"] for e in restored) < 50, restored  # the tail only
    app.feed(200)
    run_until(lambda: None, app.committed_end, timeout_s=90)
    second.stop()
    finish_and_check(app, tmp_path / "checker")


def _standbys_caught_up(events: list[dict[str, Any]], partitions: list[int]) -> bool:
    lags = [e["lag"] for e in events if e["event"] == "standby-lag"]
    if not lags:
        return False
    last = lags[-1]
    return all(
        str(p) in last and all(lag == 0 for lag in last[str(p)].values()) for p in partitions
    )
