"""The restorer: a thread that restores new tasks' stores while running tasks keep processing.

Kafka Streams' state updater (KIP-869), for this runtime.  The processor's
thread hands a task over with :meth:`Restorer.add` (its state is then
``RESTORING``) and takes the finished ones back with :meth:`Restorer.take`;
between the two the restorer thread alone touches that task's RocksDB:

1. read the watermarks of the changelog partitions (one request per topic
   for every task added together), then open ``<state_dir>/<store>-<p>/`` of
   every store (segmented by time for window, session and versioned stores)
   on the restorer's few open threads, plan
   (:func:`~statestore.kafka.restore.plan_broker_restore`) and wipe what must
   be rebuilt there; each task's engines are touched by one open thread until
   its open is done.  Watermarks that cannot be read for a reason that may
   heal (a broker restarting, a leader moving: anything but a missing right)
   are read again every half second (the admin client's metadata of the
   changelog topics refreshed first), up to the restore timeout;
2. as soon as a task's stores are open, its partitions join the replay (the
   others are still opening meanwhile): every partition being restored is
   replayed at once with one consumer
   (:class:`~statestore.kafka.restore.RestoreSession`): no fixed wait per
   partition, WriteBatches sized by bytes;
3. when every store of the task reached its end offset, put a
   :class:`RestoredTask` (the open engines, what each restore did) on the
   done queue.  A failed restore puts the error instead, its engines closed.

:meth:`Restorer.remove` (a revoked or lost task) waits until the restorer has
stopped replaying the task and closed its engines, so the RocksDB lock is free
when it returns; a result already on the done queue is the taker's to close.

Thread-safety: :meth:`add`, :meth:`remove`, :meth:`take` and :meth:`close` are
for the processor's thread; the queues are the only state both threads touch.
The ``StateRestoreListener`` is called on the restorer thread, the one thread
that replays every task: while a callback runs, no task's restore moves (nor
does a task that was added meanwhile start), and :meth:`remove` and
:meth:`close` wait for it (up to their timeouts).  A callback must return
quickly, as in Kafka Streams.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import attrs

from statestore.config import RocksDBConfig
from statestore.kafka.config import ChangelogTopicConfig
from statestore.kafka.errors import BrokerRestoreError, KafkaClientError
from statestore.kafka.restore import (
    PartitionReplay,
    RestoreConsumer,
    RestoreSession,
    plan_broker_restore,
    stored_applied_time_ms,
    stored_topic_id,
)
from statestore.kafka.store import KafkaStoreSpec
from statestore.kafka.topics import TopicInfo, watermarks
from statestore.stores.engine import RocksDBEngine
from statestore.stores.restore import StateRestoreListener

__all__ = ["RestoredTask", "Restorer", "TaskRestored"]

logger = logging.getLogger(__name__)

_RETRY_BACKOFF_S = 0.5
"""Wait before reading a task's watermarks again after a failure that may heal."""

_OPEN_THREADS = 4
"""Store partitions opened at once (RocksDB's open waits on file syncs, so a few overlap)."""

_REMOVE_CHECK_S = 0.1
"""How often :meth:`Restorer.remove` checks, while it waits, that the restorer thread lives."""


@attrs.frozen(kw_only=True)
class TaskRestored:
    """One store partition made ready: how it was restored.  Immutable."""

    store: str
    partition: int
    rebuilt: bool
    reason: str
    start_offset: int
    end_offset: int
    records_restored: int
    seconds: float


@attrs.frozen(kw_only=True)
class RestoredTask:
    """A task the restorer is done with: its open engines and reports, or the error.

    Immutable; the engines become the taker's to use and close.
    """

    partition: int
    engines: Mapping[str, RocksDBEngine]
    reports: Sequence[TaskRestored]
    error: BaseException | None = None


