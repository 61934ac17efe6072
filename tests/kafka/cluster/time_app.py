"""An application with every store in time, its worker process and its oracle.

Every input record carries a sequence number and an event time; the key is a
user.  ``process`` (one record) does, in one transaction:

* ``counts`` (window store, 10 s windows, :class:`~statestore.LongSerde` as
  Kafka Streams' ``count()``): adds one to the user's window of the event time;
* ``sessions`` (session store, 5 s inactivity gap): merges the record into the
  user's session, the aggregate a count;
* ``latest`` (versioned store): the sequence number as a version at the event time;
* ``seen`` (timestamped store): the sequence number, stamped with the event time;
* sends ``[seq, window start, count]`` to the output topic.

Event times grow with the sequence number, so each user's records arrive in
event-time order and the expected state is a plain function of the inputs
(:meth:`TimeApp.expected`).  The oracle (:meth:`TimeApp.check`) reads the output
topic and every changelog topic ``read_committed`` and compares them with it:
each sequence number output exactly once, the last value per changelog key
(windowed and session keys decoded with the layouts, timestamps from the record's
CreateTime) equal to the expected state.

``python -m tests.kafka.cluster.time_app worker ...`` runs one worker process
that prints JSON events (``assignment``, ``commit``, ``restored``, ``standbys``,
``standby-lag``, ``in-transaction``) as :mod:`examples.balances.cluster` does.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import random
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import msgpack
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from statestore import IntSerde, LongSerde, StringSerde
from statestore.kafka import (
    KafkaStoreSpec,
    Processor,
    ProcessorConfig,
    ProcessorContext,
    changelog_topic_name,
)
from statestore.stores.time.layout import split_session_key, split_windowed_key
from tests.kafka.cluster.oracle import read_committed

__all__ = ["PARTITIONS", "TimeApp", "run_worker", "specs"]

PARTITIONS = 4
USERS = 12
WINDOW_MS = 10_000
RETENTION_MS = 3_600_000
GAP_MS = 5_000
STEP_MS = 1_000
HISTORY_MS = 3_600_000

Sessions = dict[tuple[str, int, int], int]


def specs() -> list[KafkaStoreSpec]:
    """The four stores of the application."""
    return [
        KafkaStoreSpec.window(
            "counts",
            window_size_ms=WINDOW_MS,
            retention_ms=RETENTION_MS,
            key_serde=StringSerde(),
            value_serde=LongSerde(),
        ),
        KafkaStoreSpec.session(
            "sessions", retention_ms=RETENTION_MS, key_serde=StringSerde(), value_serde=LongSerde()
        ),
        KafkaStoreSpec.versioned("latest", history_retention_ms=HISTORY_MS, value_serde=IntSerde()),
        KafkaStoreSpec.timestamped("seen", value_serde=IntSerde()),
    ]


def process_record(context: ProcessorContext, message: Any, output: str) -> None:
    """The application's step for one input record (module docstring)."""
    record = msgpack.unpackb(message.value())
    user = message.key().decode()
    seq, ts = record["seq"], record["ts"]
    start = ts // WINDOW_MS * WINDOW_MS
    counts = context.store("counts")
    count = (counts.fetch_window(user, start) or 0) + 1
    counts.put(user, count, start, timestamp_ms=ts)
    context.store("sessions").merge(
        user,
        ts,
        inactivity_gap_ms=GAP_MS,
        aggregate=lambda total: (total or 0) + 1,
        merger=lambda a, b: a + b,
    )
    context.store("latest").put(user, seq, ts)
    context.store("seen").put(user, seq, timestamp_ms=ts)
    context.send(output, message.key(), msgpack.packb([seq, start, count]))


