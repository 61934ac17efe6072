"""The Kafka runtime itself: a failing test leaves no broker behind; missing Java/Maven is said loudly."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from kafka_harness import broker as broker_module
from kafka_harness import kafka_runtime
from kafka_harness.broker import KafkaBroker, running_broker
from kafka_harness.kafka_runtime import KafkaDist

pytestmark = pytest.mark.kafka


class _BoomError(Exception):
    """The failure of a test body."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _fail_with_a_running_broker(dist: KafkaDist, work: Path, seen: list[KafkaBroker]) -> None:
    with running_broker(dist, work) as broker:
        seen.append(broker)
        assert broker.running
        assert broker.bootstrap_servers.startswith("127.0.0.1:")
        raise _BoomError


def test_a_failure_inside_the_block_kills_the_broker(kafka_dist: KafkaDist, tmp_path: Path) -> None:
    seen: list[KafkaBroker] = []
    pids: list[int] = []
    original_start = KafkaBroker.start

    def start_and_note_pid(self: KafkaBroker, *args: Any, **kwargs: Any) -> None:
        original_start(self, *args, **kwargs)
        assert self._proc is not None
        pids.append(self._proc.pid)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KafkaBroker, "start", start_and_note_pid)
        with pytest.raises(_BoomError):
            _fail_with_a_running_broker(kafka_dist, tmp_path / "broker", seen)
    (broker,) = seen
    (pid,) = pids
    port = broker.port
    assert not _alive(pid)
    assert not broker.running
    assert broker not in broker_module._LIVE_BROKERS
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "the listener should be gone"


def test_missing_java_or_maven_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = kafka_runtime.missing_prerequisites()
    assert reason is not None
    assert "NOT RUN" in reason and "java" in reason and "mvn" in reason
