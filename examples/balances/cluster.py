"""The balances service distributed over worker processes on a real Kafka cluster.

    python -m examples.balances.cluster worker --bootstrap 127.0.0.1:9092 --state-dir w1 --instance w1
    python -m examples.balances.cluster feed --bootstrap 127.0.0.1:9092 --count 1000
    python -m examples.balances.cluster verify --bootstrap 127.0.0.1:9092 --count 1000

Input: each transaction of :mod:`examples.balances.transactions` is split into
its balance changes, one record per account keyed by the account id on the
topic :data:`INPUT_TOPIC` (a transfer becomes two records).  Keys are
partitioned with murmur2, so every change of an account lands in the same
partition, and so in the same store partition.  (This is Kafka Streams'
repartitioning step, done by the feeder.)

Workers: a :class:`statestore.kafka.Processor` per process; the store
``balances`` (account -> cents) is restored from ``balances-balances-changelog``
on assignment and updated exactly once per change; each update also goes to
:data:`OUTPUT_TOPIC` inside the same transaction.

Oracle (:func:`verify`): the balances read back from the changelog topic with a
``read_committed`` consumer, and the last update per account on the output
topic, must both equal :func:`~examples.balances.transactions.expected_balances`
of the same transactions: a plain sum, independent of the service.  A change
lost or applied twice shows up as a wrong balance.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Final, Literal

import msgpack

from examples.balances.transactions import (
    expected_balances,
    generate,
    parse_line,
    write_transactions,
)

__all__ = [
    "APPLICATION_ID",
    "INPUT_TOPIC",
    "OUTPUT_TOPIC",
    "STORE_NAME",
    "committed_balances",
    "create_topics",
    "feed",
    "group_lag",
    "main",
    "output_balances",
    "run_worker",
    "verify",
]

APPLICATION_ID: Final = "balances"
"""The default application id; every name below is derived from the one in use."""
STORE_NAME: Final = "balances"
INPUT_TOPIC: Final = "{app}-changes"
OUTPUT_TOPIC: Final = "{app}-updates"


def _emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "pid": os.getpid(), **fields}), flush=True)


def create_topics(bootstrap: str, partitions: int, app: str = APPLICATION_ID) -> None:
    """Create the input and output topics with ``partitions`` partitions (if missing)."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415
    from confluent_kafka.cimpl import NewTopic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(topic.format(app=app), num_partitions=partitions)
            for topic in (INPUT_TOPIC, OUTPUT_TOPIC)
        ]
    )
    for future in futures.values():
        try:
            future.result(timeout=60)
        except Exception as exc:
            if "already exists" not in str(exc).lower():
                raise


def feed(
    bootstrap: str, transactions: Iterable[dict[str, object]], app: str = APPLICATION_ID
) -> int:
    """Produce every balance change of ``transactions`` to :data:`INPUT_TOPIC`; the count."""
    from confluent_kafka import Producer  # noqa: PLC0415

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": "true",
            "acks": "all",
            "linger.ms": "5",
            "partitioner": "murmur2_random",
        }
    )
    count = 0
    for line, raw in enumerate(transactions, 1):
        txn = parse_line(json.dumps(raw), line)
        for leg, (account, delta) in enumerate(txn.changes):
            value = msgpack.packb({"id": txn.id, "leg": leg, "delta": delta})
            producer.produce(INPUT_TOPIC.format(app=app), key=account.encode(), value=value)
            count += 1
            if count % 10_000 == 0:
                producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} input records were not acknowledged")
    return count


