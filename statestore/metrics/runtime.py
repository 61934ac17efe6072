"""The distributed runtime's metrics as catalog rows: what ``Processor.metrics()`` reports, by name.

``Processor.metrics()`` (:mod:`statestore.kafka.processor`) returns a plain
dict under Kafka Streams' names; :data:`RUNTIME_METRICS` says what each
exported name means (kind, unit, Kafka equivalent, tags) and
:func:`runtime_samples` turns one snapshot into
:class:`~statestore.metrics.registry.Sample` rows, so that the Prometheus
collector (:class:`statestore.metrics.prometheus.ProcessorCollector`) exports
them like every other catalog metric.  docs/metrics.md renders the catalog;
``tests/statestore/metrics/test_docs.py`` holds the two equal.

Groups and tags (Kafka Streams' where it has them):

* ``stream-thread-metrics`` (tag ``thread-id``): the processor's poll thread
  (one per process; the tag's value is the processor's ``transactional.id``,
  ``<application_id>-<instance_id>``, unique in the group).  The restore and
  handler counts are sums over the process's tasks (Kafka Streams keeps them
  per task);
* ``stream-task-metrics`` (tags ``thread-id``, ``task-id``, ``state``): one
  sample per assigned task, ``task-id`` Kafka Streams' ``0_<partition>``
  (one sub-topology);
* ``stream-standby-metrics`` (tags ``thread-id``, ``store``, ``partition``): a
  standby replica's lag.

Prometheus label names cannot hold ``-``: the collector writes ``thread_id``
and ``task_id``.

Immutable module-level data and pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from statestore.metrics.registry import MetricDefinition, MetricKind, Sample

__all__ = [
    "RUNTIME_METRICS",
    "STANDBY_GROUP",
    "TASK_GROUP",
    "THREAD_GROUP",
    "runtime_samples",
    "task_id",
]

THREAD_GROUP: Final = "stream-thread-metrics"
TASK_GROUP: Final = "stream-task-metrics"
STANDBY_GROUP: Final = "stream-standby-metrics"
THREAD_TAGS: Final = ("thread-id",)
TASK_TAGS: Final = ("thread-id", "task-id", "state")
STANDBY_TAGS: Final = ("thread-id", "store", "partition")

_KS: Final = "Kafka Streams "


def _thread(
    name: str, kind: MetricKind, unit: str, description: str, kafka: str = ""
) -> MetricDefinition:
    return MetricDefinition(
        name=name,
        group=THREAD_GROUP,
        kind=kind,
        unit=unit,
        description=description,
        kafka=kafka,
        tags=THREAD_TAGS,
    )


RUNTIME_METRICS: Final = (
    _thread(
        "process-total",
        "counter",
        "records",
        "input records processed (a record replayed after a rewind counts again)",
        _KS + "process-total (stream-thread-metrics)",
    ),
    _thread(
        "process-rate",
        "gauge",
        "records/s",
        "input records processed a second over the sample windows",
        _KS + "process-rate (stream-thread-metrics)",
    ),
    _thread(
        "commit-total",
        "counter",
        "commits",
        "commits that succeeded",
        _KS + "commit-total (stream-thread-metrics)",
    ),
    _thread(
        "commit-rate",
        "gauge",
        "commits/s",
        "successful commits a second over the sample windows",
        _KS + "commit-rate (stream-thread-metrics)",
    ),
    _thread(
        "commit-latency-avg",
        "gauge",
        "ms",
        "mean time of a successful commit over the sample windows (0 with none)",
        _KS + "commit-latency-avg (stream-thread-metrics)",
    ),
    _thread(
        "commit-latency-max",
        "gauge",
        "ms",
        "longest successful commit over the sample windows (0 with none)",
        _KS + "commit-latency-max (stream-thread-metrics)",
    ),
    _thread(
        "commit-failed-total",
        "counter",
        "commits",
        "commits that failed and were aborted (or fenced)",
    ),
    _thread(
        "processing-errors-total",
        "counter",
        "exceptions",
        "exceptions process() raised (each abandoned the open transaction)",
    ),
    _thread(
        "dropped-records-total",
        "counter",
        "records",
        "records the processing exception handler skipped (each also written to the dead "
        "letter topic when one is configured)",
        _KS + "dropped-records-total (stream-task-metrics, per task)",
    ),
    _thread(
        "restore-total",
        "counter",
        "records",
        "changelog records restored by the restorer since the processor started (counted as "
        "each restore WriteBatch, up to `restore_batch_bytes`, is written: it moves in steps, "
        "and can read 0 while `restore-remaining-records-total` already counts a restore)",
        _KS + "restore-total (stream-task-metrics, per task; KIP-869)",
    ),
    _thread(
        "restore-remaining-records-total",
        "gauge",
        "records",
        "offsets between the restoring partitions' positions and their end offsets",
        _KS + "restore-remaining-records-total (stream-task-metrics, per task; KIP-869)",
    ),
    MetricDefinition(
        name="state",
        group=TASK_GROUP,
        kind="gauge",
        unit="1",
        description="1 for each assigned task, labelled with its state (created, restoring, "
        "running, suspended, closed)",
        kafka="",
        tags=TASK_TAGS,
    ),
    MetricDefinition(
        name="records-lag",
        group=STANDBY_GROUP,
        kind="gauge",
        unit="offsets",
        description="offsets between a standby's position and its changelog partition's high "
        "watermark as last fetched (absent before the first fetch; 0: caught up)",
        kafka="Kafka consumer records-lag (consumer-fetch-manager-metrics) of the standby's "
        "changelog partition",
        tags=STANDBY_TAGS,
    ),
)
"""The runtime's exported metrics, in the order docs/metrics.md lists them."""

_BY_NAME: Final = {definition.name: definition for definition in RUNTIME_METRICS}
assert len(_BY_NAME) == len(RUNTIME_METRICS), "runtime metric names are unique"


def task_id(partition: int) -> str:
    """Kafka Streams' task id of partition ``partition``: ``0_<partition>`` (one sub-topology)."""
    return f"0_{partition}"


def runtime_samples(snapshot: Mapping[str, Any], thread_id: str) -> Iterator[Sample]:
    """The catalog rows of one ``Processor.metrics()`` snapshot, in catalog order.

    Names the snapshot lacks are left out; a standby without a fetch yet
    (lag ``None``) is left out.
    """
    thread = (("thread-id", thread_id),)
    for definition in RUNTIME_METRICS:
        if definition.group == THREAD_GROUP and definition.name in snapshot:
            yield Sample(definition=definition, tags=thread, value=snapshot[definition.name])
    states: Mapping[int, str] = snapshot.get("task-states", {})
    for partition, state in sorted(states.items()):
        tags = (*thread, ("task-id", task_id(partition)), ("state", state))
        yield Sample(definition=_BY_NAME["state"], tags=tags, value=1)
    lags: Mapping[int, Mapping[str, int | None]] = snapshot.get("standby-lag", {})
    for partition, by_store in sorted(lags.items()):
        for store, lag in sorted(by_store.items()):
            if lag is not None:
                tags = (*thread, ("store", store), ("partition", str(partition)))
                yield Sample(definition=_BY_NAME["records-lag"], tags=tags, value=lag)
