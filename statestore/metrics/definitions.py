"""The catalog: every metric the library records, with Kafka's names and groups where Kafka has one.

docs/metrics.md renders this catalog as a table, and
``tests/statestore/metrics/test_docs.py`` holds the two equal.  Groups:

* ``stream-state-metrics`` (tags ``store``, ``partition``): one store partition's
  operations, recorded by :class:`~statestore.stores.metered.MeteredStore`
  (Kafka Streams' group of ``MeteredKeyValueStore``).  As there, the
  per-operation ones (put, get, delete counts and rates, get latency) are
  DEBUG metrics: counting them costs a Python call on every put and get, a
  tenth of a put (issue 18); the per-commit ones are INFO;
* ``stream-task-metrics`` (same tags): the partition's restore (Kafka
  Streams records these per task);
* ``Log`` (same tags): the changelog partition (Kafka's
  ``kafka.log:type=Log`` gauges, tagged ``topic``/``partition`` there);
* ``LogCleaner`` and ``LogCleanerManager`` (no tags): the background cleaner
  (Kafka's ``kafka.log:type=LogCleaner`` / ``type=LogCleanerManager``);
* ``stream-state-metrics`` with the tag ``store`` alone: a TTL store's expiry
  counts (:data:`TTL_METRICS`);
* ``TransactionCoordinator`` (no tags): the state directory's transaction
  coordinator (:mod:`statestore.metrics.transactions`; Kafka's producer has
  ``txn-commit-time-ns-total`` and its coordinator partition-load metrics,
  nothing with these meanings).

Immutable module-level data; thread-safe.
"""

from __future__ import annotations

from typing import Final

from statestore.metrics.registry import MetricDefinition, MetricKind

__all__ = [
    "ALL_METRICS",
    "CLEANER_GROUP",
    "CLEANER_MANAGER_GROUP",
    "CLEANER_METRICS",
    "LOG_GROUP",
    "PARTITION_METRICS",
    "PARTITION_TAGS",
    "STATE_GROUP",
    "STORE_TAGS",
    "TASK_GROUP",
    "TRANSACTION_GROUP",
    "TRANSACTION_METRICS",
    "TTL_METRICS",
    "by_name",
]

STATE_GROUP: Final = "stream-state-metrics"
TASK_GROUP: Final = "stream-task-metrics"
LOG_GROUP: Final = "Log"
CLEANER_GROUP: Final = "LogCleaner"
CLEANER_MANAGER_GROUP: Final = "LogCleanerManager"
TRANSACTION_GROUP: Final = "TransactionCoordinator"
PARTITION_TAGS: Final = ("store", "partition")
STORE_TAGS: Final = ("store",)


def _partition(  # noqa: PLR0917 - a catalog row reads best as positional fields
    name: str,
    group: str,
    kind: MetricKind,
    unit: str,
    description: str,
    kafka: str = "",
    *,
    source: str = "",
    debug: bool = False,
) -> MetricDefinition:
    return MetricDefinition(
        name=name,
        group=group,
        kind=kind,
        unit=unit,
        description=description,
        kafka=kafka,
        tags=PARTITION_TAGS,
        source=source,
        level="DEBUG" if debug else "INFO",
    )


def _cleaner(  # noqa: PLR0917 - same
    name: str, group: str, kind: MetricKind, unit: str, description: str, kafka: str = ""
) -> MetricDefinition:
    return MetricDefinition(
        name=name, group=group, kind=kind, unit=unit, description=description, kafka=kafka
    )


_KS: Final = "Kafka Streams "