def _read_topic(bootstrap: str, topic: str) -> dict[bytes, bytes | None]:
    """Last value per key of every partition of ``topic`` (read_committed, to the end)."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": f"verify-{os.getpid()}-{time.monotonic_ns()}",
        "enable.auto.commit": "false",
        "fetch.queue.backoff.ms": "10",
    }
    consumer = Consumer({**settings, "isolation.level": "read_committed"})
    # The ends are high watermarks, not this consumer's (last stable offsets): records
    # committed behind a dead worker's open transaction are read once it is aborted.
    watermarks = Consumer({**settings, "isolation.level": "read_uncommitted"})
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        partitions = sorted(metadata.partitions)
        ends = {
            p: watermarks.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        last: dict[bytes, bytes | None] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            positions = consumer.position([TopicPartition(topic, p) for p in partitions])
            if all(tp.offset >= ends[tp.partition] for tp in positions if tp.offset >= 0) and all(
                tp.offset >= 0 or ends[tp.partition] == 0 for tp in positions
            ):
                return last
            for message in consumer.consume(10_000, timeout=0.5):
                key = message.key()
                if message.error() is None and key is not None:  # a changelog record has a key
                    last[key] = message.value()
        raise RuntimeError(f"could not read {topic} to its end")
    finally:
        consumer.close()
        watermarks.close()


def committed_balances(bootstrap: str, app: str = APPLICATION_ID) -> dict[str, int]:
    """The balances the changelog topic holds (committed transactions only)."""
    from statestore.kafka import changelog_topic_name  # noqa: PLC0415
    from statestore.serdes import IntSerde  # noqa: PLC0415

    topic = changelog_topic_name(app, STORE_NAME)
    decode = IntSerde().deserialize
    return {
        key.decode(): decode(value)
        for key, value in _read_topic(bootstrap, topic).items()
        if value is not None
    }


def output_balances(bootstrap: str, app: str = APPLICATION_ID) -> dict[str, int]:
    """The last balance per account published on :data:`OUTPUT_TOPIC`."""
    return {
        key.decode(): int(msgpack.unpackb(value))
        for key, value in _read_topic(bootstrap, OUTPUT_TOPIC.format(app=app)).items()
        if value is not None
    }


def group_lag(bootstrap: str, app: str = APPLICATION_ID) -> int:
    """Input records not yet covered by the group's committed offsets (-1: unknown yet)."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": app,
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
        }
    )
    try:
        topic = INPUT_TOPIC.format(app=app)
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        tps = [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
        committed = consumer.committed(tps, timeout=30)
        lag = 0
        for tp in committed:
            high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=30)[
                1
            ]
            if tp.offset < 0:
                if high > 0:
                    return -1
                continue
            lag += max(0, high - tp.offset)
        return lag
    finally:
        consumer.close()


