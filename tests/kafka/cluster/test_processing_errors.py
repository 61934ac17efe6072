"""Exceptions in ``process()`` on a real broker: exactly once holds, whatever the handler says.

The application and the oracle (output topic, changelog topic, local stores) are
:mod:`tests.kafka.cluster.oracle`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest

from kafka_harness.broker import KafkaBroker
from statestore.kafka import ProcessingError, log_and_continue
from tests.kafka.cluster.oracle import (
    App,
    PoisonError,
    poll_until_raises,
    restart_and_check,
    run_until,
)


@pytest.fixture
def app_factory(cluster: KafkaBroker) -> Callable[..., App]:
    return lambda name, **kw: App(cluster.bootstrap_servers, name, **kw)


def test_exception_after_writes_and_sends_commits_nothing_of_its_transaction(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-fail")
    app.feed(300)
    # one transaction over everything: every task has pending writes when seq 250 fails
    processor = app.processor(
        tmp_path,
        fail_on=lambda seq: seq == 250,
        commit_interval_ms=60_000,
        transaction_timeout_ms=120_000,
    )
    with pytest.raises(ProcessingError) as caught, processor:
        raise poll_until_raises(processor)
    assert isinstance(caught.value.__cause__, PoisonError)
    assert caught.value.topic == app.input and caught.value.offset >= 0
    assert app.read(app.output) == [], "nothing of the failing transaction is visible"
    assert not app.committed_end()
    restart_and_check(app, tmp_path)


def test_commits_before_the_failure_stay_and_the_restart_applies_the_rest_once(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-partial")
    app.feed(400)
    processor = app.processor(
        tmp_path, fail_on=lambda seq: seq == 380, poll_records=20, commit_every_records=50
    )
    with pytest.raises(ProcessingError), processor:
        raise poll_until_raises(processor)
    assert processor.commits > 0
    applied = {msgpack.unpackb(m.value())[0] for m in app.read(app.output)}
    assert 380 not in applied
    restart_and_check(app, tmp_path)


def test_a_loop_that_catches_and_continues_loses_nothing(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-loop")
    app.feed(300)
    failures = {50: 1, 120: 2, 299: 1}  # seq -> how many times it fails before it works

    def flaky(seq: int) -> bool:
        if failures.get(seq, 0) > 0:
            failures[seq] -= 1
            return True
        return False

    caught = 0

    def poll() -> None:
        nonlocal caught
        try:
            processor.poll_once(0.1)
        except ProcessingError:
            caught += 1

    with app.processor(tmp_path, fail_on=flaky, poll_records=64) as processor:
        run_until(poll, lambda: caught == 4 and app.committed_end())
        assert processor.processing_errors == 4
    app.check()
    restart_and_check(app, tmp_path)


def test_skip_writes_the_poison_records_to_the_dead_letter_topic_once(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-dlq", dlq=True)
    app.feed(300)
    poison = [37, 111, 112, 290]
    with app.processor(
        tmp_path, fail_on=lambda seq: seq in poison, handler=log_and_continue
    ) as processor:
        run_until(lambda: processor.poll_once(0.1), app.committed_end)
        assert processor.dropped_records == len(poison)
    app.check(skipped=poison)
    dead = app.read(app.dlq or "")
    assert sorted(msgpack.unpackb(m.value())["seq"] for m in dead) == poison
    for message in dead:
        headers = dict(message.headers())
        assert headers["__streams.errors.exception"].endswith(b".PoisonError")
        assert headers["__streams.errors.topic"] == app.input.encode()
        assert int(headers["__streams.errors.offset"]) >= 0
    app.feed(100)  # restart: the poison records are not replayed, the new ones applied once
    restart_and_check(app, tmp_path, skipped=poison)
    assert len(app.read(app.dlq or "")) == len(poison)


def test_a_poison_record_fails_every_restart_without_partial_effects(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-poison")
    app.feed(200)
    for _restart in range(3):
        processor = app.processor(tmp_path, fail_on=lambda seq: seq == 150)
        with contextlib.suppress(ProcessingError), processor:
            raise poll_until_raises(processor)
        seqs = [msgpack.unpackb(m.value())[0] for m in app.read(app.output)]
        assert 150 not in seqs and len(seqs) == len(set(seqs))
    # the operator decides to skip it
    restart_and_check(app, tmp_path, skipped=[150])


def test_run_ends_on_the_error_and_commits_nothing_of_it(
    app_factory: Callable[..., App], tmp_path: Path
) -> None:
    app = app_factory("perr-run")
    app.feed(200)
    processor = app.processor(
        tmp_path,
        fail_on=lambda seq: seq == 199,
        commit_interval_ms=60_000,
        transaction_timeout_ms=120_000,
    )
    processor.start()
    with pytest.raises(ProcessingError):
        processor.run(lambda: False)
    assert app.read(app.output) == []
    restart_and_check(app, tmp_path)
