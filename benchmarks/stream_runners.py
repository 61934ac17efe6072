"""One consume-process-produce run of the throughput benchmark, in its own process.

    python -m benchmarks.stream_runners CASE JSON_ARGS

``CASE`` is ``statestore``, ``raw`` or ``quix``; ``JSON_ARGS`` holds ``bootstrap``,
``input``, ``output``, ``app`` (group id and topic prefix), ``events`` (how many
input records to process), ``guarantee`` (``exactly_once_v2`` or
``at_least_once``), ``commit_every`` (records per transaction, 0: time-based),
``commit_interval_ms``, ``partitions`` (of the input) and ``state_dir``.
Prints one JSON line: ``records``, ``wall_s``, ``cpu_s`` (process CPU
time, every thread: librdkafka's included) and ``threads_cpu_s`` (that CPU time
by thread group: ``main``, the interpreter's thread, and librdkafka's and
RocksDB's threads by name) from the first record processed
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
import struct
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._stream_common import (
    Clock,
    processor_config,
    quix_application,
    run_processor,
    runner_main,
)

_SIGN_BIT = 1 << 63
_INT64 = struct.Struct(">Q")


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
    from statestore.kafka import KafkaStoreSpec, Processor  # noqa: PLC0415
    from statestore.serdes import BytesSerde, IntSerde  # noqa: PLC0415

    output = args["output"]
    config = processor_config(args, processing_guarantee=args["guarantee"])
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
    # a restore that fails before the timing starts (a new changelog topic whose leader
    # is not known yet) is retried
    return run_processor(processor, args, retry_restore=True)


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
    clock = Clock()
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
    events = int(args["events"])
    eos = args["guarantee"] == "exactly_once_v2"
    app = quix_application(args, "exactly-once" if eos else "at-least-once")
    source = app.topic(args["input"], value_deserializer="json")
    sink = app.topic(args["output"], value_serializer="json")
    clock = Clock()
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
    return runner_main(RUNNERS, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