class TimeApp:
    """The topics of one test's application, what was fed, and the oracle."""

    def __init__(
        self, bootstrap: str, name: str, *, base_ms: int | None = None, seed: str | None = None
    ) -> None:
        """Create the topics; event times start at ``base_ms`` (default: now), users are drawn
        with ``seed`` (default: ``name``), so two apps with both equal get the same inputs."""
        self.bootstrap = bootstrap
        self.name = name
        self.input = f"{name}-in"
        self.output = f"{name}-out"
        # Event times near the wall clock: the window changelog's retention.ms deletes by them.
        self.base_ms = (int(time.time() * 1000) if base_ms is None else base_ms) // 60_000 * 60_000
        self.fed: list[tuple[int, str, int]] = []
        self._random = random.Random(name if seed is None else seed)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=PARTITIONS) for t in (self.input, self.output)]
        )
        for future in futures.values():
            future.result(timeout=60)

    def feed(self, count: int, *, stamp_records: bool = True) -> None:
        """Produce ``count`` more records (seq, user, event time; the event time is also the
        record's timestamp, unless ``stamp_records`` is false: then the producer stamps
        it with its clock), every one acknowledged by the broker.

        Event times run ``STEP_MS`` apart from ``base_ms``: a broker refuses a
        record whose timestamp is more than ``message.timestamp.after.max.ms``
        (an hour by default since Kafka 4.0) ahead of its clock, so about 3,600
        records fed within a few minutes of ``base_ms`` reach that limit; a
        refused record fails here, naming the broker's error, rather than
        leaving the model with a record the inputs never had.
        """
        refused: list[str] = []

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                seq = msgpack.unpackb(message.value())["seq"]
                refused.append(f"seq {seq} (timestamp {message.timestamp()[1]}): {error.str()}")

        producer = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random"})
        for _ in range(count):
            seq = len(self.fed)
            user = f"u{self._random.randrange(USERS)}"
            ts = self.base_ms + seq * STEP_MS
            self.fed.append((seq, user, ts))
            producer.produce(
                self.input,
                key=user.encode(),
                value=msgpack.packb({"seq": seq, "ts": ts}),
                timestamp=ts if stamp_records else 0,  # 0: the producer's clock
                on_delivery=delivered,
            )
        assert producer.flush(30) == 0
        assert not refused, (
            f"{len(refused)} of {count} records refused at {int(time.time() * 1000)}: "
            f"{', '.join(refused[:3])}"
        )

    # -- the model -----------------------------------------------------------------------

    def expected_windows(self) -> dict[tuple[str, int], tuple[int, int]]:
        """``(user, window start) -> (count, timestamp of its last record)``."""
        windows: dict[tuple[str, int], tuple[int, int]] = {}
        for _seq, user, ts in self.fed:
            start = ts // WINDOW_MS * WINDOW_MS
            count, _ts = windows.get((user, start), (0, 0))
            windows[(user, start)] = (count + 1, ts)
        return windows

    def expected_sessions(self) -> Sessions:
        """``(user, start, end) -> records``: a new session after a gap over ``GAP_MS``."""
        sessions: Sessions = {}
        last: dict[str, tuple[int, int, int]] = {}
        for _seq, user, ts in self.fed:
            current = last.get(user)
            if current is not None and ts - current[1] <= GAP_MS:
                start, _end, count = current
                del sessions[(user, start, current[1])]
                last[user] = (start, ts, count + 1)
            else:
                last[user] = (ts, ts, 1)
            start, end, count = last[user]
            sessions[(user, start, end)] = count
        return sessions

    def expected_latest(self) -> dict[str, tuple[int, int]]:
        """``user -> (last seq, its event time)``."""
        return {user: (seq, ts) for seq, user, ts in self.fed}

    # -- the oracle ----------------------------------------------------------------------

    def read(self, topic: str) -> list[Any]:
        """Every committed record of ``topic``, partition by partition, in offset order."""
        return read_committed(self.bootstrap, topic, PARTITIONS)

    def last_per_key(self, store: str) -> Iterator[tuple[bytes, int, bytes | None]]:
        """``(key, CreateTime, value)`` of the last record of each key of a changelog topic."""
        last: dict[bytes, tuple[int, bytes | None]] = {}
        for message in self.read(changelog_topic_name(self.name, store)):
            last[message.key()] = (message.timestamp()[1], message.value())
        for key, (stamp, value) in last.items():
            yield key, stamp, value

    def check(self) -> None:
        """The oracle over the output topic and every changelog topic (module docstring)."""
        outputs = [msgpack.unpackb(m.value()) for m in self.read(self.output)]
        seqs = [seq for seq, _start, _count in outputs]
        duplicated = sorted(seq for seq, n in collections.Counter(seqs).items() if n > 1)
        assert not duplicated, f"applied twice: {duplicated[:10]}"
        wanted = {seq for seq, _user, _ts in self.fed}
        assert set(seqs) == wanted, (
            f"missing {sorted(wanted - set(seqs))[:10]}, extra {sorted(set(seqs) - wanted)[:10]}"
        )
        windows = {}
        for key, stamp, value in self.last_per_key("counts"):
            user, start, seqnum = split_windowed_key(key)
            assert seqnum == 0
            if value is not None:
                windows[(user.decode(), start)] = (LongSerde().deserialize(value), stamp)
        _assert_equal("counts changelog", windows, self.expected_windows())
        sessions = {}
        for key, _stamp, value in self.last_per_key("sessions"):
            user, start, end = split_session_key(key)
            if value is not None:
                sessions[(user.decode(), start, end)] = LongSerde().deserialize(value)
        _assert_equal("sessions changelog", sessions, self.expected_sessions())
        latest = {
            key.decode(): (IntSerde().deserialize(value), stamp)
            for key, stamp, value in self.last_per_key("latest")
            if value is not None
        }
        _assert_equal("latest changelog", latest, self.expected_latest())
        seen = {
            key.decode(): (IntSerde().deserialize(value), stamp)
            for key, stamp, value in self.last_per_key("seen")
            if value is not None
        }
        _assert_equal("seen changelog", seen, self.expected_latest())

    def check_stores(self, processor: Processor) -> None:
        """The running processor's stores (every partition) hold the expected state."""
        windows: dict[tuple[str, int], tuple[int, int]] = {}
        for store in processor.stores("counts").values():
            for windowed, value in store.all():
                stamped = store.fetch_window_with_timestamp(windowed.key, windowed.start_ms)
                windows[(windowed.key, windowed.start_ms)] = (value, stamped.timestamp_ms)
        _assert_equal("counts store", windows, self.expected_windows())
        sessions = {
            (session.key, session.start_ms, session.end_ms): value
            for store in processor.stores("sessions").values()
            for session, value in store.all()
        }
        _assert_equal("sessions store", sessions, self.expected_sessions())
        latest: dict[str, tuple[int, int]] = {}
        seen: dict[str, tuple[int, int]] = {}
        for user, (_seq, _ts) in self.expected_latest().items():
            for store in processor.stores("latest").values():
                found = store.get(user)
                if found is not None:
                    latest[user] = (found.value, found.timestamp_ms)
            for store in processor.stores("seen").values():
                stamped = store.get_with_timestamp(user)
                if stamped is not None:
                    seen[user] = (stamped.value, stamped.timestamp_ms)
        _assert_equal("latest store", latest, self.expected_latest())
        _assert_equal("seen store", seen, self.expected_latest())

    def committed_end(self) -> bool:
        """The group's committed offsets reach the end of every input partition."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.name})
        try:
            tps = [TopicPartition(self.input, p) for p in range(PARTITIONS)]
            for tp in consumer.committed(tps, timeout=30):
                end = consumer.get_watermark_offsets(tp, timeout=30)[1]
                if end and tp.offset < end:
                    return False
            return True
        finally:
            consumer.close()

    def processor(self, state_dir: Path, instance: str = "checker", **overrides: Any) -> Processor:
        """An in-process processor of the application."""
        output = self.output
        config = ProcessorConfig(
            **{
                "application_id": self.name,
                "bootstrap_servers": self.bootstrap,
                "input_topics": (self.input,),
                "output_topics": (output,),
                "instance_id": instance,
                "commit_interval_ms": 100,
                **overrides,
            }
        )
        return Processor(
            config, state_dir, specs(), lambda context, m: process_record(context, m, output)
        )


def _emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


class _Stop:
    def __init__(self) -> None:
        self.stopped = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.stopped = True


def run_worker(
    bootstrap: str,
    state_dir: Path,
    instance: str,
    app: str,
    *,
    hang_in_txn_after: int | None,
    standby_replicas: int,
) -> None:
    """One worker process until SIGTERM; ``hang_in_txn_after=N`` blocks for ever inside the
    (N+1)-th transaction after its records are produced (to be killed there)."""
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    commits = 0
    output = f"{app}-out"

    def fault(step: str) -> None:
        if step == "produced" and hang_in_txn_after is not None and commits >= hang_in_txn_after:
            _emit("in-transaction", commits=commits)
            while True:
                time.sleep(3600)

    def on_commit(result: Any) -> None:
        nonlocal commits
        commits += 1
        _emit("commit", commits=commits, records=result.changelog_records)

    def on_restored(restored: Any) -> None:
        _emit(
            "restored",
            partition=restored.partition,
            store=restored.store,
            rebuilt=restored.rebuilt,
            reason=restored.reason,
            records=restored.records_restored,
            end=restored.end_offset,
        )

    config = ProcessorConfig(
        application_id=app,
        bootstrap_servers=bootstrap,
        input_topics=(f"{app}-in",),
        output_topics=(output,),
        instance_id=instance,
        commit_interval_ms=200,
        num_standby_replicas=standby_replicas,
    )
    processor = Processor(
        config,
        state_dir,
        specs(),
        lambda context, message: process_record(context, message, output),
        on_commit=on_commit,
        on_restored=on_restored,
        fault_hook=fault,
    )
    processor.start()
    assignment: list[int] = []
    standbys: list[int] = []
    lag: dict[int, dict[str, int | None]] = {}
    try:
        while not stop.stopped:
            processor.poll_once()
            if processor.assignment != assignment:
                assignment = processor.assignment
                _emit("assignment", partitions=assignment)
            if processor.standby_partitions != standbys:
                standbys = processor.standby_partitions
                _emit("standbys", partitions=standbys)
            if standbys and (now := processor.standby_lag()) != lag:
                lag = now
                _emit("standby-lag", lag={str(p): stores for p, stores in lag.items()})
    finally:
        processor.close()
        _emit("closed", commits=commits)


def main(argv: Sequence[str] | None = None) -> int:
    """``worker --bootstrap B --state-dir D --instance I --app A [--hang-in-txn-after N]``."""
    parser = argparse.ArgumentParser(prog="python -m tests.kafka.cluster.time_app")
    parser.add_argument("command", choices=["worker"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--app", required=True)
    parser.add_argument("--hang-in-txn-after", type=int)
    parser.add_argument("--standby-replicas", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {args.instance} %(levelname)s %(name)s: %(message)s",
    )
    run_worker(
        args.bootstrap,
        args.state_dir,
        args.instance,
        args.app,
        hang_in_txn_after=args.hang_in_txn_after,
        standby_replicas=args.standby_replicas,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _assert_equal(
    what: str, found: dict[Any, Any], expected: dict[Any, Any], most: int = 10
) -> None:
    """Assert two dicts equal; else name ``what`` and the keys that differ, the first few (this
    module is not a test module: pytest does not rewrite its asserts to show a diff)."""
    if found == expected:
        return
    keys = sorted(
        (k for k in found.keys() | expected.keys() if found.get(k) != expected.get(k)), key=repr
    )
    shown = ", ".join(
        f"{k!r}: found {found.get(k)!r}, expected {expected.get(k)!r}" for k in keys[:most]
    )
    raise AssertionError(
        f"{what}: {len(keys)} of {len(expected)} expected entries differ (found {len(found)}): "
        f"{shown}"
    )
