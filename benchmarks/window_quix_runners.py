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
import sys
from pathlib import Path
from typing import Any

from benchmarks._stream_common import (
    Clock,
    processor_config,
    quix_application,
    run_processor,
    runner_main,
)


def run_statestore(args: dict[str, Any]) -> dict[str, Any]:
    """statestore's Processor with a window store of counts (module docstring)."""
    from statestore.kafka import KafkaStoreSpec, Processor  # noqa: PLC0415
    from statestore.serdes import BytesSerde, LongSerde  # noqa: PLC0415

    window = int(args["window_ms"])
    output = args["output"]
    config = processor_config(args)
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
    return run_processor(processor, args)


def run_quix(args: dict[str, Any]) -> dict[str, Any]:
    """Quix Streams' tumbling-window count, ``.current()`` to the output topic.

    Consumer and producer given statestore's tuned settings (``retry.backoff.ms``,
    ``linger.ms``, ``fetch.queue.backoff.ms``).  Timed until ``Application.run``
    returns (its last checkpoint and close).
    """
    events = int(args["events"])
    app = quix_application(args, "exactly-once")
    source = app.topic(args["input"], value_deserializer="json")
    sink = app.topic(args["output"], value_serializer="json")
    clock = Clock()
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
    return runner_main(RUNNERS, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
