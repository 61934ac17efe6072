"""One consume-process-produce run of the throughput benchmark, in its own process.

    python -m benchmarks.stream_runners CASE JSON_ARGS

``CASE`` is ``statestore``, ``raw`` or ``quix``; ``JSON_ARGS`` holds ``bootstrap``,
``input``, ``output``, ``app`` (group id and topic prefix), ``events`` (how many
input records to process), ``guarantee`` (``exactly_once_v2`` or
``at_least_once``), ``commit_every`` (records per transaction, 0: time-based),
``commit_interval_ms``, ``partitions`` (of the input) and ``state_dir``.
Prints one JSON line: ``records``, ``wall_s`` and ``cpu_s`` (process CPU
time, every thread: librdkafka's included) from the first record processed
(statestore: from the moment all its tasks run, their restore left out; the
records processed before are not counted) until the last one is committed.

The workload is the same in every case: an input record is a JSON object
``{"amount": n}`` keyed by an account; the running sum per key is state (a
changelog record per key changed in a transaction: the key and the sum as 8
ordered bytes, ``statestore.serdes.IntSerde``'s format); every input produces
one JSON output ``{"total": sum}`` with the same key.

This module imports only the standard library at the top: the ``quix`` case
runs in a virtualenv of its own (Quix Streams pins an older confluent-kafka).
"""

from __future__ import annotations

import json
import resource
import struct
import sys
import time
from pathlib import Path
from typing import Any

_SIGN_BIT = 1 << 63
_INT64 = struct.Struct(">Q")


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Clock:
    """Wall and CPU time from the first record processed to :meth:`stop`."""

    def __init__(self) -> None:
        self.started: tuple[float, float] | None = None
        self.stopped: tuple[float, float] | None = None

    def start(self) -> None:
        self.started = (time.perf_counter(), _cpu_s())

    def stop(self) -> None:
        self.stopped = (time.perf_counter(), _cpu_s())

    def report(self, records: int) -> dict[str, Any]:
        assert self.started is not None
        assert self.stopped is not None
        return {
            "records": records,
            "wall_s": self.stopped[0] - self.started[0],
            "cpu_s": self.stopped[1] - self.started[1],
        }


# Client settings shared by the statestore runtime and the raw loops (statestore's own
# defaults, so that both sides are configured alike).
PRODUCER = {
    "enable.idempotence": "true",
    "acks": "all",
    "linger.ms": "5",
    "retry.backoff.ms": "10",
    "partitioner": "murmur2_random",
}
CONSUMER = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "fetch.queue.backoff.ms": "10",
    "group.protocol": "consumer",
    "group.remote.assignor": "range",
}


def run_statestore(args: dict[str, Any]) -> dict[str, Any]:
    """statestore's :class:`~statestore.kafka.Processor` with one store of running sums."""
    from statestore.kafka import (  # noqa: PLC0415
        KafkaClientError,
        KafkaStoreSpec,
        Processor,
        ProcessorConfig,
    )
    from statestore.serdes import BytesSerde, IntSerde  # noqa: PLC0415

    events = int(args["events"])
    every = int(args["commit_every"])
    output = args["output"]
    count_based = every > 0
    config = ProcessorConfig(
        application_id=args["app"],
        bootstrap_servers=args["bootstrap"],
        input_topics=(args["input"],),
        output_topics=(output,),
        instance_id="bench",
        processing_guarantee=args["guarantee"],
        commit_interval_ms=600_000 if count_based else int(args["commit_interval_ms"]),
        commit_every_records=every if count_based else 1 << 40,
        poll_records=every if count_based else 500,
        transaction_timeout_ms=900_000 if count_based else 60_000,
    )
    clock = _Clock()
    loads = json.loads
    dumps = json.dumps

    def process(context: Any, message: Any) -> None:
        store = context.store("sums")
        key = message.key()
        total = store.get(key, 0) + loads(message.value())["amount"]
        store.put(key, total)
        context.send(output, key, dumps({"total": total}).encode())

    spec = KafkaStoreSpec(name="sums", key_serde=BytesSerde(), value_serde=IntSerde())
    processor = Processor(config, Path(args["state_dir"]), [spec], process)
    processor.start()
    partitions = int(args["partitions"])
    before = 0
    try:
        while processor.processed_records < events:
            try:
                processor.poll_once(0.1)
            except KafkaClientError as exc:
                if clock.started is not None:
                    raise
                # A restore that failed before the timing starts (a new changelog topic
                # whose leader is not known yet): the task is restored again.
                print(f"restore retried: {exc}", file=sys.stderr)
            if clock.started is None and len(processor.assignment) == partitions:
                # every task restored and running: the steady state starts here
                clock.start()
                before = processor.processed_records
        processor.commit()
        clock.stop()
    finally:
        processor.close()
    return clock.report(processor.processed_records - before)


