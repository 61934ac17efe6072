"""The metered layer of one store partition (Kafka Streams' ``MeteredKeyValueStore``).

:class:`MeteredStore` wraps a partition's write buffer behind the same
bytes-store protocol and counts what passes through it; the builder puts it
between the typed store (or the partition router) and the write buffer when
metrics are on, and leaves it out when they are off.  It also registers the
partition's gauges (the changelog's offsets, segments, size and dirty ratio,
RocksDB's applied offset and key estimate) and records the restore.

Cost on the hot path (``benchmarks/metrics_bench.py`` measures it;
docs/performance.md has the figures): at the ``INFO`` recording level (the
default) none on a put or a get: the layer passes put and get straight
through (the builder grants the typed store the write buffer's fast path
past it), and a commit adds two clock reads and two histogram observations
per batch.  At ``DEBUG`` (as in Kafka Streams, where every state-store
operation metric is ``DEBUG``) a put and a get each take one extra Python
call and an attribute add, and a get two clock reads more for
``get-latency``.

What is counted where: ``get-total`` counts every read by key, including
the one ``delete()`` and ``put_if_absent()`` make first; ``put-total`` and
``delete-total`` count calls, so two puts of one key before a commit count
2 while ``records-committed-total`` counts the 1 record written.

Invariants: the counters only grow; after a successful commit that wrote
``n`` records, ``commit-total`` grew by 1 and ``records-committed-total``
by ``n``.

Thread-safety: like the partition it wraps, used by one thread at a time;
its metrics are read from any thread through the registry.  Gauges read the
changelog (thread-safe) and RocksDB (thread-safe until closed: the gauges
stop reading once :meth:`MeteredStore.close` has begun).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from changelog import AppendInfo, Log
from statestore.metrics.definitions import by_name
from statestore.metrics.registry import Counter, MetricsRegistry, Tags
from statestore.stores.bytes_store import BytesStore
from statestore.stores.restore import ProgressHook, RestoreProgress, RestoreResult
from statestore.txn.commit_lock import CommitLock
from statestore.txn.participant import ForwardedIdentity, ForwardedSteps, Participant, Records

__all__ = ["MeteredParticipant", "MeteredStore", "PartitionMetrics", "partition_tags"]


def partition_tags(store: str, partition: int) -> Tags:
    """The tags of a store partition's metrics."""
    return (("store", store), ("partition", str(partition)))


