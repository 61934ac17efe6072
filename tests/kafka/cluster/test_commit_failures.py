"""Commit failures on a real broker are visible: a typed error after bounded attempts, never a
silent loop; a refused start changes nothing; a commit larger than the producer's queue works."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_harness.broker import KafkaBroker, running_broker
from kafka_harness.kafka_runtime import CLUSTER_KAFKA_VERSION, fetch
from statestore.kafka import (
    ChangelogTopicMismatchError,
    FatalCommitError,
    KafkaClientError,
    KafkaStoreSpec,
    Processor,
    ProcessorContext,
    ProcessorFailedError,
    changelog_topic_name,
)
from tests.kafka.cluster.conftest import BROKER_OVERRIDES
from tests.kafka.cluster.oracle import App, restart_and_check, run_until


@pytest.fixture
def app_factory(cluster: KafkaBroker) -> Callable[..., App]:
    return lambda name, **kw: App(cluster.bootstrap_servers, name, **kw)


def _poll_until_commit_fails(processor: Processor, timeout_s: float = 90) -> FatalCommitError:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            processor.poll_once(0.1)
        except FatalCommitError as exc:
            return exc
    raise AssertionError(f"no FatalCommitError in {timeout_s}s")


def test_a_missing_output_topic_stops_the_processor_with_a_typed_error(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("cfail-topic")
    app.feed(50)
    missing = f"{app.name}-nowhere"

    def process(context: ProcessorContext, message: Any) -> None:
        context.store("sums").put(message.key().decode(), 1)
        context.send(missing, message.key(), b"x")

    processor = Processor(
        app.config(commit_retry_backoff_ms=10),
        tmp_path,
        [KafkaStoreSpec(name="sums")],
        process,
    )
    with processor:
        error = _poll_until_commit_fails(processor)
        assert error.code == "UNKNOWN_TOPIC_OR_PART"
        assert missing in error.reason
        assert error.attempts == 5 and processor.aborted == 5
        with pytest.raises(ProcessorFailedError) as refused:
            processor.poll_once(0.1)
        assert refused.value.error is error
    assert not app.committed_end(), "no input offset was committed"
    assert app.read(changelog_topic_name(app.name, "sums")) == []


def test_on_a_broker_that_creates_topics_on_demand_the_runtime_creates_none(
    cluster: KafkaBroker, tmp_path: Path
) -> None:
    # Kafka's default auto.create.topics.enable=true creates a missing topic for a metadata
    # request that allows it, and librdkafka's producer and admin clients allow it unless
    # told otherwise: the producer's check of an undeclared output topic created it, with the
    # broker's defaults, and the next commit succeeded.  The runtime's clients ask without
    # creation: the missing topic stays missing and the commits fail as on any broker.  (A
    # broker of its own, as the session's, with topic creation on demand.)
    del cluster  # the session's broker is up: the classpath is resolved
    overrides = {**BROKER_OVERRIDES, "auto.create.topics.enable": "true"}
    dist = fetch(version=CLUSTER_KAFKA_VERSION)
    with running_broker(dist, tmp_path / "broker", overrides) as broker:
        app = App(broker.bootstrap_servers, "autocreate")
        app.feed(20)
        missing = f"{app.name}-nowhere"

        def process(context: ProcessorContext, message: Any) -> None:
            context.send(missing, message.key(), b"x")

        processor = Processor(
            app.config(commit_retry_backoff_ms=10),
            tmp_path / "state",
            [KafkaStoreSpec(name="sums")],
            process,
        )
        with processor:
            error = _poll_until_commit_fails(processor)
        assert error.code == "UNKNOWN_TOPIC_OR_PART"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        topics = set(admin.list_topics(timeout=30).topics)
    assert missing not in topics, "the runtime created an output topic"
    assert changelog_topic_name(app.name, "sums") in topics


def test_an_output_topic_deleted_under_load_stops_the_processor_with_its_own_error(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    # The topic passed the check at start, then goes away while records are sent to it: the
    # producer holds them (its metadata still names the topic) and commit_transaction times
    # out; librdkafka then accepts no transactional call but commit_transaction until it ends.
    app = app_factory("cfail-deleted")
    app.feed(40)
    processor = app.processor(tmp_path, commit_interval_ms=5000)
    admin = AdminClient({"bootstrap.servers": app.bootstrap})
    codes: list[str] = []
    with processor:
        run_until(lambda: processor.poll_once(0.1), app.committed_end)
        committed = processor.commits
        processed = processor.processed_records
        app.feed(20)
        while processor.processed_records < processed + 20:  # a transaction open, sent into
            processor.poll_once(0.1)
        assert processor.commits == committed
        admin.delete_topics([app.output])[app.output].result(timeout=30)
        deadline = time.monotonic() + 150
        while True:
            assert time.monotonic() < deadline, f"no FatalCommitError; failures: {codes}"
            app.feed(5)
            try:
                processor.poll_once(0.1)
            except FatalCommitError as exc:
                error = exc
                break
            finally:
                last = processor.last_commit_error
                if last is not None and len(codes) < processor.aborted:
                    codes.append(last.code)
        assert "_CONFLICT" not in codes, codes
        assert error.code == "UNKNOWN_TOPIC_OR_PART", (error, codes)
        assert error.attempts == 5 and processor.commits <= committed + 1, codes
    print(f"failures: {codes}; stopped with {error!r}")


def test_two_processes_with_one_instance_id_do_not_fence_each_other_silently(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("cfail-dup")
    first = app.processor(tmp_path / "a")
    second = app.processor(tmp_path / "b")  # the same instance_id: the same transactional.id
    failed: list[BaseException] = []
    with first, second:
        deadline = time.monotonic() + 120
        while not failed:
            assert time.monotonic() < deadline, "the duplicate instance was never reported"
            app.feed(20)
            for processor in (first, second):
                try:
                    processor.poll_once(0.1)
                except (FatalCommitError, ProcessorFailedError, KafkaClientError) as exc:
                    failed.append(exc)
    assert isinstance(failed[0], KafkaClientError), failed
    print(f"duplicate instance reported as {failed[0]!r}")


def test_two_processes_with_one_instance_id_side_by_side_stop_one_of_them(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    # Each polls on its own thread, as two processes do: each fencing is followed by commits
    # that succeed, so a count of failures in a row never reaches commit_attempts.
    app = app_factory("cfail-dup-side")
    processors = [app.processor(tmp_path / name, commit_interval_ms=1000) for name in "ab"]
    stop = threading.Event()
    failed = threading.Event()
    errors: dict[int, BaseException] = {}

    def poll(index: int) -> None:
        processor = processors[index]
        with processor:
            while not stop.is_set():
                try:
                    processor.poll_once(0.1)
                except KafkaClientError as exc:
                    errors[index] = exc
                    failed.set()
                    return

    threads = [threading.Thread(target=poll, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while not failed.wait(0.1):
            assert time.monotonic() < deadline, (
                "the duplicate instance was never reported: "
                f"commits {[p.commits for p in processors]}, aborted {[p.aborted for p in processors]}"
            )
            app.feed(20)
        (index, error), *others = errors.items()
        assert not others, errors
        assert isinstance(error, FatalCommitError), error
        assert error.code in {"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"}, error
        assert "instance_id" in error.reason, error.reason
        print(f"duplicate instance reported as {error!r}")
        threads[index].join(timeout=60)
        survivor = threads[1 - index]
        deadline = time.monotonic() + 90
        while not app.committed_end():  # the survivor takes every partition and goes on
            assert survivor.is_alive() and time.monotonic() < deadline, errors
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert len(errors) == 1, errors
    app.check()


def test_a_refused_start_leaves_the_topic_list_unchanged(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("cfail-refused")
    admin = AdminClient({"bootstrap.servers": app.bootstrap})
    wrong = changelog_topic_name(app.name, "b")
    admin.create_topics([NewTopic(wrong, num_partitions=1, config={"cleanup.policy": "compact"})])[
        wrong
    ].result(timeout=30)
    deadline = time.monotonic() + 30
    while wrong not in (before := set(admin.list_topics(timeout=30).topics)):
        assert time.monotonic() < deadline, "the topic never showed in the metadata"
    processor = Processor(
        app.config(),
        tmp_path,
        [KafkaStoreSpec(name="a"), KafkaStoreSpec(name="b")],
        lambda _context, _message: None,
    )
    with pytest.raises(ChangelogTopicMismatchError) as refused:
        processor.start()
    assert refused.value.topic == wrong and refused.value.setting == "partitions"
    assert set(admin.list_topics(timeout=30).topics) == before, "a topic was created"
    processor.close()


def test_a_commit_of_more_than_100k_records(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    # 60k inputs in one transaction: 60k changelog records + 60k outputs, more than
    # librdkafka's default queue (queue.buffering.max.messages = 100,000).
    app = app_factory("cfail-big", keys=50_000)
    app.feed(60_000)
    results: list[Any] = []
    processor = app.processor(
        tmp_path,
        on_commit=results.append,
        commit_interval_ms=600_000,
        transaction_timeout_ms=900_000,
        commit_every_records=60_000,
        poll_records=5000,
    )
    with processor:
        run_until(lambda: processor.poll_once(0.1), lambda: bool(results), timeout_s=180)
    assert results[0].changelog_records + results[0].outputs > 100_000
    restart_and_check(app, tmp_path)