def run_raw(args: dict[str, Any]) -> dict[str, Any]:
    """The floor: confluent-kafka alone, state in a dict, the same changelog traffic.

    Exactly-once: one transactional producer; every output produced as it is
    made; at commit, one changelog record per key changed since the last
    commit (to partition ``p`` of a compacted changelog topic), then
    ``send_offsets_to_transaction`` and ``commit_transaction`` (which waits
    for every acknowledgement), then ``begin_transaction``.  No delivery
    callback: a failed record fails the commit.  At-least-once: the same
    records, ``flush`` and a delivery callback per record that counts
    errors, then a synchronous offset commit.  What it does not do: restore,
    rebalance handling, error handling beyond raising, RocksDB, serdes
    beyond the bytes written.
    """
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    events = int(args["events"])
    every = int(args["commit_every"])
    interval_s = int(args["commit_interval_ms"]) / 1000
    eos = args["guarantee"] == "exactly_once_v2"
    output = args["output"]
    changelog = f"{args['app']}-sums-changelog"
    bootstrap = {"bootstrap.servers": args["bootstrap"]}
    admin = AdminClient(bootstrap)
    partitions = len(admin.list_topics(args["input"], timeout=30).topics[args["input"]].partitions)
    for future in admin.create_topics(
        [NewTopic(changelog, partitions, 1, config={"cleanup.policy": "compact"})]
    ).values():
        future.result()
    errors: list[Any] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(error)

    producer_config: dict[str, Any] = {**bootstrap, **PRODUCER}
    if eos:
        producer_config["transactional.id"] = f"{args['app']}-raw"
        producer_config["transaction.timeout.ms"] = "900000"
    else:
        producer_config["on_delivery"] = delivered
    producer = Producer(producer_config)
    consumer = Consumer({**bootstrap, **CONSUMER, "group.id": args["app"]})
    consumer.subscribe([args["input"]])
    if eos:
        producer.init_transactions(60)
        producer.begin_transaction()
    sums: dict[bytes, int] = {}
    dirty: dict[int, dict[bytes, bytes]] = {p: {} for p in range(partitions)}
    positions: dict[int, int] = {}
    clock = _Clock()
    loads = json.loads
    dumps = json.dumps
    pack = _INT64.pack
    produce = producer.produce
    batch = every if every > 0 else 500
    processed = 0
    since_commit = 0
    last_commit = time.monotonic()

    def commit() -> None:
        for p, changed in dirty.items():
            for key, value in changed.items():
                while True:
                    try:
                        produce(changelog, value, key, p)
                        break
                    except BufferError:
                        producer.poll(0.05)
            changed.clear()
        offsets = [TopicPartition(args["input"], p, o) for p, o in positions.items()]
        if eos:
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
            producer.begin_transaction()
        else:
            if producer.flush(60):
                raise RuntimeError("records not acknowledged")
            if errors:
                raise KafkaException(errors[0])
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=False)

    while processed < events:
        messages = consumer.consume(batch, timeout=0.1)
        for message in messages:
            if message.error() is not None:
                raise KafkaException(message.error())
            if clock.started is None:
                clock.start()
            key = message.key()
            total = sums.get(key, 0) + loads(message.value())["amount"]
            sums[key] = total
            partition = message.partition()
            dirty[partition][key] = pack(total + _SIGN_BIT)
            while True:
                try:
                    produce(output, dumps({"total": total}).encode(), key)
                    break
                except BufferError:
                    producer.poll(0.05)
            positions[partition] = message.offset() + 1
            processed += 1
        since_commit += len(messages)
        if (every > 0 and since_commit >= every) or (
            every == 0 and time.monotonic() - last_commit >= interval_s
        ):
            last_commit = time.monotonic()
            since_commit = 0
            commit()
    commit()
    clock.stop()
    consumer.close()
    producer.flush(10)
    return clock.report(processed)


def run_quix(args: dict[str, Any]) -> dict[str, Any]:
    """Quix Streams' ``Application``: a stateful ``apply`` keeping the running sum, ``to_topic``.

    Its own changelog topic (per key changed, at its checkpoint), its own state
    serialization (JSON), consumer and producer given statestore's tuned
    settings (``retry.backoff.ms``, ``linger.ms``, ``fetch.queue.backoff.ms``).
    Timed until ``Application.run`` returns (its last checkpoint and close).
    """
    from quixstreams import Application  # noqa: PLC0415

    events = int(args["events"])
    every = int(args["commit_every"])
    eos = args["guarantee"] == "exactly_once_v2"
    app = Application(
        broker_address=args["bootstrap"],
        consumer_group=args["app"],
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once" if eos else "at-least-once",
        commit_every=every,
        commit_interval=600.0 if every > 0 else int(args["commit_interval_ms"]) / 1000,
        state_dir=args["state_dir"],
        consumer_extra_config={"fetch.queue.backoff.ms": 10},
        producer_extra_config={"linger.ms": 5, "retry.backoff.ms": 10},
        loglevel="WARNING",
    )
    source = app.topic(args["input"], value_deserializer="json")
    sink = app.topic(args["output"], value_serializer="json")
    clock = _Clock()
    seen = 0

    def add(value: dict[str, Any], state: Any) -> dict[str, Any]:
        nonlocal seen
        if clock.started is None:
            clock.start()
        total = state.get("sum", 0) + value["amount"]
        state.set("sum", total)
        seen += 1
        if seen >= events:
            app.stop()
        return {"total": total}

    app.dataframe(source).apply(add, stateful=True).to_topic(sink)
    app.run()
    clock.stop()
    return clock.report(seen)


RUNNERS = {"statestore": run_statestore, "raw": run_raw, "quix": run_quix}


def main(argv: list[str]) -> int:
    """Run ``argv[0]`` with the JSON arguments ``argv[1]``; print the JSON report."""
    case, args = argv[0], json.loads(argv[1])
    print(json.dumps(RUNNERS[case](args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
