"""``./dev demo-cluster``: the balances service on a real Kafka 4.x broker, three workers, one kill -9.

1. start a one-node Apache Kafka (the Maven recipe in ``kafka_harness/``, Kafka 4.4.0);
2. create the input and output topics (6 partitions) and start three worker processes
   (:mod:`examples.balances.cluster`); they split the partitions through the group;
3. feed transactions; worker 1 is told to block inside a transaction once its records
   are produced and before it commits, and is then ``kill -9`` ed right there;
4. the group gives its partitions to the two others, which restore them from the
   changelog topic (after the coordinator aborts the dead transaction) and go on;
5. feed the rest, wait until the group's committed offsets reach the end of the input,
   and print **VERIFIED** only if every balance, read back from the changelog topic
   and from the output topic, equals an independent sum of the transactions.

Exit status 0 only when VERIFIED.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from examples.balances import cluster
from examples.balances.transactions import generate

__all__ = ["FAST_GROUP_BROKER_SETTINGS", "WorkerProcess", "main", "run_demo"]

FAST_GROUP_BROKER_SETTINGS: Final = {
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "3000",
    "group.consumer.session.timeout.ms": "6000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
"""Broker settings for a demo or test cluster: KIP-848 heartbeats every 0.5 s, a dead member
expires after 6 s (defaults: 5 s and 45 s), and expired transactions are aborted within 1 s
of their ``transaction.timeout.ms`` (default check interval 10 s)."""

_REPO: Final = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """A worker process of :mod:`examples.balances.cluster` and the JSON events it prints.

    A reader thread collects the events; :meth:`seen` and :meth:`wait` look at them.
    """

    def __init__(self, bootstrap: str, app: str, work: Path, instance: str, *extra: str) -> None:
        self.instance = instance
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._log = (work / f"{instance}.log").open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "examples.balances.cluster",
                "worker",
                "--bootstrap",
                bootstrap,
                "--app",
                app,
                "--state-dir",
                str(work / f"state-{instance}"),
                "--instance",
                instance,
                *extra,
            ],
            cwd=_REPO,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(_REPO)},
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                with self._lock:
                    self.events.append(event)

    def seen(self, predicate: Callable[[dict[str, Any]], bool]) -> bool:
        """Whether an event so far satisfies ``predicate``."""
        with self._lock:
            return any(predicate(e) for e in self.events)

    def wait(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 90) -> None:
        """Wait until :meth:`seen` holds (``RuntimeError`` if the worker dies or time runs out)."""
        deadline = time.monotonic() + timeout_s
        while not self.seen(predicate):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.instance}: expected event not seen (log: {self._log.name})"
                )
            time.sleep(0.05)

    def kill(self) -> None:
        """``kill -9`` the worker's process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (a clean close), then release the pipes and the log file."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


def _say(text: str) -> None:
    print(f"demo-cluster: {text}", flush=True)


def _wait_caught_up(bootstrap: str, app: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while cluster.group_lag(bootstrap, app) != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the group did not catch up in {timeout_s}s")
        time.sleep(0.5)


def run_demo(
    bootstrap: str, work: Path, *, count: int = 5000, accounts: int = 200, app: str = "demo"
) -> bool:
    """Steps 2-5 of the module docstring against a running broker; True when VERIFIED."""
    started = time.monotonic()
    txns = list(generate(count, accounts, 11))
    cluster.create_topics(bootstrap, 6, app)
    workers = [
        WorkerProcess(bootstrap, app, work, "w1", "--hang-in-txn-after", "3"),
        WorkerProcess(bootstrap, app, work, "w2"),
        WorkerProcess(bootstrap, app, work, "w3"),
    ]
    try:
        for worker in workers:
            worker.wait(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
        _say("3 workers own 2 partitions each")
        victim = workers[0]
        fed = 0
        while not victim.seen(lambda e: e["event"] == "in-transaction"):
            if fed >= len(txns):
                raise RuntimeError("worker 1 never reached its 4th transaction")
            cluster.feed(bootstrap, txns[fed : fed + 100], app)
            fed += 100
            time.sleep(0.2)
        victim.kill()
        _say(f"fed {fed} transactions; kill -9 worker 1 (pid {victim.proc.pid}) mid-transaction")
        for survivor in workers[1:]:
            survivor.wait(
                lambda e: e["event"] == "assignment" and len(e["partitions"]) == 3, timeout_s=120
            )
        restored = [
            e for w in workers[1:] for e in w.events if e["event"] == "restored" and e["records"]
        ]
        _say(
            f"the group moved worker 1's partitions; {len(restored)} restored from the changelog"
            f" topic ({sum(e['records'] for e in restored)} records)"
        )
        cluster.feed(bootstrap, txns[fed:], app)
        _wait_caught_up(bootstrap, app)
        ok, detail = cluster.verify(bootstrap, txns, app)
    finally:
        for worker in workers:
            worker.stop()
    seconds = time.monotonic() - started
    _say(f"{'VERIFIED' if ok else 'MISMATCH'}: {detail} ({seconds:.1f}s)")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    """Start a broker, run the demo, stop everything; 0 only when VERIFIED."""
    parser = argparse.ArgumentParser(prog="./dev demo-cluster")
    parser.add_argument("--count", type=int, default=5000, help="transactions (5000)")
    parser.add_argument("--accounts", type=int, default=200, help="accounts (200)")
    args = parser.parse_args(argv)
    from kafka_harness.broker import running_broker  # noqa: PLC0415
    from kafka_harness.kafka_runtime import (  # noqa: PLC0415
        CLUSTER_KAFKA_VERSION,
        fetch,
        missing_prerequisites,
    )

    reason = missing_prerequisites()
    if reason is not None:
        _say(reason)
        return 2
    dist = fetch(version=CLUSTER_KAFKA_VERSION)
    with tempfile.TemporaryDirectory(prefix="demo-cluster-") as tmp:
        work = Path(tmp)
        with running_broker(dist, work / "broker", FAST_GROUP_BROKER_SETTINGS) as broker:
            _say(f"Apache Kafka {dist.version} on {broker.bootstrap_servers}")
            ok = run_demo(broker.bootstrap_servers, work, count=args.count, accounts=args.accounts)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
