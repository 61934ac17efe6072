"""One windowed-aggregation run of :mod:`benchmarks.window_quix_bench`, in its own process.

    python -m benchmarks.window_quix_runners CASE JSON_ARGS

``CASE`` is ``statestore`` or ``quix``; ``JSON_ARGS`` holds ``bootstrap``, ``input``,
``output``, ``app`` (group id and topic prefix), ``events`` (input records to
process), ``commit_every`` (records per transaction, 0: time-based),
``commit_interval_ms``, ``window_ms``, ``partitions`` and ``state_dir``.  Prints one
JSON line: ``records``, ``wall_s`` and ``cpu_s`` (process CPU, librdkafka's threads
included) from the first record processed (statestore: once every task runs) until
the last one is committed.

The workload is the same on both sides, exactly-once: an input record (JSON, keyed,
its event time the record's timestamp) adds one to its key's tumbling window of
``window_ms`` (windows expire at their end: no grace); each input produces one JSON
output ``{"start", "end", "value"}`` with the window's count so far (Quix's
``.current()``).

* statestore: the :class:`~statestore.kafka.Processor` with a window store
  (``retention_ms`` = the window size, 8-byte counts), ``fetch_window`` + ``put`` per
  record; its changelog topic is ``compact,delete`` (Kafka Streams' layout).
* quix: Quix Streams 3's ``tumbling_window(...).count().current()``, its own
  windowed state store and changelog topic (its own key layout, JSON values).

Neither side fsyncs locally: the changelog topics on the broker are the durability
(statestore's RocksDB is a cache of them; Quix's RocksDB writes without sync).

Only the standard library is imported at the top: the ``quix`` case runs in a
virtualenv of its own (Quix Streams pins an older confluent-kafka).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Clock:
    """Wall and CPU time from :meth:`start` to :meth:`stop`."""

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


def run_statestore(args: dict[str, Any]) -> dict[str, Any]:
    """statestore's Processor with a window store of counts (module docstring)."""
    from statestore.kafka import KafkaStoreSpec, Processor, ProcessorConfig  # noqa: PLC0415
    from statestore.serdes import BytesSerde, LongSerde  # noqa: PLC0415

    events = int(args["events"])
    every = int(args["commit_every"])
    window = int(args["window_ms"])
    output = args["output"]
    count_based = every > 0
    config = ProcessorConfig(
        application_id=args["app"],
        bootstrap_servers=args["bootstrap"],
        input_topics=(args["input"],),
        output_topics=(output,),
        instance_id="bench",
        commit_interval_ms=600_000 if count_based else int(args["commit_interval_ms"]),
        commit_every_records=every if count_based else 1 << 40,
        poll_records=every if count_based else 500,
        transaction_timeout_ms=900_000 if count_based else 60_000,
    )
    clock = _Clock()
    dumps = json.dumps

    def process(context: Any, message: Any) -> None:
        counts = context.store("counts")
        key = message.key()
        stamp = message.timestamp()[1]
        start = stamp - stamp % window
        count = (counts.fetch_window(key, start) or 0) + 1
        counts.put(key, count, start, timestamp_ms=stamp)
        context.send(
            output, key, dumps({"start": start, "end": start + window, "value": count}).encode()
        )

    spec = KafkaStoreSpec.window(
        "counts",
        window_size_ms=window,
        retention_ms=window,
        key_serde=BytesSerde(),
        value_serde=LongSerde(),
    )
    processor = Processor(config, Path(args["state_dir"]), [spec], process)
    processor.start()
    partitions = int(args["partitions"])
    before = 0
    try:
        while processor.processed_records < events:
            processor.poll_once(0.1)
            if clock.started is None and len(processor.assignment) == partitions:
                clock.start()  # every task restored and running: the steady state
                before = processor.processed_records
        processor.commit()
        clock.stop()
    finally:
        processor.close()
    return clock.report(processor.processed_records - before)


def run_quix(args: dict[str, Any]) -> dict[str, Any]:
    """Quix Streams' tumbling-window count, ``.current()`` to the output topic.

    Consumer and producer given statestore's tuned settings (``retry.backoff.ms``,
    ``linger.ms``, ``fetch.queue.backoff.ms``).  Timed until ``Application.run``
    returns (its last checkpoint and close).
    """
    from quixstreams import Application  # noqa: PLC0415

    events = int(args["events"])
    every = int(args["commit_every"])
    app = Application(
        broker_address=args["bootstrap"],
        consumer_group=args["app"],
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
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

    def count(_value: Any) -> None:
        nonlocal seen
        if clock.started is None:
            clock.start()
        seen += 1
        if seen >= events:
            app.stop()

    sdf = app.dataframe(source).update(count)
    sdf = sdf.tumbling_window(duration_ms=int(args["window_ms"])).count().current()
    sdf.to_topic(sink)
    app.run()
    clock.stop()
    return clock.report(seen)


RUNNERS = {"statestore": run_statestore, "quix": run_quix}


def main(argv: list[str]) -> int:
    """Run ``argv[0]`` with the JSON arguments ``argv[1]``; print the JSON report."""
    case, args = argv[0], json.loads(argv[1])
    print(json.dumps(RUNNERS[case](args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