def verify(
    bootstrap: str, transactions: Sequence[dict[str, object]], app: str = APPLICATION_ID
) -> tuple[bool, str]:
    """Compare the changelog's and the output topic's balances with the independent sum.

    The sum is :func:`~examples.balances.transactions.expected_balances` over the
    transactions written as a JSON-lines file: it shares no code with the service.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "transactions.jsonl"
        with path.open("w", encoding="utf-8") as out:
            write_transactions(out, transactions)
        expected, _count = expected_balances(path)
    stored = committed_balances(bootstrap, app)
    published = output_balances(bootstrap, app)
    problems = []
    for name, found in (("changelog", stored), ("output topic", published)):
        wrong = {k for k in expected.keys() | found.keys() if expected.get(k, 0) != found.get(k, 0)}
        if wrong:
            sample = sorted(wrong)[:5]
            detail = ", ".join(
                f"{k}: expected {expected.get(k, 0)}, found {found.get(k, 0)}" for k in sample
            )
            problems.append(f"{name}: {len(wrong)} accounts differ ({detail})")
    if problems:
        return False, "; ".join(problems)
    return True, f"{len(expected)} accounts, total {sum(expected.values())} cents"


class _Stop:
    def __init__(self) -> None:
        self.stopped = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.stopped = True


def run_worker(
    bootstrap: str,
    state_dir: Path,
    instance: str,
    *,
    app: str = APPLICATION_ID,
    commit_interval_ms: int = 200,
    hang_in_txn_after: int | None = None,
    release_file: Path | None = None,
    stall_in_txn_after: int | None = None,
    stall_s: float = 0.0,
    max_poll_interval_ms: int = 300_000,
    transaction_timeout_ms: int = 10_000,
    delete_retention_ms: int = 86_400_000,
    staleness_margin_ms: int = 60_000,
    exit_when_idle_s: float | None = None,
    standby_replicas: int = 0,
    static_membership: bool = False,
    warmup_before_join: bool = False,
    acceptable_recovery_lag: int = 10_000,
    group_protocol: Literal["consumer", "classic"] = "consumer",
) -> None:
    """One worker process: run the processor until SIGTERM (events as JSON lines on stdout).

    Fault injection for tests and the demo: ``hang_in_txn_after=N`` blocks for
    ever inside the (N+1)-th transaction, after its records are produced and
    before it commits (to be ``kill -9`` ed there), or with ``release_file`` until
    that file exists, then commits (once); ``stall_in_txn_after=N``
    sleeps ``stall_s`` there once (a zombie: the group moves on meanwhile).
    """
    from statestore.kafka import (  # noqa: PLC0415
        ChangelogTopicConfig,
        KafkaStoreSpec,
        Processor,
        ProcessorConfig,
        ProcessorContext,
    )
    from statestore.serdes import IntSerde, StringSerde  # noqa: PLC0415

    output_topic = OUTPUT_TOPIC.format(app=app)
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    commits = 0
    stalled = False
    held = False

    def process(context: ProcessorContext, message: Any) -> None:
        change = msgpack.unpackb(message.value())
        account = message.key().decode()
        store = context.store(STORE_NAME)
        balance = store.get(account, 0) + change["delta"]
        store.put(account, balance)
        context.send(output_topic, message.key(), msgpack.packb(balance))

    def fault(step: str) -> None:
        nonlocal stalled, held
        if step != "produced":
            return
        if hang_in_txn_after is not None and commits >= hang_in_txn_after and not held:
            _emit("in-transaction", commits=commits)
            if release_file is None:
                while True:
                    time.sleep(3600)
            held = True
            while not release_file.exists():
                time.sleep(0.05)
            _emit("released", commits=commits)
        if stall_in_txn_after is not None and commits >= stall_in_txn_after and not stalled:
            stalled = True
            _emit("stalled", commits=commits, seconds=stall_s)
            time.sleep(stall_s)
            _emit("resumed")

    def on_commit(result: Any) -> None:
        nonlocal commits
        commits += 1
        _emit("commit", commits=commits, records=result.changelog_records, outputs=result.outputs)

    def on_restored(restored: Any) -> None:
        _emit(
            "restored",
            partition=restored.partition,
            rebuilt=restored.rebuilt,
            reason=restored.reason,
            records=restored.records_restored,
            seconds=round(restored.seconds, 3),
        )

    config = ProcessorConfig(
        application_id=app,
        bootstrap_servers=bootstrap,
        input_topics=(INPUT_TOPIC.format(app=app),),
        output_topics=(output_topic,),
        instance_id=instance,
        commit_interval_ms=commit_interval_ms,
        max_poll_interval_ms=max_poll_interval_ms,
        transaction_timeout_ms=transaction_timeout_ms,
        num_standby_replicas=standby_replicas,
        static_membership=static_membership,
        warmup_before_join=warmup_before_join,
        acceptable_recovery_lag=acceptable_recovery_lag,
        group_protocol=group_protocol,
        changelog=ChangelogTopicConfig(
            delete_retention_ms=delete_retention_ms, staleness_margin_ms=staleness_margin_ms
        ),
    )
    processor = Processor(
        config,
        state_dir,
        [KafkaStoreSpec(name=STORE_NAME, key_serde=StringSerde(), value_serde=IntSerde())],
        process,
        on_commit=on_commit,
        on_restored=on_restored,
        fault_hook=fault,
    )
    processor.start()
    _emit("started", instance=instance)
    last_work = time.monotonic()
    assignment: list[int] = []
    standbys: list[int] = []
    standby_lag: dict[int, dict[str, int | None]] = {}
    aborted = 0
    try:
        while not stop.stopped:
            if processor.poll_once():
                last_work = time.monotonic()
            if processor.assignment != assignment:
                assignment = processor.assignment
                _emit("assignment", partitions=assignment)
            if processor.standby_partitions != standbys:
                standbys = processor.standby_partitions
                _emit("standbys", partitions=standbys)
            if standbys and (lag := processor.standby_lag()) != standby_lag:
                standby_lag = lag
                _emit("standby-lag", lag={str(p): stores for p, stores in lag.items()})
            if processor.aborted != aborted:
                aborted = processor.aborted
                error = processor.last_commit_error
                _emit("aborted", aborted=aborted, code=None if error is None else error.code)
            if exit_when_idle_s is not None and time.monotonic() - last_work > exit_when_idle_s:
                break
    finally:
        processor.close()
        _emit("closed", commits=commits, aborted=processor.aborted)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m examples.balances.cluster")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="run one worker process")
    worker.add_argument("--bootstrap", required=True)
    worker.add_argument("--state-dir", type=Path, required=True)
    worker.add_argument("--instance", required=True)
    worker.add_argument("--app", default=APPLICATION_ID)
    worker.add_argument("--commit-interval-ms", type=int, default=200)
    worker.add_argument("--hang-in-txn-after", type=int)
    worker.add_argument("--release-file", type=Path)
    worker.add_argument("--stall-in-txn-after", type=int)
    worker.add_argument("--stall-s", type=float, default=0.0)
    worker.add_argument("--max-poll-interval-ms", type=int, default=300_000)
    worker.add_argument("--standby-replicas", type=int, default=0)
    worker.add_argument(
        "--static-membership", action="store_true", help="group.instance.id = the instance"
    )
    worker.add_argument(
        "--warmup-before-join",
        action="store_true",
        help="warm standbys of every partition before joining the group (KIP-441's warm-up)",
    )
    worker.add_argument("--acceptable-recovery-lag", type=int, default=10_000)
    worker.add_argument("--group-protocol", choices=["consumer", "classic"], default="consumer")
    worker.add_argument("--transaction-timeout-ms", type=int, default=10_000)
    worker.add_argument("--delete-retention-ms", type=int, default=86_400_000)
    worker.add_argument("--staleness-margin-ms", type=int, default=60_000)
    for name in ("feed", "verify"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--bootstrap", required=True)
        cmd.add_argument("--app", default=APPLICATION_ID)
        cmd.add_argument("--count", type=int, default=1000)
        cmd.add_argument("--accounts", type=int, default=50)
        cmd.add_argument("--seed", type=int, default=7)
        cmd.add_argument("--partitions", type=int, default=6)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "worker":
        logging.basicConfig(
            level=logging.INFO,
            format=f"%(asctime)s {args.instance} %(levelname)s %(name)s: %(message)s",
        )
        run_worker(
            args.bootstrap,
            args.state_dir,
            args.instance,
            app=args.app,
            commit_interval_ms=args.commit_interval_ms,
            hang_in_txn_after=args.hang_in_txn_after,
            release_file=args.release_file,
            stall_in_txn_after=args.stall_in_txn_after,
            stall_s=args.stall_s,
            max_poll_interval_ms=args.max_poll_interval_ms,
            transaction_timeout_ms=args.transaction_timeout_ms,
            standby_replicas=args.standby_replicas,
            static_membership=args.static_membership,
            warmup_before_join=args.warmup_before_join,
            acceptable_recovery_lag=args.acceptable_recovery_lag,
            group_protocol=args.group_protocol,
            delete_retention_ms=args.delete_retention_ms,
            staleness_margin_ms=args.staleness_margin_ms,
        )
        return 0
    transactions = list(generate(args.count, args.accounts, args.seed))
    if args.command == "feed":
        create_topics(args.bootstrap, args.partitions, args.app)
        print(f"fed {feed(args.bootstrap, transactions, args.app)} balance changes")
        return 0
    ok, detail = verify(args.bootstrap, transactions, args.app)
    print(("VERIFIED: " if ok else "MISMATCH: ") + detail)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