PARTITION_METRICS: Final = (
    # ---------------------------------------------------------------- operations
    _partition(
        "put-total",
        STATE_GROUP,
        "counter",
        "calls",
        "put() calls with a value (tombstones are deletes)",
        _KS + "put-rate (its count)",
        debug=True,
    ),
    _partition(
        "put-rate",
        STATE_GROUP,
        "rate",
        "calls/s",
        "put() calls per second over the sample window",
        _KS + "put-rate",
        source="put-total",
        debug=True,
    ),
    _partition(
        "get-total",
        STATE_GROUP,
        "counter",
        "calls",
        "get() calls (every read by key: get, [], in)",
        _KS + "get-rate (its count)",
        debug=True,
    ),
    _partition(
        "get-rate",
        STATE_GROUP,
        "rate",
        "calls/s",
        "get() calls per second over the sample window",
        _KS + "get-rate",
        source="get-total",
        debug=True,
    ),
    _partition(
        "get-latency",
        STATE_GROUP,
        "histogram",
        "seconds",
        "time of one get() below the serdes (pending writes, then RocksDB); DEBUG level only",
        _KS + "get-latency-avg, get-latency-max",
        debug=True,
    ),
    _partition(
        "delete-total",
        STATE_GROUP,
        "counter",
        "calls",
        "deletes: delete(), del, put(key, None)",
        _KS + "delete-rate (its count)",
        debug=True,
    ),
    _partition(
        "delete-rate",
        STATE_GROUP,
        "rate",
        "calls/s",
        "deletes per second over the sample window",
        _KS + "delete-rate",
        source="delete-total",
        debug=True,
    ),
    _partition(
        "commit-total",
        STATE_GROUP,
        "counter",
        "commits",
        "commits that wrote a batch (a commit with nothing pending is not counted)",
        _KS + "commit-total (stream-thread-metrics)",
    ),
    _partition(
        "commit-rate",
        STATE_GROUP,
        "rate",
        "commits/s",
        "commits per second over the sample window",
        _KS + "commit-rate (stream-thread-metrics)",
        source="commit-total",
    ),
    _partition(
        "commit-latency",
        STATE_GROUP,
        "histogram",
        "seconds",
        "time of one commit that wrote a batch: changelog append (with its fsync) and RocksDB write",
        _KS + "commit-latency-avg, commit-latency-max (stream-thread-metrics)",
    ),
    _partition(
        "records-committed-total",
        STATE_GROUP,
        "counter",
        "records",
        "records written to the changelog by commits (one per distinct key written since the previous commit)",
    ),
    _partition(
        "bytes-appended-total",
        STATE_GROUP,
        "counter",
        "bytes",
        "bytes of record batches appended to the changelog by commits",
        "Kafka BytesInPerSec (BrokerTopicMetrics), per partition",
    ),
    _partition(
        "log-flush-time",
        STATE_GROUP,
        "histogram",
        "seconds",
        "time a commit waited for its changelog append to be fsynced: a one-partition commit's"
        " append (when the flush policy fsyncs it), or this partition's fsync in a transaction",
        "Kafka LogFlushRateAndTimeMs (LogFlushStats)",
    ),
    _partition(
        "pending-writes",
        STATE_GROUP,
        "gauge",
        "records",
        "writes buffered since the last commit (one per distinct key)",
    ),
    _partition(
        "applied-offset",
        STATE_GROUP,
        "gauge",
        "offset",
        "next changelog offset RocksDB has not applied (equals LogEndOffset after every commit)",
        _KS + "the offset in the store's .checkpoint file",
    ),
    _partition(
        "estimate-num-keys",
        STATE_GROUP,
        "gauge",
        "keys",
        "RocksDB's estimate of the number of keys (rocksdb.estimate-num-keys)",
        _KS + "estimate-num-keys",
    ),
    # ---------------------------------------------------------------- restore
    _partition(
        "restore-total",
        TASK_GROUP,
        "counter",
        "records",
        "records replayed into RocksDB by the restore at open",
        _KS + "restore-total (stream-task-metrics)",
    ),
    _partition(
        "restore-rate",
        TASK_GROUP,
        "rate",
        "records/s",
        "records replayed per second over the sample window",
        _KS + "restore-rate (stream-task-metrics)",
        source="restore-total",
    ),
    _partition(
        "restore-expired-total",
        TASK_GROUP,
        "counter",
        "records",
        "of restore-total, values that had expired at restore time and were applied as deletes"
        " (a store with a TTL)",
    ),
    _partition(
        "restore-remaining-records-total",
        TASK_GROUP,
        "gauge",
        "records",
        "offsets left to replay (end offset minus the next offset to restore; 0 once open)",
        _KS + "restore-remaining-records-total (stream-task-metrics)",
    ),
    _partition(
        "restore-time",
        TASK_GROUP,
        "gauge",
        "seconds",
        "wall time of the last restore (log load excluded; replay and RocksDB flush included)",
        _KS + "restore-latency-avg (stream-state-metrics)",
    ),
    # ---------------------------------------------------------------- the changelog partition
    _partition(
        "LogStartOffset",
        LOG_GROUP,
        "gauge",
        "offset",
        "first offset of the changelog partition",
        "Kafka LogStartOffset (kafka.log:type=Log)",
    ),
    _partition(
        "LogEndOffset",
        LOG_GROUP,
        "gauge",
        "offset",
        "offset the next append gets",
        "Kafka LogEndOffset (kafka.log:type=Log)",
    ),
    _partition(
        "NumLogSegments",
        LOG_GROUP,
        "gauge",
        "segments",
        "segments of the partition, the active one included",
        "Kafka NumLogSegments (kafka.log:type=Log)",
    ),
    _partition(
        "Size",
        LOG_GROUP,
        "gauge",
        "bytes",
        "size of the partition's .log files",
        "Kafka Size (kafka.log:type=Log)",
    ),
    _partition(
        "dirty-ratio",
        LOG_GROUP,
        "gauge",
        "ratio",
        "the cleaner's dirty ratio: dirty bytes / (clean + dirty bytes), as the cleaner computes it now",
        "Kafka: the per-log input of max-dirty-percent",
    ),
)
"""Metrics of one store partition (tags ``store``, ``partition``)."""