class _Restoring:
    """A task being restored (restorer thread only)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.engines: dict[str, RocksDBEngine] = {}
        self.replays: dict[tuple[str, int], PartitionReplay] = {}
        self.plans: dict[str, Any] = {}
        self.left: set[tuple[str, int]] = set()
        self.started = time.perf_counter()

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close(flush=False)
        self.engines = {}


class Restorer:
    """The restorer thread and its one restore consumer (module docstring)."""

    def __init__(
        self,
        *,
        consumer: RestoreConsumer,
        close_consumer: Callable[[], None],
        admin: Any,
        state_dir: Path,
        topics: Mapping[str, TopicInfo],
        rocksdb: RocksDBConfig,
        changelog: ChangelogTopicConfig,
        batch_bytes: int,
        stall_timeout_s: float,
        listener: StateRestoreListener | None = None,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        specs: Mapping[str, KafkaStoreSpec] | None = None,
    ) -> None:
        """``specs``: the stores by name (their engine and record format; absent: key-value)."""
        self._specs = {name: (specs or {}).get(name, KafkaStoreSpec(name=name)) for name in topics}
        self._close_consumer = close_consumer
        self._admin = admin
        self._state_dir = state_dir
        self._topics = dict(topics)
        self._rocksdb = rocksdb
        self._changelog = changelog
        self._wall_clock_ms = wall_clock_ms
        self._session = RestoreSession(
            consumer,
            batch_bytes=batch_bytes,
            stall_timeout_s=stall_timeout_s,
            listener=listener,
            wall_clock_ms=wall_clock_ms,
        )
        self._commands: queue.Queue[tuple[str, int, threading.Event | None]] = queue.Queue()
        self._done: queue.Queue[RestoredTask] = queue.Queue()
        self._restoring: dict[int, _Restoring] = {}
        self._opening: dict[int, Future[list[PartitionReplay]]] = {}
        """Tasks whose stores are being opened on the pool (their ``_Restoring`` is theirs)."""
        self._pool = ThreadPoolExecutor(
            max_workers=_OPEN_THREADS, thread_name_prefix="restore-open"
        )
        self._by_replay: dict[tuple[str, int], int] = {}
        self._retry_at: dict[int, float] = {}
        """Tasks whose watermarks could not be read yet, and when to try again."""
        self._first_try: dict[int, float] = {}
        self._stall_timeout_s = stall_timeout_s
        self._thread = threading.Thread(target=self._run, name="statestore-restorer", daemon=True)
        self._crashed: BaseException | None = None
        self._closed = False

    # -- the processor's thread ----------------------------------------------------------

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def add(self, partition: int) -> None:
        """Restore task ``partition`` (its stores must not be open anywhere in this process)."""
        self._check()
        self._commands.put(("add", partition, None))

    def remove(self, partition: int, timeout_s: float = 60) -> None:
        """Stop restoring ``partition`` and close its engines; returns once they are closed.

        The restorer serves the command between two steps of its replay, so
        this waits while a ``StateRestoreListener`` callback runs (up to
        ``timeout_s``).  A restorer thread that dies meanwhile ends the wait:
        its engines are closed by :meth:`close`, its error raised by
        :meth:`take`.
        """
        if not self._thread.is_alive():
            return
        done = threading.Event()
        self._commands.put(("remove", partition, done))
        deadline = time.monotonic() + timeout_s
        while not done.wait(min(_REMOVE_CHECK_S, max(0.0, deadline - time.monotonic()))):
            if not self._thread.is_alive():
                return
            if time.monotonic() >= deadline:
                raise KafkaClientError(
                    "remove a restoring task",
                    "_TIMED_OUT",
                    f"the restorer did not answer in {timeout_s}s (busy in one step: a restore"
                    " listener callback that does not return holds it)",
                )

    def progress(self) -> tuple[int, int]:
        """``(records restored since the start, records left to restore now)`` (any thread).

        The records left are those between each restoring partition's position
        and its end offset (markers included); partitions still opening count
        once they join the replay.
        """
        return self._session.progress()

    def take(self) -> list[RestoredTask]:
        """The tasks finished (or failed) since the last call."""
        self._check()
        taken: list[RestoredTask] = []
        while True:
            try:
                taken.append(self._done.get_nowait())
            except queue.Empty:
                return taken

    def close(self, timeout_s: float = 60) -> None:
        """Stop the thread, close the engines it still holds and the consumer.  Idempotent.

        A thread still busy after ``timeout_s`` (held by a restore listener callback) is
        logged and not waited for: its engines and the consumer are closed all the same
        (their RocksDB locks released for the next owner), and the thread fails on its
        next step (a daemon thread: it does not keep the process alive).
        """
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._commands.put(("stop", -1, None))
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                logger.warning(
                    "the restorer thread did not stop in %ss (a restore listener callback that"
                    " does not return holds it): its %s restoring task(s) and the restore"
                    " consumer are closed under it, and it fails when it resumes",
                    timeout_s,
                    len(self._restoring) + len(self._opening),
                )
        self._pool.shutdown(wait=True)  # opens in flight finish; their engines are closed below
        self._opening = {}
        for restoring in self._restoring.values():
            restoring.close()
        self._restoring = {}
        for result in self.take_quietly():
            for engine in result.engines.values():
                engine.close(flush=False)
        self._close_consumer()

    def take_quietly(self) -> list[RestoredTask]:
        """:meth:`take` without the crash check (for shutdown)."""
        taken: list[RestoredTask] = []
        while True:
            try:
                taken.append(self._done.get_nowait())
            except queue.Empty:
                return taken

    def _check(self) -> None:
        if self._crashed is not None:
            raise KafkaClientError(
                "restore",
                type(self._crashed).__name__,
                f"the restorer thread died: {self._crashed}",
            ) from self._crashed

    # -- the restorer thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._serve_commands():
                self._start_retries()
                self._replay_opened()
                if self._session.active:
                    self._step()
        except BaseException as exc:
            logger.exception("the restorer thread died")
            self._crashed = exc

    def _serve_commands(self) -> bool:
        """Run the queued commands in order (block briefly when idle); False on stop."""
        adds: list[int] = []
        block = not self._session.active and not self._opening
        while True:
            try:
                kind, partition, done = (
                    self._commands.get(timeout=0.1) if block else (self._commands.get_nowait())
                )
            except queue.Empty:
                break
            block = False
            if kind == "add":
                adds.append(partition)
                continue
            if adds:
                self._start(adds)
                adds = []
            if kind == "stop":
                return False
            self._cancel(partition)
            assert done is not None
            done.set()
        if adds:
            self._start(adds)
        return True

    def _start(self, partitions: list[int]) -> None:
        """Step 1 for ``partitions``: the watermarks, then the opens on the pool."""
        now = time.monotonic()
        for p in partitions:
            self._restoring[p] = _Restoring(p)
            self._first_try.setdefault(p, now)
        try:
            marks = {
                name: watermarks(self._admin, info.name, partitions)
                for name, info in self._topics.items()
            }
        except KafkaClientError as exc:
            if _retriable(exc):
                self._refresh_metadata()
            for p in partitions:
                if _retriable(exc) and now - self._first_try[p] < self._stall_timeout_s:
                    # a broker restarting or a leader moving: metadata catches up
                    logger.info("task %s: %s; trying again", p, exc)
                    del self._restoring[p]
                    self._retry_at[p] = now + _RETRY_BACKOFF_S
                else:
                    self._fail(p, exc)
            return
        for p in partitions:
            self._opening[p] = self._pool.submit(self._open, self._restoring[p], marks)

    def _refresh_metadata(self) -> None:
        """Ask for the changelog topics' metadata: the admin client's ListOffsets goes to the
        leader (and epoch) it has cached, and after a broker restart that cache answers
        ``FENCED_LEADER_EPOCH`` until something refreshes it (measured: for 2 minutes)."""
        for info in self._topics.values():
            try:
                self._admin.list_topics(info.name, timeout=5)
            except Exception as exc:  # noqa: BLE001 - the retry reports what still fails
                logger.info("metadata of %s not refreshed: %s", info.name, exc)

    def _start_retries(self) -> None:
        """Step 1 again for the tasks whose watermarks could not be read, once their wait is over."""
        if not self._retry_at:
            return
        now = time.monotonic()
        due = sorted(p for p, at in self._retry_at.items() if at <= now)
        for p in due:
            del self._retry_at[p]
        if due:
            self._start(due)

    def _replay_opened(self) -> None:
        """Step 2 for the tasks whose stores are open: their partitions join the session.

        With nothing to replay yet, waits briefly for an open to finish.
        """
        if not self._opening:
            return
        if not self._session.active:
            wait(list(self._opening.values()), timeout=0.05, return_when=FIRST_COMPLETED)
        replays: list[PartitionReplay] = []
        for p in [p for p, future in self._opening.items() if future.done()]:
            future = self._opening.pop(p)
            try:
                opened = future.result()
            except Exception as exc:  # noqa: BLE001 - the task fails; the others go on
                self._fail(p, exc)
                continue
            for replay in opened:
                self._by_replay[replay.key] = p
            replays.extend(opened)
        if replays:
            for replay in self._session.add(replays):
                self._finished(replay)

    def _open(
        self, restoring: _Restoring, marks: Mapping[str, Mapping[int, tuple[int, int]]]
    ) -> list[PartitionReplay]:
        p = restoring.partition
        replays: list[PartitionReplay] = []
        for name, info in self._topics.items():
            path = self._state_dir / f"{name}-{p}"
            label = f"[{name}-{p}]"
            spec = self._specs[name]
            engine = spec.open_engine(path, config=self._rocksdb, label=label)
            restoring.engines[name] = engine
            low, high = marks[name][p]
            plan = plan_broker_restore(
                applied_offset=engine.applied_offset(),
                has_data=next(iter(engine.items()), None) is not None,
                stored_topic=stored_topic_id(engine),
                applied_time_ms=stored_applied_time_ms(engine),
                topic_id=info.topic_id,
                log_start_offset=low,
                high_watermark=high,
                now_ms=self._wall_clock_ms(),
                config=self._changelog,
            )
            if plan.rebuild:
                logger.warning("%s rebuilding from %s: %s", label, info.name, plan.reason)
                engine.close(flush=False)
                del restoring.engines[name]
                RocksDBEngine.destroy(path)
                engine = spec.open_engine(path, config=self._rocksdb, label=label)
                restoring.engines[name] = engine
            replay = PartitionReplay(
                store=name,
                topic=info.name,
                partition=p,
                topic_id=info.topic_id,
                engine=engine,
                start_offset=plan.start_offset,
                end_offset=high,
                record_format=spec.record_format,
                expiry_cutoff_ms=spec.expiry_cutoff_ms(self._wall_clock_ms()),
            )
            restoring.plans[name] = plan
            restoring.replays[replay.key] = replay
            restoring.left.add(replay.key)
            replays.append(replay)
        return replays

    def _step(self) -> None:
        """Step 2: one pass of the session; a broken partition fails its task only."""
        try:
            finished = self._session.step(0.05)
        except BrokerRestoreError as exc:
            p = self._by_replay.get((exc.topic, exc.partition))
            if p is None:
                raise
            self._fail(p, exc)
            return
        for replay in finished:
            self._finished(replay)

    def _finished(self, replay: PartitionReplay) -> None:
        """Step 3 once every store of the task is done."""
        self._by_replay.pop(replay.key, None)
        restoring = self._restoring.get(replay.partition)
        if restoring is None:
            return
        restoring.left.discard(replay.key)
        if restoring.left:
            return
        del self._restoring[replay.partition]
        self._first_try.pop(replay.partition, None)
        seconds = time.perf_counter() - restoring.started
        reports = [
            TaskRestored(
                store=r.store,
                partition=r.partition,
                rebuilt=restoring.plans[r.store].rebuild,
                reason=restoring.plans[r.store].reason,
                start_offset=r.start_offset,
                end_offset=r.end_offset,
                records_restored=r.restored,
                seconds=seconds,
            )
            for r in restoring.replays.values()
        ]
        self._done.put(
            RestoredTask(partition=replay.partition, engines=restoring.engines, reports=reports)
        )

    def _fail(self, partition: int, error: BaseException) -> None:
        self._first_try.pop(partition, None)
        restoring = self._restoring.pop(partition, None)
        if restoring is not None:
            self._forget(restoring)
        logger.warning("restore of task %s failed: %s", partition, error)
        self._done.put(RestoredTask(partition=partition, engines={}, reports=(), error=error))

    def _cancel(self, partition: int) -> None:
        self._retry_at.pop(partition, None)
        self._first_try.pop(partition, None)
        opening = self._opening.pop(partition, None)
        if opening is not None:
            # the open thread owns the task's engines until it is done: wait for it
            wait([opening])
        restoring = self._restoring.pop(partition, None)
        if restoring is not None:
            self._forget(restoring)
            logger.info("restore of task %s cancelled", partition)

    def _forget(self, restoring: _Restoring) -> None:
        self._session.remove(list(restoring.replays))
        for key in restoring.replays:
            self._by_replay.pop(key, None)
        restoring.close()


def _retriable(error: KafkaClientError) -> bool:
    """Whether a failure to read watermarks may heal (anything but a missing right)."""
    return "AUTHORIZATION" not in error.code and "AUTHENTICATION" not in error.code
