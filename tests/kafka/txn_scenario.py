"""The Kafka side of the transaction conformance tests: what a broker writes for transactions.

:func:`run_txn_scenario` drives one broker through two runs over one compacted
topic ``txn`` (``segment.bytes=1024``: one record per batch, so the log rolls
every dozen batches and transactions span segments):

1. **Produce, cleaner off.**  :data:`SCRIPT` runs in :file:`TxnScript.java`
   (Kafka's own Java producer and consumer, on the pinned release's Maven
   classpath): three transactional producers and one plain producer
   interleave record by record, each send acknowledged before the next, so
   the partition holds exactly the script's order; about a third of the
   transactions abort, one aborted record shadows a committed value of the
   same key, and every transaction is finished at the end.  Then the Java
   consumer reads the partition with ``isolation.level=read_committed`` and
   with ``read_uncommitted``.  Clean shutdown; the partition directory is
   copied to ``produced/``.
2. **Clean, cleaner on.**  Kafka's cleaner makes one pass (dirty section
   ``[0, base offset of the active segment)``); we wait for it through the
   ``cleaner-offset-checkpoint``; clean shutdown; copied to ``cleaned/``.

The broker is killed in ``finally`` whatever happens.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kafka_harness.broker import KafkaBroker
from kafka_harness.kafka_runtime import KafkaDist, KafkaRuntimeError
from tests.kafka.scenario import copy_partition, read_kafka_checkpoint

__all__ = ["SCRIPT", "TOPIC", "TxnScenario", "run_txn_scenario", "script_lines"]

TOPIC: Final = "txn"
JAVA: Final = Path(__file__).resolve().parent / "TxnScript.java"
TOPIC_CONFIGS: Final = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "index.interval.bytes": "128",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "86400000",
}

Row = tuple[int, str, str | None]
"""``(offset, key, value)``; ``None`` = tombstone."""


def script_lines(seed: int = 14, steps: int = 120) -> list[str]:
    """The interleaving (see the module docstring), as :file:`TxnScript.java` steps."""
    rng = random.Random(seed)
    lines = ["producer A ta", "producer B tb", "producer C tc", "producer N -"]
    open_sends: dict[str, int] = {}
    keys = [f"k{n:02d}" for n in range(10)]
    # One committed value that an aborted record shadows (Kafka's cleaner keeps it).
    lines += ["send N txn shadow committed-0"]
    lines += ["begin B", "send B txn shadow aborted-0", "abort B"]
    for step in range(steps):
        who = rng.choice("ABCN")
        key = rng.choice(keys)
        value = "NULL" if rng.random() < 0.1 else f"{who}{step:03d}"
        if who == "N":
            lines.append(f"send N {TOPIC} {key} {value}")
            continue
        if who not in open_sends:
            lines.append(f"begin {who}")
            open_sends[who] = 0
        lines.append(f"send {who} {TOPIC} {key} {value}")
        open_sends[who] += 1
        if open_sends[who] >= rng.randint(1, 5):
            lines.append(f"{'abort' if rng.random() < 0.35 else 'commit'} {who}")
            del open_sends[who]
    for who in sorted(open_sends):
        lines.append(f"commit {who}")
    lines += [f"consume {TOPIC} read_committed", f"consume {TOPIC} read_uncommitted"]
    return lines


SCRIPT: Final = script_lines()


@dataclass(frozen=True)
class TxnScenario:
    """Paths and observations of one run (see the module docstring)."""

    produced: Path
    """``produced/txn-0``: the broker's partition directory after run 1."""
    cleaned: Path
    """``cleaned/txn-0``: the same after one pass of Kafka's cleaner."""
    read_committed: list[Row]
    read_uncommitted: list[Row]
    committed_end: int
    """The end offset the Java consumer saw with ``read_committed`` (the LSO)."""
    timings: dict[str, float]


def _parse_consumed(stdout: str) -> list[tuple[int, list[Row]]]:
    runs: list[tuple[int, list[Row]]] = []
    for line in stdout.splitlines():
        parts = line.split("\t")
        if parts[0] == "END":
            runs.append((int(parts[1]), []))
        elif len(parts) == 3 and runs:
            runs[-1][1].append((int(parts[0]), parts[1], None if parts[2] == "NULL" else parts[2]))
    return runs


def _wait_for_cleaner(broker: KafkaBroker, offset: int, timeout_s: float) -> None:
    path = broker.log_dir / "cleaner-offset-checkpoint"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if read_kafka_checkpoint(path).get((TOPIC, 0)) == offset:
            return
        if not broker.running:
            raise KafkaRuntimeError("the broker died while cleaning:\n" + broker.console_tail())
        time.sleep(0.2)
    raise KafkaRuntimeError(f"Kafka's cleaner did not reach {offset}:\n" + broker.console_tail())


def run_txn_scenario(dist: KafkaDist, work: Path, *, timeout_s: float = 240) -> TxnScenario:
    """Run both broker runs under ``work``; the broker is killed on any failure."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()

    def lap(label: str) -> None:
        nonlocal t0
        now = time.monotonic()
        timings[label] = round(now - t0, 2)
        t0 = now

    broker = KafkaBroker(dist, work / "broker")
    try:
        broker.start({"log.cleaner.enable": "false"}, timeout_s=timeout_s)
        broker.create_topic(TOPIC, TOPIC_CONFIGS, timeout_s=timeout_s)
        lap("run 1: broker start + topic")
        result = dist.run_tool(
            str(JAVA),
            [broker.bootstrap_servers],
            stdin_text="\n".join(SCRIPT) + "\n",
            timeout_s=timeout_s,
        )
        (committed_end, committed), (_end, uncommitted) = _parse_consumed(result.stdout)
        lap("run 1: scripted producers + two consumers")
        broker.stop()
        produced = copy_partition(broker.log_dir / f"{TOPIC}-0", work / "produced")
        active = max(int(p.name[:20]) for p in produced.glob("*.log"))
        broker.start(
            {"log.cleaner.enable": "true", "log.cleaner.backoff.ms": "100"}, timeout_s=timeout_s
        )
        _wait_for_cleaner(broker, active, timeout_s)
        lap("run 2: Kafka's cleaner pass")
        broker.stop()
        cleaned = copy_partition(broker.log_dir / f"{TOPIC}-0", work / "cleaned")
    finally:
        broker.kill()
    return TxnScenario(
        produced=produced,
        cleaned=cleaned,
        read_committed=committed,
        read_uncommitted=uncommitted,
        committed_end=committed_end,
        timings=timings,
    )