CLEANER_METRICS: Final = (
    _cleaner(
        "max-buffer-utilization-percent",
        CLEANER_GROUP,
        "gauge",
        "percent",
        "highest offset-map utilization of the last pass of each cleaner thread",
        "Kafka max-buffer-utilization-percent",
    ),
    _cleaner(
        "cleaner-recopy-percent",
        CLEANER_GROUP,
        "gauge",
        "percent",
        "bytes written / bytes read by the last pass of each cleaner thread, as a whole percent",
        "Kafka cleaner-recopy-percent",
    ),
    _cleaner(
        "max-clean-time-secs",
        CLEANER_GROUP,
        "gauge",
        "seconds",
        "longest duration of the last pass of each cleaner thread",
        "Kafka max-clean-time-secs",
    ),
    _cleaner(
        "max-compaction-delay-secs",
        CLEANER_GROUP,
        "gauge",
        "seconds",
        "how far past max_compaction_lag_ms the most overdue log was at the last choice of a log",
        "Kafka max-compaction-delay-secs",
    ),
    _cleaner(
        "DeadThreadCount",
        CLEANER_GROUP,
        "gauge",
        "threads",
        "cleaner threads that died (0 while the cleaner is healthy or stopped cleanly)",
        "Kafka DeadThreadCount",
    ),
    _cleaner(
        "cleaner-passes-total", CLEANER_GROUP, "counter", "passes", "cleaning passes completed"
    ),
    _cleaner(
        "cleaner-records-read-total",
        CLEANER_GROUP,
        "counter",
        "records",
        "records read by the recopy phase of every pass",
    ),
    _cleaner(
        "cleaner-bytes-read-total",
        CLEANER_GROUP,
        "counter",
        "bytes",
        "bytes read by both phases (offset map and recopy) of every pass",
    ),
    _cleaner(
        "cleaner-records-written-total",
        CLEANER_GROUP,
        "counter",
        "records",
        "records written to cleaned segments",
    ),
    _cleaner(
        "cleaner-bytes-written-total",
        CLEANER_GROUP,
        "counter",
        "bytes",
        "bytes written to cleaned segments",
    ),
    _cleaner(
        "cleaner-tombstones-removed-total",
        CLEANER_GROUP,
        "counter",
        "records",
        "tombstones removed past their delete horizon",
    ),
    _cleaner(
        "cleaner-expired-records-removed-total",
        CLEANER_GROUP,
        "counter",
        "records",
        "data records removed because they expired (record_ttl_ms)",
    ),
    _cleaner(
        "time-since-last-clean-ms",
        CLEANER_GROUP,
        "gauge",
        "ms",
        "time since the last pass completed (absent before the first)",
    ),
    _cleaner(
        "max-dirty-percent",
        CLEANER_MANAGER_GROUP,
        "gauge",
        "percent",
        "dirty ratio of the dirtiest log at the last choice of a log, as a whole percent",
        "Kafka max-dirty-percent",
    ),
    _cleaner(
        "time-since-last-run-ms",
        CLEANER_MANAGER_GROUP,
        "gauge",
        "ms",
        "time since the cleaner last looked for a log to clean",
        "Kafka time-since-last-run-ms",
    ),
    _cleaner(
        "uncleanable-partitions-count",
        CLEANER_MANAGER_GROUP,
        "gauge",
        "partitions",
        "logs marked uncleanable after a failed pass",
        "Kafka uncleanable-partitions-count",
    ),
    _cleaner(
        "uncleanable-bytes",
        CLEANER_MANAGER_GROUP,
        "gauge",
        "bytes",
        "dirty bytes of the logs marked uncleanable",
        "Kafka uncleanable-bytes",
    ),
)
"""Metrics of the background cleaner (no tags)."""

