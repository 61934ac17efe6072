"""One Kafka 4.x broker for every distributed-mode test (a session fixture), and worker processes.

The broker (``kafka_harness/pom-4.xml``, KIP-848 groups) runs with group and
transaction timers shortened so that rebalances and the abort of a dead
process's transaction take seconds, not the defaults' 45 s and more:

* ``group.consumer.{min.,}heartbeat.interval.ms=500`` and
  ``group.consumer.{min.,}session.timeout.ms`` 3 s / 6 s;
* ``transaction.abort.timed.out.transaction.cleanup.interval.ms=1000`` (the
  coordinator looks for expired transactions every second, not every 10 s).

Each test uses its own application id, so topics and groups never collide.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.balances.cluster_demo import FAST_GROUP_BROKER_SETTINGS
from kafka_harness.broker import KafkaBroker
from kafka_harness.kafka_runtime import CLUSTER_KAFKA_VERSION, fetch, missing_prerequisites

REPO = Path(__file__).resolve().parents[3]

BROKER_OVERRIDES = {**FAST_GROUP_BROKER_SETTINGS, "log.cleaner.backoff.ms": "100"}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A running one-node Kafka 4.x broker for the whole session (always stopped at the end)."""
    reason = missing_prerequisites()
    if reason is not None:
        pytest.skip(reason)
    started = time.monotonic()
    dist = fetch(version=CLUSTER_KAFKA_VERSION)
    broker = KafkaBroker(dist, tmp_path_factory.mktemp("cluster-broker"))
    try:
        broker.start(BROKER_OVERRIDES)
        print(f"kafka: {dist.version} broker up in {time.monotonic() - started:.1f}s")
        yield broker
        broker.stop()
    finally:
        broker.kill()


class Worker:
    """A worker process of ``examples.balances.cluster`` and the JSON events it printed.

    Not thread-safe except :meth:`wait_for` against the reader thread (a queue).
    """

    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv = argv
        self.events: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._log = log.open("w")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self._queue.put(json.loads(line))
        self._queue.put(None)

    def _drain(self) -> None:
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                return
            if event is not None:
                self.events.append(event)

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 90
    ) -> dict[str, Any]:
        """The first event (seen so far or arriving) for which ``predicate`` holds."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            self._drain()
            for event in self.events[seen:]:
                if predicate(event):
                    return event
            seen = len(self.events)
            if time.monotonic() > deadline:
                raise AssertionError(f"no such event in {timeout_s}s; events: {self.events[-10:]}")
            if self.proc.poll() is not None:
                self._drain()
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                raise AssertionError(
                    f"worker exited ({self.proc.returncode}); stderr: {self._log.name}; "
                    f"events: {self.events[-10:]}"
                )
            time.sleep(0.05)

    def all_events(self) -> list[dict[str, Any]]:
        """Every event so far."""
        self._drain()
        return list(self.events)

    def pause(self) -> None:
        """SIGSTOP: every thread stops, heartbeats too (a zombie)."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT."""
        os.killpg(self.proc.pid, signal.SIGCONT)

    def wait_for_log(
        self,
        marker: str,
        predicate: Callable[[str], bool],
        *,
        count: int = 1,
        timeout_s: float = 60,
    ) -> str:
        """The ``count``-th stderr log line holding ``marker`` for which ``predicate`` holds."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._log.flush()
            lines = [
                line
                for line in Path(self._log.name).read_text(errors="replace").splitlines()
                if marker in line and predicate(line[line.index(marker) :])
            ]
            if len(lines) >= count:
                return lines[count - 1]
            time.sleep(0.1)
        raise AssertionError(f"no log line with {marker!r} in {timeout_s}s ({self._log.name})")

    def stop(self, timeout_s: float = 60) -> None:
        """SIGTERM and wait (a clean close commits and leaves the group)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        self._drain()

    def kill(self) -> None:
        """SIGKILL (kill -9) the worker's process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        self._drain()

    def release(self) -> None:
        """Kill if still running and close the files (fixture teardown)."""
        self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


@pytest.fixture
def workers(tmp_path: Path, cluster: KafkaBroker) -> Iterator[Callable[..., Worker]]:
    """Start workers: ``start(instance, *extra_args)``; all are killed at the end of the test."""
    started: list[Worker] = []

    def start(instance: str, app: str, *extra: str) -> Worker:
        argv = [
            sys.executable,
            "-m",
            "examples.balances.cluster",
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