class PartitionMetrics:
    """The metrics of one store partition, registered before its changelog opens.

    The builder makes it first, opens the changelog with :meth:`on_append` as
    its append observer, then hands it the log (:meth:`watch_log`: the log's
    gauges) and, once restored, the engine (:meth:`attach_engine`: the RocksDB
    gauges).  Until then those gauges read ``None``.
    """

    def __init__(self, registry: MetricsRegistry, *, store: str, partition: int) -> None:
        self.registry = registry
        self.tags = tags = partition_tags(store, partition)
        self._log: Log | None = None
        self.readable = True
        """Whether gauges may read the engine (cleared when the partition closes)."""
        self._engine: Any = None

        def counter(name: str) -> Counter:
            if not registry.records(by_name(name)):
                return Counter()  # below the recording level: counted, never registered
            counter = registry.counter(by_name(name), tags)
            rate = name.replace("-total", "-rate")
            if rate != name and _has(rate):
                registry.rate(by_name(rate), tags)
            return counter

        def gauge(name: str, read: Callable[[], float | int | None]) -> None:
            registry.gauge(by_name(name), read, tags)

        self.operations_recorded = registry.records(by_name("put-total"))
        """Whether put/get/delete are counted one by one (DEBUG; else they pass straight through)."""
        self.puts = counter("put-total")
        self.gets = counter("get-total")
        self.deletes = counter("delete-total")
        self.get_latency = (
            registry.histogram(by_name("get-latency"), tags)
            if registry.records(by_name("get-latency"))
            else None
        )
        self.commits = counter("commit-total")
        self.commit_latency = registry.histogram(by_name("commit-latency"), tags)
        self.records_committed = counter("records-committed-total")
        self.bytes_appended = counter("bytes-appended-total")
        self.log_flush_time = registry.histogram(by_name("log-flush-time"), tags)
        self.pending: Callable[[], int] | None = None
        gauge("pending-writes", lambda: self.pending() if self.pending is not None else None)
        gauge("applied-offset", self._applied_offset)
        gauge("estimate-num-keys", self._estimate_num_keys)
        self.restored = counter("restore-total")
        self.restored_expired = counter("restore-expired-total")
        self._restore_remaining = 0
        self._restore_seconds: float | None = None
        gauge("restore-remaining-records-total", lambda: self._restore_remaining)
        gauge("restore-time", lambda: self._restore_seconds)
        gauge("LogStartOffset", lambda: None if self._log is None else self._log.log_start_offset)
        gauge("LogEndOffset", lambda: None if self._log is None else self._log.log_end_offset)
        gauge("NumLogSegments", lambda: None if self._log is None else len(self._log.segments))
        gauge("Size", lambda: None if self._log is None else self._log.size_bytes)
        gauge("dirty-ratio", self._dirty_ratio)

    # ------------------------------------------------------------ changelog

    def watch_log(self, log: Log) -> None:
        """Let the changelog gauges read ``log`` (a :class:`changelog.Log`, opened with :meth:`on_append`)."""
        self._log = log

    # ------------------------------------------------------------ gauges

    def attach_engine(self, engine: Any) -> None:
        """Let the RocksDB gauges read ``engine`` (once it is restored)."""
        self._engine = engine

    def _applied_offset(self) -> int | None:
        engine = self._engine
        if engine is None or not self.readable:
            return None
        return engine.applied_offset()  # type: ignore[no-any-return]

    def _estimate_num_keys(self) -> int | None:
        engine = self._engine
        if engine is None or not self.readable:
            return None
        return engine.approximate_num_entries()  # type: ignore[no-any-return]

    def _dirty_ratio(self) -> float | None:
        from changelog.cleaner.manager import log_to_clean  # noqa: PLC0415 - only when read

        log = self._log
        if log is None or log.closed or not log.config.compact:
            return None
        return log_to_clean(log, now_ms=log.clock()).dirty_ratio

    # ------------------------------------------------------------ restore

    def restore_progress(self, chained: ProgressHook | None) -> ProgressHook:
        """A progress hook that records the restore, then calls ``chained`` (the user's hook)."""
        restored = self.restored

        def hook(progress: RestoreProgress) -> None:
            restored.value = progress.records_restored
            self._restore_remaining = max(progress.end_offset - progress.offset, 0)
            if chained is not None:
                chained(progress)

        return hook

    def restore_finished(self, result: RestoreResult) -> None:
        """Record what the restore did (the progress hook may not have run: an empty log)."""
        self.restored.value = result.records_restored
        self.restored_expired.value = result.records_expired
        self._restore_remaining = 0
        self._restore_seconds = result.seconds

    def on_append(self, info: AppendInfo) -> None:
        """Record one changelog append (its bytes and, when fsynced, the fsync time)."""
        self.bytes_appended.value += info.size_bytes
        if info.flushed and info.flush_time_s:
            self.log_flush_time.observe(info.flush_time_s)

    def on_flush(self, seconds: float) -> None:
        """Record one explicit wait for durability (a transactional commit's fsync, T2)."""
        self.log_flush_time.observe(seconds)


def _has(name: str) -> bool:
    try:
        by_name(name)
    except KeyError:
        return False
    return True