TRANSACTION_METRICS: Final = (
    _cleaner(
        "transactions-committed-total",
        TRANSACTION_GROUP,
        "counter",
        "transactions",
        "commits over two or more partitions decided since the manager opened "
        "(the decision record durable; a one-partition commit is a plain batch, not counted)",
    ),
    _cleaner(
        "transactions-aborted-total",
        TRANSACTION_GROUP,
        "counter",
        "transactions",
        "transactions ended by an error before their decision (ABORT markers; nothing visible)",
    ),
    _cleaner(
        "transactions-rolled-forward-at-open-total",
        TRANSACTION_GROUP,
        "counter",
        "partitions",
        "partitions opened with a decided transaction left open (a crash after the decision): "
        "a COMMIT marker written, counted once per partition",
    ),
    _cleaner(
        "transactions-aborted-at-open-total",
        TRANSACTION_GROUP,
        "counter",
        "partitions",
        "partitions opened with an undecided transaction left open (a crash before the "
        "decision): an ABORT marker written, counted once per partition",
    ),
    _cleaner(
        "decision-latency",
        TRANSACTION_GROUP,
        "histogram",
        "seconds",
        "time of one decision (T3: append the PrepareCommit record, fsync it through the "
        "coordinator log's group commit)",
        "Kafka producer txn-commit-time-ns-total (the whole commit, not only its decision)",
    ),
)
"""Metrics of the transaction coordinator (no tags)."""

TTL_METRICS: Final = (
    MetricDefinition(
        name="expired-reads-total",
        group=STATE_GROUP,
        kind="counter",
        unit="values",
        description="values a read found expired and did not return (a store with a TTL)",
        kafka="",
        tags=STORE_TAGS,
        source="",
        level="INFO",
    ),
    MetricDefinition(
        name="expired-swept-total",
        group=STATE_GROUP,
        kind="counter",
        unit="records",
        description="tombstones the sweep buffered for keys whose value expired (a store with a TTL)",
        kafka="",
        tags=STORE_TAGS,
        source="",
        level="INFO",
    ),
)
"""A TTL store's expiry counts, per store (tag ``store``): its top layer counts them."""

ALL_METRICS: Final = PARTITION_METRICS + CLEANER_METRICS + TRANSACTION_METRICS + TTL_METRICS
"""Every metric definition, in the order docs/metrics.md lists them."""

_BY_NAME: Final = {definition.name: definition for definition in ALL_METRICS}
assert len(_BY_NAME) == len(ALL_METRICS), "metric names are unique"


def by_name(name: str) -> MetricDefinition:
    """The definition called ``name`` (``KeyError`` if there is none)."""
    return _BY_NAME[name]