class MeteredStore:
    """A store partition that counts its operations (see the module docstring).

    Implements :class:`~statestore.stores.bytes_store.BytesStore` over the
    partition's write buffer, which it owns (closing this closes it).
    """

    def __init__(self, inner: BytesStore, metrics: PartitionMetrics) -> None:
        """Wrap ``inner`` (restored and open); ``metrics`` were registered before its restore."""
        self._inner = inner
        self.metrics = metrics
        self._inner_put = inner.put
        self._inner_get = inner.get
        self._puts = metrics.puts
        self._deletes = metrics.deletes
        self._gets = metrics.gets
        self._commits = metrics.commits
        self._records = metrics.records_committed
        self._commit_latency = metrics.commit_latency
        metrics.pending = lambda: inner.pending_count
        self._participants: tuple[Participant, ...] = tuple(
            MeteredParticipant(member, metrics) for member in inner.participants
        )
        self.put: Callable[[bytes, bytes | None], None] = self._put
        """Buffer a put (``None``: a delete), counted (DEBUG; else the write buffer's own put)."""
        if not metrics.operations_recorded:  # INFO: no Python frame of this layer per put or get
            self.put = inner.put
            self.get = inner.get  # type: ignore[method-assign]
        elif metrics.get_latency is not None:
            self.get = self._timed_get  # type: ignore[method-assign]

    @property
    def inner(self) -> BytesStore:
        """The wrapped partition (for tests that inject faults below; not for the stack above)."""
        return self._inner

    @property
    def failed(self) -> bool:
        """Whether the wrapped partition is failed."""
        return self._inner.failed

    @property
    def pending_count(self) -> int:
        """Writes buffered since the last commit."""
        return self._inner.pending_count

    @property
    def changelogs(self) -> tuple[Log, ...]:
        """The changelog of the wrapped partition."""
        return self._inner.changelogs

    def _put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self._deletes.value += 1
        else:
            self._puts.value += 1
        self._inner_put(key, value)

    def put_many(self, pairs: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Buffer several puts, each counted."""
        deletes = sum(1 for _key, value in pairs if value is None)
        self._inner.put_many(pairs)
        self._deletes.value += deletes
        self._puts.value += len(pairs) - deletes

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` (pending writes included), counted."""
        self._gets.value += 1
        return self._inner_get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The values of ``keys`` (pending writes included), one multi-get; each key counts a get.

        At the DEBUG recording level each key also counts one get latency: the
        call's time divided by the number of keys (so the latency's count stays
        equal to ``get-total``).
        """
        self._gets.value += len(keys)
        latency = self.metrics.get_latency
        if latency is None:
            return self._inner.get_many(keys)
        started = time.perf_counter()
        try:
            return self._inner.get_many(keys)
        finally:
            each = (time.perf_counter() - started) / max(len(keys), 1)
            for _ in keys:
                latency.observe(each)

    def _timed_get(self, key: bytes) -> bytes | None:
        self._gets.value += 1
        started = time.perf_counter()
        try:
            return self._inner_get(key)
        finally:
            self.metrics.get_latency.observe(time.perf_counter() - started)  # type: ignore[union-attr]

    def items(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries of the wrapped partition (not counted)."""
        return self._inner.items(lo, hi, reverse=reverse, key_size_bytes=key_size_bytes)

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate."""
        return self._inner.approximate_num_entries()

    @property
    def participants(self) -> tuple[Participant, ...]:
        """The wrapped partition as a member of commits, its commits counted and timed."""
        return self._participants

    def abort(self) -> int:
        """Drop the buffered writes."""
        return self._inner.abort()

    def flush(self) -> None:
        """Flush the wrapped partition."""
        self._inner.flush()

    def close(self, *, flush: bool = True) -> None:
        """Stop the RocksDB gauges, then close the wrapped partition; idempotent."""
        self.metrics.readable = False
        self._inner.close(flush=flush)

    def abandon(self) -> None:
        """Stop the RocksDB gauges, then abandon the wrapped partition as a crash would."""
        self.metrics.readable = False
        self._inner.abandon()


class MeteredParticipant(ForwardedSteps, ForwardedIdentity):
    """A partition's :class:`~statestore.txn.participant.Participant`, its commits counted.

    A one-partition commit (:meth:`write`) is timed from start to end; a
    transaction's part is timed from its transactional append to its apply
    (the decision and the other partitions' work in between included).  A
    commit that wrote records counts once in ``commit-total``.  In distributed
    mode only :meth:`apply` runs here (the produce and the broker's commit are
    the runtime's): the commit is counted, and ``commit-latency`` times the
    RocksDB write alone.
    Thread-safety: as the wrapped participant (the coordinator holds its lock).
    """

    def __init__(self, inner: Participant, metrics: PartitionMetrics) -> None:
        """Count the commits of ``inner`` into ``metrics``."""
        self._inner: Participant = inner
        self._metrics = metrics
        self._started: float | None = None
        """When this partition's transactional append (T1) ran; ``None`` outside a transaction."""

    @property
    def commit_lock(self) -> CommitLock:
        """The wrapped partition's commit lock."""
        return self._inner.commit_lock

    @property
    def pending_count(self) -> int:
        """Writes buffered since the last commit."""
        return self._inner.pending_count

    def take(self) -> dict[bytes, bytes | None]:
        """The wrapped partition's pending writes."""
        return self._inner.take()

    def forget(self, records: Records) -> None:
        """Drop the committed ``records`` from the wrapped buffer."""
        self._inner.forget(records)

    def _count(self, count: int, started: float) -> None:
        if count:
            self._metrics.commit_latency.observe(time.perf_counter() - started)
            self._metrics.commits.value += 1
            self._metrics.records_committed.value += count

    def write(self, records: Records) -> int:
        """A one-partition commit, counted and timed."""
        started = time.perf_counter()
        count = self._inner.write(records)
        self._count(count, started)
        return count

    def commit_alone(self) -> int:
        """A one-partition commit with group commit, counted and timed (lock wait included)."""
        started = time.perf_counter()
        count = self._inner.commit_alone()
        self._count(count, started)
        return count

    def append_transactional(
        self, records: Records, *, producer_id: int, producer_epoch: int
    ) -> AppendInfo:
        """T1 (starts the commit's timer)."""
        self._started = time.perf_counter()
        return self._inner.append_transactional(
            records, producer_id=producer_id, producer_epoch=producer_epoch
        )

    def apply(
        self, records: Records, applied_offset: int, *, meta: Mapping[bytes, bytes] | None = None
    ) -> None:
        """T5, then the commit is counted (timed from T1, or from here when there was none)."""
        started = time.perf_counter() if self._started is None else self._started
        self._started = None
        self._inner.apply(records, applied_offset, meta=meta)
        self._count(len(records), started)
