"""The processor runtime: a consumer group over the input topics, stores per partition, EOS.

Lifecycle of a task (partition ``p`` of every input topic and of every store):

* **assign** (librdkafka callback, inside ``consume()``): the input
  partitions are assigned and *paused* at once, and ``p`` is queued for
  restore.  Nothing slow runs in the callback.
* **restore** (the restorer's thread, :mod:`statestore.kafka.restorer`, while
  running tasks keep processing): open RocksDB ``<state_dir>/<store>-<p>/``
  for each store, plan (incremental from the stored broker offset; full when
  the offset is out of range, the topic was recreated or the state is older
  than ``delete.retention.ms``), replay the changelog partitions with one
  restore consumer; then, on the main loop, read the committed input offsets,
  **resume** the inputs (every task restored by then at once) and seek them
  to those offsets.
* **run**: each input record calls ``process(context, message)`` with the
  task's stores; writes and outputs are buffered.  Every
  ``commit_interval_ms`` (or ``commit_every_records``) one commit covers all
  tasks (:func:`statestore.kafka.commit.commit_tasks`).
* **revoke** (callback): commit everything within a third of
  ``max.poll.interval.ms``, then close the revoked tasks' RocksDB so a new
  owner (even in this process) can open it.  **lost** (callback): no commit;
  the pending work of every task is dropped (one transaction spans them
  all), the lost tasks are closed, the kept ones rewound; the records the
  same ``consume()`` call returns were fetched before that rewind and are
  dropped (the kept tasks consume them again from their committed offsets).
* A failed commit drops every buffer and seeks every input back to its last
  committed offset; a fenced producer is replaced by a new one (same
  ``transactional.id``, new epoch) before processing resumes.
* **An exception in** ``process()`` abandons the open transaction of every
  task the same way (buffers dropped, the transaction aborted, so the outputs
  already produced into it never show; inputs rewound), then the processing
  exception handler decides (:mod:`statestore.kafka.handlers`): FAIL raises
  :class:`ProcessingError` from :meth:`Processor.poll_once`; CONTINUE marks
  the record to be skipped when the replay reaches it.  Any other exception
  leaving :meth:`Processor.poll_once` abandons the transaction too, and
  ``__exit__`` or :meth:`Processor.run` leaving on an exception closes
  without committing (:meth:`Processor.abandon`).

Group protocol: ``group.protocol=consumer`` with ``group.remote.assignor=range``
(KIP-848, incremental, and co-partitioning: partition ``p`` of every input
topic goes to the same member) or ``classic`` with the eager ``range``
assignor.  The co-partitioning of the input topics is checked at start.

Thread-safety: not thread-safe; one thread calls :meth:`Processor.run` (or
:meth:`Processor.poll_once`) and :meth:`Processor.close`.  librdkafka calls the
rebalance callbacks on that thread, inside ``consume()``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import attrs

from statestore.errors import InvalidStateStoreError, UnsupportedStoreOperationError
from statestore.kafka.clients import KafkaClients
from statestore.kafka.commit import (
    CommitResult,
    FaultHook,
    OpenTransaction,
    StoreTopic,
    commit_tasks,
)
from statestore.kafka.config import ProcessorConfig
from statestore.kafka.endpoint import HostInfo, advertised_client_id
from statestore.kafka.errors import (
    FatalCommitError,
    KafkaClientError,
    ProcessingError,
    ProcessorFailedError,
    ProducerFencedError,
    RebalanceListenerError,
    TransactionAbortedError,
    UserCallbackError,
    client_error,
)
from statestore.kafka.handlers import (
    ProcessingErrorContext,
    ProcessingExceptionHandler,
    ProcessingResponse,
    dead_letter_headers,
    log_and_fail,
)
from statestore.kafka.query import InteractiveQueries, KeyQueryMetadata, QueryResult
from statestore.kafka.rates import SampledStat
from statestore.kafka.restore import RESTORE_CONSUMER_SETTINGS, applied_meta
from statestore.kafka.restorer import RestoredTask, Restorer, TaskRestored
from statestore.kafka.security import await_cluster
from statestore.kafka.standby import StandbyTasks, group_owners, standby_partitions
from statestore.kafka.store import KafkaStoreSpec, TaskStore
from statestore.kafka.tasks import Task, TaskState
from statestore.kafka.topics import (
    TopicInfo,
    changelog_topic_name,
    check_copartitioned,
    check_group_rights,
    check_topic_rights,
    ensure_changelog_topics,
    partition_counts,
)
from statestore.stores.restore import StateRestoreListener
from statestore.stores.time.ttl import TtlKeyValueStore
from statestore.stores.typed import KeyValueStore

__all__ = ["FATAL_COMMIT_CODES", "Processor", "ProcessorContext", "RebalanceEvent", "TaskRestored"]

logger = logging.getLogger(__name__)

FATAL_COMMIT_CODES: Final = frozenset(
    {
        "TOPIC_AUTHORIZATION_FAILED",
        "GROUP_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "SASL_AUTHENTICATION_FAILED",
        "_AUTHENTICATION",
        "FENCED_INSTANCE_ID",
        "_FATAL",
        "UNSUPPORTED_VERSION",
        "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        "MESSAGE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
    }
)
"""librdkafka error names of a commit failure that no retry heals: the processor stops at once."""

FENCED_CODES: Final = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})
"""The codes of a producer fenced by a newer epoch of its ``transactional.id`` (not the
``_TIMED_OUT`` of a stuck call, which the runtime reports as fenced too)."""


@attrs.frozen(kw_only=True)
class RebalanceEvent:
    """Partitions assigned to this process, revoked from it, or lost.  Immutable.

    Passed to ``on_rebalance`` on the processor's thread, inside ``poll_once``,
    after the runtime handled the change (a revoke after its commit and the
    tasks' close; an assignment before the tasks' restore).
    """

    kind: Literal["assigned", "revoked", "lost"]
    partitions: tuple[int, ...]


class ProcessorContext:
    """What ``process(context, message)`` gets: the record's stores and an output buffer.

    Valid only during the call.  Not thread-safe.
    """

    def __init__(self) -> None:
        self._task: Task | None = None
        self._stores: Mapping[str, Any] = {}
        self._transaction: OpenTransaction | None = None

    @property
    def partition(self) -> int:
        """The partition of the record being processed (and of its stores)."""
        assert self._task is not None
        return self._task.partition

    def store(self, name: str) -> Any:
        """The partition of store ``name`` that belongs to this record's partition.

        A :class:`~statestore.KeyValueStore`, or the store in time its spec names
        (:class:`~statestore.WindowStore`, ...).
        """
        return self._stores[name]

    def send(self, topic: str, key: bytes | None, value: bytes | None, partition: int = -1) -> None:
        """Produce an output record now, inside the open transaction (exactly-once: visible
        once the next commit succeeds, never if the transaction is abandoned).

        ``partition`` ``-1``: Kafka's default partitioner (murmur2, as
        ``statestore.partition_for``).  Never raises a client error: a failed
        send fails the next commit (see :class:`~statestore.kafka.commit.OpenTransaction`).
        """
        transaction = self._transaction
        assert transaction is not None
        transaction.send(topic, key, value, partition)


Process = Callable[[ProcessorContext, Any], None]
"""``process(context, message)``: user code for one input record (a confluent-kafka ``Message``)."""


class Processor:
    """Consume ``config.input_topics`` in the group ``config.application_id`` with stores per partition.

    Use as a context manager, or call :meth:`start` and :meth:`close`.  See the
    module docstring for the lifecycle; not thread-safe.
    """

    def __init__(
        self,
        config: ProcessorConfig,
        state_dir: Path,
        stores: Sequence[KafkaStoreSpec],
        process: Process,
        *,
        restore_listener: StateRestoreListener | None = None,
        on_commit: Callable[[CommitResult], None] | None = None,
        on_restored: Callable[[TaskRestored], None] | None = None,
        processing_exception_handler: ProcessingExceptionHandler = log_and_fail,
        on_rebalance: Callable[[RebalanceEvent], None] | None = None,
        fault_hook: FaultHook | None = None,
        clients: KafkaClients | None = None,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._config = config
        self._state_dir = Path(state_dir)
        self._specs = {spec.name: spec for spec in stores}
        self._process = process
        self._restore_listener = restore_listener
        self._on_commit = on_commit
        self._on_restored = on_restored
        self._fault_hook = fault_hook
        self._handler = processing_exception_handler
        self._clients = KafkaClients() if clients is None else clients
        self._on_rebalance = on_rebalance
        self._wall_clock_ms = wall_clock_ms
        self._tasks: dict[int, Task] = {}
        """Every assigned task, by partition, whatever its state."""
        self._restorer: Restorer | None = None
        self._transaction: OpenTransaction | None = None
        """The process's transaction: outputs are produced into it as they are sent."""
        self._topics: dict[str, TopicInfo] = {}
        self._partitions = 0
        self._processed_since_commit = 0
        self._last_commit = time.monotonic()
        self._consumer: Any = None
        self._producer: Any = None
        self._admin: Any = None
        self._context = ProcessorContext()
        self._standby: StandbyTasks | None = None
        self._standby_refreshed = 0.0
        self._endpoint = (
            None if config.application_server is None else HostInfo.parse(config.application_server)
        )
        self._queries = InteractiveQueries(
            key_serdes={name: spec.key_serde for name, spec in self._specs.items()},
            endpoint=self._endpoint,
            wall_clock_ms=wall_clock_ms,
        )
        self._queries_refreshed = -float("inf")
        self.commits = 0
        """Commits that succeeded."""
        self.aborted = 0
        """Commits that failed and were aborted (or fenced)."""
        self.last_commit_error: KafkaClientError | None = None
        """The error of the last failed commit (``code`` says why: fencing, timeout...)."""
        self.dropped_records = 0
        """Records skipped by the processing exception handler (CONTINUE)."""
        self.processing_errors = 0
        """Exceptions ``process()`` raised (each abandoned the open transaction)."""
        self.processed_records = 0
        """Input records processed (a record replayed after a rewind counts again)."""
        self._process_stat = SampledStat()
        self._commit_stat = SampledStat()
        self._fatal: BaseException | None = None
        self._abandoned = False
        self._rewinds = 0  # how many times every task went back to its committed offsets
        self._ever_assigned = False
        self._unreleased_until = 0.0
        self._failed_commits = 0
        self._commit_backoff_s = 0.0
        self._last_poll = time.monotonic()
        self._producer_clean_at = time.monotonic()
        """When the producer last had no transaction open on the coordinator: its
        ``init_transactions``, or a ``commit_transaction`` that returned.  A fencing less
        than ``transaction_timeout_ms`` after it cannot be the coordinator aborting a
        transaction of ours that timed out: another producer took our ``transactional.id``."""

    # -- setup -------------------------------------------------------------------------

    def _client_config(self) -> dict[str, Any]:
        """What every client gets: the bootstrap servers, ``security``, ``client_overrides``,
        then no topic created by a metadata request.

        librdkafka's producer and admin clients allow a metadata request for a missing topic
        to create it (``allow.auto.create.topics``), and a broker at Kafka's defaults
        (``auto.create.topics.enable=true``) then does, with its own defaults: an output
        topic the runtime checks, or a changelog topic whose metadata it refreshes, would
        appear unasked.  The runtime creates only changelog topics, with their settings.
        """
        return {
            "bootstrap.servers": self._config.bootstrap_servers,
            **self._config.security.client_settings(),
            **self._config.client_overrides,
            "allow.auto.create.topics": "false",
        }

    def _consumer_config(self) -> dict[str, Any]:
        config = self._config
        settings = {
            **self._client_config(),
            "group.id": config.application_id,
            # the endpoint for interactive queries travels with the membership (query.py)
            "client.id": advertised_client_id(config.instance_id, self._endpoint),
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "max.poll.interval.ms": str(config.max_poll_interval_ms),
            # librdkafka's 1 s default stalls bulk reads (docs/scale-out.md).
            "fetch.queue.backoff.ms": "10",
        }
        if config.static_membership:
            settings["group.instance.id"] = config.instance_id
        if config.group_protocol == "consumer":
            settings["group.protocol"] = "consumer"
            settings["group.remote.assignor"] = "range"
        else:
            settings["partition.assignment.strategy"] = "range"
            settings["session.timeout.ms"] = str(config.session_timeout_ms)
            settings["heartbeat.interval.ms"] = str(max(1000, config.session_timeout_ms // 4))
        settings.update(config.consumer_overrides)
        return settings

    def _producer_config(self) -> dict[str, Any]:
        config = self._config
        settings = {
            **self._client_config(),
            "enable.idempotence": "true",
            "acks": "all",
            "linger.ms": "5",
            # The Java client's 100 ms -> 20 ms lesson: CONCURRENT_TRANSACTIONS retries.
            "retry.backoff.ms": "10",
            # Java-compatible key partitioning for outputs (statestore.partition_for).
            "partitioner": "murmur2_random",
        }
        if config.processing_guarantee == "exactly_once_v2":
            settings["transactional.id"] = config.transactional_id
            settings["transaction.timeout.ms"] = str(config.transaction_timeout_ms)
        settings.update(config.producer_overrides)
        return settings

    def _new_producer(self) -> Any:
        producer = self._clients.producer(self._producer_config())
        if self._config.processing_guarantee == "exactly_once_v2":
            try:
                producer.init_transactions(self._config.transaction_timeout_ms / 1000 * 3)
            except Exception as exc:
                error: Any = exc.args[0] if exc.args else None
                if hasattr(error, "name") and hasattr(error, "str"):  # a librdkafka KafkaError
                    raise client_error("init_transactions", error.name(), error.str()) from exc
                raise KafkaClientError("init_transactions", type(exc).__name__, str(exc)) from exc
        return producer

    def start(self) -> None:
        """Check every topic, then create the missing changelog topics, then join the group.

        The input topics must be co-partitioned, the output topics and the dead
        letter topic must exist, existing changelog topics must fit: any of
        these refuses the start before a topic is created.
        """
        config = self._config
        self._state_dir.mkdir(parents=True, exist_ok=True)
        await_cluster(self._clients, self._client_config())  # a TLS or SASL refusal: at once
        self._admin = self._clients.admin(self._client_config())
        self._partitions = check_copartitioned(self._admin, config.input_topics)
        sinks = [*config.output_topics]
        if config.dead_letter_queue_topic is not None:
            sinks.append(config.dead_letter_queue_topic)
        if sinks:
            partition_counts(self._admin, sinks)  # the runtime never creates them
        names = {name: changelog_topic_name(config.application_id, name) for name in self._specs}
        # Read and write rights now, not at the first commit or restore (a broker without
        # an authorizer reports every operation as allowed).
        visible = set(self._admin.list_topics(timeout=30).topics)
        rights: dict[str, tuple[str, ...]] = dict.fromkeys(config.input_topics, ("read",))
        rights.update(dict.fromkeys(sinks, ("write",)))
        rights.update({t: ("read", "write") for t in names.values() if t in visible})
        check_topic_rights(self._admin, rights)
        check_group_rights(self._admin, config.application_id)
        infos = ensure_changelog_topics(
            self._admin,
            list(names.values()),
            partitions=self._partitions,
            config=config.changelog,
            times={names[name]: spec.time for name, spec in self._specs.items()},
        )
        self._topics = {name: infos[topic] for name, topic in names.items()}
        self._producer = self._new_producer()
        self._producer_clean_at = time.monotonic()
        self._transaction = OpenTransaction(
            self._producer,
            guarantee=config.processing_guarantee,
            known_topics=sinks,
            send_timeout_s=config.transaction_timeout_ms / 1000 * 0.8,
        )
        self._context._transaction = self._transaction
        restore_consumer = self._clients.consumer(
            {
                **self._client_config(),
                "group.id": f"{config.application_id}-restore",
                **RESTORE_CONSUMER_SETTINGS,
                **config.consumer_overrides,
            }
        )
        self._restorer = Restorer(
            consumer=restore_consumer,
            close_consumer=restore_consumer.close,
            admin=self._admin,
            state_dir=self._state_dir,
            topics=self._topics,
            rocksdb=config.rocksdb,
            changelog=config.changelog,
            batch_bytes=config.restore_batch_bytes,
            stall_timeout_s=config.restore_timeout_ms / 1000,
            listener=self._restore_listener,
            wall_clock_ms=self._wall_clock_ms,
            specs=self._specs,
        )
        self._restorer.start()
        if config.num_standby_replicas > 0 or config.warmup_before_join:
            self._standby = StandbyTasks(
                consumer=self._clients.consumer(
                    {
                        **self._client_config(),
                        "group.id": f"{config.application_id}-standby",
                        "enable.auto.commit": "false",
                        "auto.offset.reset": "earliest",
                        "isolation.level": "read_committed",
                        "fetch.queue.backoff.ms": "10",
                        **config.consumer_overrides,
                    }
                ),
                admin=self._admin,
                state_dir=self._state_dir,
                topics=self._topics,
                rocksdb=config.rocksdb,
                changelog=config.changelog,
                wall_clock_ms=self._wall_clock_ms,
                specs=self._specs,
            )
        if config.warmup_before_join:
            self._warm_up()
        self._join()
        self._unreleased_until = time.monotonic() + config.static_rejoin_timeout_ms / 1000
        logger.info(
            "processor %s (%s) started: %s partitions of %s, %s",
            config.application_id,
            config.instance_id,
            self._partitions,
            ",".join(config.input_topics),
            config.processing_guarantee,
        )

    def _warm_up(self) -> None:
        """Before joining: standbys of every partition until each is within
        ``acceptable_recovery_lag`` of its changelog's end, or ``warmup_timeout_ms``.

        On the caller's thread, before the member exists (no poll interval to keep).  The
        partitions the group then assigns here restore incrementally from these copies; the
        others are closed by the standby placement once this member has its first assignment.
        """
        assert self._standby is not None
        config = self._config
        partitions = set(range(self._partitions))
        self._standby.refresh(partitions)
        started = time.monotonic()
        deadline = started + config.warmup_timeout_ms / 1000
        while True:
            self._standby.poll(timeout_s=0.1)
            lags = [self._standby.lag(name, p) for name in self._specs for p in partitions]
            if all(lag is not None and lag <= config.acceptable_recovery_lag for lag in lags):
                logger.info(
                    "warm-up done in %.1fs: %s partitions within %s of their changelogs' end",
                    time.monotonic() - started,
                    len(partitions),
                    config.acceptable_recovery_lag,
                )
                return
            if time.monotonic() >= deadline:
                logger.warning(
                    "warm-up not done after %.0fs (lags %s): joining anyway",
                    time.monotonic() - started,
                    lags,
                )
                return

    def _join(self) -> None:
        """A new main consumer, subscribed (at start, and after an unreleased static id)."""
        self._consumer = self._clients.consumer(self._consumer_config())
        self._consumer.subscribe(
            list(self._config.input_topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def _rejoin_if_unreleased(self, error: Any) -> bool:
        """Join again if the broker still holds our static ``instance_id`` for a dead process.

        After a ``kill -9`` the broker keeps a static member until its session
        timeout, and refuses a new member with the same ``group.instance.id``
        (UNRELEASED_INSTANCE_ID, a fatal consumer error in librdkafka).  Before
        its first assignment, for ``static_rejoin_timeout_ms``, the processor
        starts a new consumer once a second instead of stopping; a process
        that still holds the id after that is a real duplicate.
        """
        if (
            not self._config.static_membership
            or self._ever_assigned
            or "instance ID is still used" not in error.str()
            or time.monotonic() >= self._unreleased_until
        ):
            return False
        logger.warning(
            "static instance %s not released yet: joining again", self._config.instance_id
        )
        self._consumer.close()
        time.sleep(1.0)  # not a member yet: no poll interval to keep
        self._join()
        return True

    def __enter__(self) -> Processor:
        self.start()
        return self

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abandon_keeping_the_cause()

    def _abandon_keeping_the_cause(self) -> None:
        """:meth:`abandon` while an exception is leaving: a failure of the close itself is
        logged, so the exception that ended the work is the one the caller sees."""
        try:
            self.abandon()
        except Exception:
            logger.exception("closing after an error failed too (the first error is raised)")

    # -- rebalance callbacks (inside consume()) ------------------------------------------

    @property
    def _incremental(self) -> bool:
        return self._config.group_protocol == "consumer"

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        if self._incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
            self._ever_assigned = True
        for tp in partitions:
            task = self._tasks.get(tp.partition)
            if task is None:
                self._tasks[tp.partition] = Task(tp.partition, [tp])
            elif task.state is TaskState.CREATED:
                task.inputs.append(tp)
        assigned = sorted({tp.partition for tp in partitions})
        logger.info("assigned %s", assigned)
        self._notify(RebalanceEvent(kind="assigned", partitions=tuple(assigned)))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        revoked = sorted({tp.partition for tp in partitions})
        if self._may_commit:
            logger.info("revoked %s: committing", revoked)
            deadline_s = self._config.max_poll_interval_ms / 3000
            self._commit(timeout_s=deadline_s, swallow=True)
        else:
            logger.info("revoked %s: not committing (the processor stopped)", revoked)
            self._rewind_all()
        self._close_tasks(revoked, caught_up=self._may_commit)
        if self._incremental:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        self._notify(RebalanceEvent(kind="revoked", partitions=tuple(revoked)))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        lost = sorted({tp.partition for tp in partitions})
        logger.warning("lost %s: closing without commit", lost)
        self._drop_all()
        self._close_tasks(lost, caught_up=False)
        self._rewind_all()
        if self._incremental:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        self._notify(RebalanceEvent(kind="lost", partitions=tuple(lost)))

    def _notify(self, event: RebalanceEvent) -> None:
        if self._on_rebalance is not None and event.partitions:
            try:
                self._on_rebalance(event)
            except Exception as exc:
                raise RebalanceListenerError(event.kind, event.partitions, exc) from exc

    def _close_tasks(
        self, partitions: Sequence[int], *, caught_up: bool, closing: bool = False
    ) -> None:
        """Suspend and close the tasks of ``partitions``; ``caught_up``: stamp the applied time.

        A restoring task is taken back from the restorer first (its engines
        closed there).  After a revoke or a clean close every committed record
        of a running task's partition is in RocksDB (this process was its only
        writer since its restore), so the state is current *now*: stamping it
        keeps a quick restart from being taken for stale.  A lost partition
        may have had another writer: no stamp.

        ``closing`` (the processor's close): a restorer that does not give a
        task back in time (a restore listener callback holding its thread) or
        that crashed is logged, not raised, so that every other task and
        client is still closed.
        """
        now_ms = self._wall_clock_ms()
        cancelled = False
        for p in partitions:
            task = self._tasks.pop(p, None)
            if task is None:
                continue
            was = task.state
            task.move(TaskState.SUSPENDED)
            if was is TaskState.RESTORING and self._restorer is not None:
                cancelled = True
                try:
                    self._restorer.remove(p)
                except KafkaClientError as exc:
                    if not closing:
                        raise
                    logger.warning("closing restoring task %s: %s", p, exc)
            if was is TaskState.RUNNING and caught_up:
                for name, store in task.stores.items():
                    store.drop_pending()
                    store.apply(
                        store.applied_offset, applied_meta(self._topics[name].topic_id, now_ms)
                    )
            task.close()
        if cancelled and closing:
            assert self._restorer is not None
            for result in self._restorer.take_quietly():  # every task is closed: close them all
                for engine in result.engines.values():
                    engine.close(flush=False)
        elif cancelled:
            self._take_restored()  # a result that was already on its way: closed there

    # -- restore -------------------------------------------------------------------------

    def _start_restores(self) -> None:
        """Hand every CREATED task to the restorer (CREATED -> RESTORING)."""
        assert self._restorer is not None
        for task in self._tasks.values():
            if task.state is TaskState.CREATED:
                if self._standby is not None:
                    # its RocksDB becomes the active one: only the tail replays
                    self._standby.release(task.partition)
                task.move(TaskState.RESTORING)
                self._restorer.add(task.partition)

    def _take_restored(self) -> None:
        """Run the tasks the restorer finished (RESTORING -> RUNNING); raise a failed restore.

        A failed task goes back to the restorer (RESTORING -> SUSPENDED ->
        RESTORING) and the first error is raised once every result is handled.
        A result for a task that is no longer restoring (revoked meanwhile) is
        closed.
        """
        if self._restorer is None:
            return
        failed: BaseException | None = None
        ready: list[tuple[Task, RestoredTask]] = []
        for result in self._restorer.take():
            task = self._tasks.get(result.partition)
            if task is None or task.state is not TaskState.RESTORING:
                for engine in result.engines.values():
                    engine.close(flush=False)
                continue
            if result.error is not None:
                self._restore_again(task)
                failed = failed or result.error
                continue
            ready.append((task, result))
        if ready:
            self._run_tasks(ready)
        if failed is not None:
            raise failed

    def _restore_again(self, task: Task) -> None:
        """A task whose restore failed goes back to the restorer (RESTORING -> SUSPENDED ->
        RESTORING)."""
        assert self._restorer is not None
        task.move(TaskState.SUSPENDED)
        task.move(TaskState.RESTORING)
        self._restorer.add(task.partition)

    def _run_tasks(self, ready: list[tuple[Task, RestoredTask]]) -> None:
        """Wrap the restored engines, read the committed offsets, resume the inputs.

        All of ``ready`` at once: one read of the committed offsets, and one
        ``resume`` so that the first fetch asks for every partition (resumed
        one by one, the first partition's fetch reaches its end and waits
        there for ``fetch.wait.max.ms``, 500 ms, before the next partition is
        fetched); then each input is sought to its committed offset (after the
        resume: librdkafka holds a partition sought while paused for
        ``fetch.error.backoff.ms``, 500 ms, before its first fetch).  If the
        offsets cannot be read, the stores are closed and the tasks restored
        again.
        """
        stores = {task.partition: self._task_stores(task, result) for task, result in ready}
        inputs = [tp for task, _result in ready for tp in task.inputs]
        try:
            committed = self._committed_offsets(inputs)
        except BaseException:
            for task, _result in ready:
                for store in stores[task.partition].values():
                    store.close(flush=False)
                self._restore_again(task)
            raise
        for task, _result in ready:
            task.run(
                stores[task.partition],
                {tp.topic: committed[(tp.topic, tp.partition)] for tp in task.inputs},
            )
        self._consumer.resume(inputs)
        for tp in inputs:
            self._seek(tp.topic, tp.partition, committed[(tp.topic, tp.partition)])
        if self._on_restored is not None:
            failed: tuple[TaskRestored, Exception] | None = None
            for _task, result in ready:
                for report in result.reports:  # every report, whatever an earlier one raised
                    try:
                        self._on_restored(report)
                    except Exception as exc:  # noqa: BLE001 - the first is raised below
                        failed = failed or (report, exc)
            if failed is not None:
                which, error = failed
                raise UserCallbackError(
                    "on_restored",
                    f"raised on {which.store}-{which.partition} (its task runs):"
                    f" {type(error).__name__}: {error}",
                ) from error

    def _task_stores(self, task: Task, result: RestoredTask) -> dict[str, TaskStore[Any, Any]]:
        """The runtime's stack over each restored engine of ``task``."""
        return {
            name: TaskStore(
                name=name,
                partition=task.partition,
                engine=engine,
                key_serde=self._specs[name].key_serde,
                value_serde=self._specs[name].value_serde,
                max_record_bytes=self._specs[name].max_record_bytes,
                time_settings=self._specs[name].time,
                now_ms=self._wall_clock_ms,
                record_cache_max_entries=self._specs[name].record_cache_max_entries,
            )
            for name, engine in result.engines.items()
        }

    def _committed_offsets(self, tps: list[Any]) -> dict[tuple[str, int], int]:
        """The committed offsets of input partitions ``tps``, by (topic, partition) (stable
        ones: a pending transaction is waited for)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition  # noqa: PLC0415

        deadline = time.monotonic() + self._config.restore_timeout_ms / 1000
        query = [TopicPartition(tp.topic, tp.partition) for tp in tps]
        while True:
            try:
                found = self._consumer.committed(query, timeout=10)
                break
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise KafkaClientError(
                        "fetch committed offsets", "_TIMED_OUT", str(exc)
                    ) from exc
                logger.info("committed offsets not available yet (%s), retrying", exc)
                time.sleep(0.2)
        return {
            (tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
            for tp in found
        }

    def _seek(self, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        try:
            self._consumer.seek(TopicPartition(topic, partition, offset))
        except Exception as exc:  # noqa: BLE001 - a seek before the first fetch is refused
            logger.debug("seek %s-%s to %s: %s", topic, partition, offset, exc)

    # -- processing ------------------------------------------------------------------------

    def poll_once(self, timeout_s: float = 0.2) -> int:
        """One turn of the loop: consume, restore new tasks, process, commit when due.

        Returns the number of input records processed.  Raises
        :class:`ProcessingError` when ``process()`` raised and the handler said
        FAIL; whatever leaves this method, the open transaction of every task
        was abandoned first (buffers dropped, inputs rewound to the committed
        offsets), so a caller that catches the error and polls again loses
        nothing and applies nothing twice.
        """
        self._check_usable("poll_once")
        try:
            return self._poll(timeout_s)
        except BaseException:
            self._rewind_all()
            raise

    def _check_usable(self, operation: str) -> None:
        if self._fatal is not None:
            raise ProcessorFailedError(operation, self._fatal)

    def _poll(self, timeout_s: float) -> int:
        rewinds = self._rewinds
        messages = self._consumer.consume(self._config.poll_records, timeout=timeout_s)
        self._last_poll = time.monotonic()
        if self._rewinds != rewinds:
            # A rebalance callback inside consume() rewound every task (a lost partition,
            # a revocation whose commit failed): what the call gathered was fetched before
            # that seek, and may lie past the committed offsets the tasks now replay from.
            # Processed, it would move a position past records that are then skipped as
            # fetched before a rewind: their inputs committed, their outputs never sent.
            messages = []
        self._start_restores()
        self._take_restored()
        processed = 0
        context = self._context
        process = self._process
        # no task changes state until the next consume() (the rebalance callbacks run there)
        running = {p: task for p, task in self._tasks.items() if task.state is TaskState.RUNNING}
        current: Task | None = None
        for message in messages:
            error = message.error()
            if error is not None:
                if error.name() == "_FATAL" and self._rejoin_if_unreleased(error):
                    return processed
                if error.fatal() or error.name() == "_FATAL":
                    self._fatal = KafkaClientError("consume", error.name(), error.str())
                    raise self._fatal
                logger.warning("consume: %s", error)
                continue
            task = running.get(message.partition())
            if task is None:
                continue  # revoked or lost within this consume() call
            topic = message.topic()
            offset = message.offset()
            positions = task.positions
            if offset < positions.get(topic, 0):
                continue  # fetched before a rewind
            if task.skip and (topic, offset) in task.skip:
                self._skip(task.skip[(topic, offset)])
            else:
                if task is not current:
                    current = context._task = task
                    context._stores = task.user_stores
                try:
                    process(context, message)
                except Exception as exc:  # noqa: BLE001 - user code: the handler decides
                    self._handle_processing_error(task, message, exc)
                    return processed
            positions[topic] = offset + 1
            processed += 1
        self._processed_since_commit += processed
        self.processed_records += processed
        if processed:
            self._process_stat.record(processed, processed)
        if self._standby is not None:
            self._tend_standbys()
        self._tend_queries()
        since_s = time.monotonic() - self._last_commit
        due = since_s * 1000 >= self._config.commit_interval_ms
        if (
            due or self._processed_since_commit >= self._config.commit_every_records
        ) and since_s >= self._commit_backoff_s:
            self._commit(timeout_s=self._config.transaction_timeout_ms / 1000 * 0.8, swallow=True)
        return processed

    def _handle_processing_error(self, task: Task, message: Any, exc: Exception) -> None:
        """Abandon the open transaction of every task, then do what the handler says."""
        self.processing_errors += 1
        self._rewind_all()
        self._processed_since_commit = 0
        error = ProcessingErrorContext(
            topic=message.topic(),
            partition=task.partition,
            offset=message.offset(),
            key=message.key(),
            value=message.value(),
            exception=exc,
        )
        where = f"{error.topic}-{error.partition}@{error.offset}"
        try:
            response = self._handler(error)
        except Exception as raised:
            raise UserCallbackError(
                "processing_exception_handler",
                f"raised on {where}: {type(raised).__name__}: {raised}",
            ) from raised
        if response is ProcessingResponse.CONTINUE:
            self.dropped_records += 1
            task.skip[(error.topic, error.offset)] = error
            return
        if response is not ProcessingResponse.FAIL:
            raise UserCallbackError(
                "processing_exception_handler",
                f"returned {response!r} on {where}, not a ProcessingResponse",
            ) from exc
        raise ProcessingError(error.topic, error.partition, error.offset, exc) from exc

    def _skip(self, error: ProcessingErrorContext) -> None:
        """The replay reached a record the handler skipped: dead-letter it (if configured)."""
        topic = self._config.dead_letter_queue_topic
        if topic is not None:
            assert self._transaction is not None
            self._transaction.send(
                topic, error.key, error.value, headers=dead_letter_headers(error)
            )

    def run(self, stop: Callable[[], bool]) -> None:
        """Loop :meth:`poll_once` until ``stop()`` is true, then :meth:`close`.

        An exception (a :class:`ProcessingError` included) ends the loop: the
        processor is closed without committing (:meth:`abandon`) and the
        exception raised.
        """
        try:
            while not stop():
                self.poll_once()
        except BaseException:
            self._abandon_keeping_the_cause()
            raise
        self.close()

    # -- commit ----------------------------------------------------------------------------

    def _pending_offsets(self) -> list[Any]:
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        offsets = []
        for task in self._running():
            for topic, position in task.positions.items():
                if position >= 0 and position != task.committed.get(topic):
                    offsets.append(TopicPartition(topic, task.partition, position))
        return offsets

    def commit(self) -> CommitResult | None:
        """Commit now (``None``: nothing to commit).  Raises on a failed commit."""
        return self._commit(
            timeout_s=self._config.transaction_timeout_ms / 1000 * 0.8, swallow=False
        )

    def _commit(self, *, timeout_s: float, swallow: bool) -> CommitResult | None:
        """Commit every task; on failure drop, rewind and count (see :meth:`_commit_failed`).

        ``swallow``: a failure that may heal is logged and retried at the next
        due commit (after a backoff); one that will not, or ``commit_attempts``
        failures in a row, raise :class:`FatalCommitError`.  Without
        ``swallow`` every failure raises.
        """
        self._last_commit = time.monotonic()
        self._processed_since_commit = 0
        for task in self._running():  # TTL stores: expired keys' tombstones join this transaction
            for task_store in task.stores.values():
                top = task_store.store
                if isinstance(top, TtlKeyValueStore) and top.sweep_due():
                    top.expire()
        offsets = self._pending_offsets()
        stores = [
            StoreTopic(
                store=store, topic=self._topics[name].name, topic_id=self._topics[name].topic_id
            )
            for task in self._running()
            for name, store in task.stores.items()
        ]
        transaction = self._transaction
        assert transaction is not None
        if (
            not offsets
            and not transaction.sent
            and transaction.failure is None
            and not any(s.store.participant.pending_count for s in stores)
        ):
            return None
        try:
            result = commit_tasks(
                transaction,
                stores=stores,
                offsets=offsets,
                group_metadata=self._group_metadata,
                commit_offsets=lambda tps: self._consumer.commit(offsets=tps, asynchronous=False),
                timeout_s=timeout_s,
                wall_clock_ms=self._wall_clock_ms,
                fault_hook=self._fault_hook,
                stuck_grace_s=self._config.stuck_call_grace_ms / 1000,
                outcome_wait_s=self._config.transaction_timeout_ms / 1000,
            )
        except KafkaClientError as exc:
            self._commit_failed(exc, swallow=swallow)
            return None
        self._failed_commits = 0
        self._commit_backoff_s = 0.0
        self._producer_clean_at = time.monotonic()
        for task in self._running():
            task.committed = dict(task.positions)
            if task.skip:
                task.skip = {
                    (topic, offset): error
                    for (topic, offset), error in task.skip.items()
                    if offset >= task.committed.get(topic, 0)
                }
        self.commits += 1
        self._commit_stat.record(result.seconds * 1000)
        if self._on_commit is not None:
            try:
                self._on_commit(result)
            except Exception as exc:
                raise UserCallbackError(
                    "on_commit",
                    f"raised after a commit that stays committed: {type(exc).__name__}: {exc}",
                ) from exc
        return result

    def _commit_failed(self, exc: KafkaClientError, *, swallow: bool) -> None:
        """Drop, rewind, count; replace a fenced producer; stop on a failure that will not heal."""
        self.aborted += 1
        self._failed_commits += 1
        self.last_commit_error = exc
        self._drop_all()
        self._rewind_all()
        attempts = self._config.commit_attempts
        fatal = exc.code in FATAL_COMMIT_CODES or self._failed_commits >= attempts
        reason = exc.reason
        if self._fenced_by_another_process(exc):
            fatal = True
            reason = (
                f"{reason}; fenced {self._since_clean_ms():.0f} ms after this producer's last"
                f" commit or start, within transaction.timeout.ms"
                f" ({self._config.transaction_timeout_ms}), so not for a transaction of its own"
                f" that timed out: another process runs with instance_id"
                f" {self._config.instance_id!r} (transactional.id"
                f" {self._config.transactional_id!r})"
            )
        logger.warning(
            "commit failed (%s of %s in a row%s), inputs rewound: %s",
            self._failed_commits,
            attempts,
            ", will not heal" if fatal else "",
            exc,
        )
        if not fatal and isinstance(exc, ProducerFencedError):
            try:
                self._replace_producer()
            except KafkaClientError as replaced:
                exc, reason, fatal = replaced, replaced.reason, True
        if fatal:
            self._fatal = FatalCommitError(exc.operation, exc.code, reason, self._failed_commits)
            raise self._fatal from exc
        base_s = self._config.commit_retry_backoff_ms / 1000
        self._commit_backoff_s = min(
            base_s * 2 ** (self._failed_commits - 1),
            self._config.commit_retry_backoff_max_ms / 1000,
        )
        if not swallow:
            raise exc

    def _since_clean_ms(self) -> float:
        return (time.monotonic() - self._producer_clean_at) * 1000

    def _fenced_by_another_process(self, exc: KafkaClientError) -> bool:
        """Whether ``exc`` fenced the producer although none of its transactions can have
        timed out: a newer producer with the same ``transactional.id`` (the same
        ``instance_id``) started, so this process is the duplicate or the zombie."""
        return (
            isinstance(exc, ProducerFencedError)
            and exc.code in FENCED_CODES
            and self._since_clean_ms() < self._config.transaction_timeout_ms
        )

    def _group_metadata(self) -> Any:
        """The consumer's group metadata for step 4 of the commit, unless the member has left.

        librdkafka leaves the group when ``max.poll.interval.ms`` passes without a
        poll, and the metadata it reports then carries no member epoch, which
        the broker does not fence.  A commit that reaches this step that late
        (a stalled process) is therefore refused here, as Kafka Streams refuses
        it with ``TaskMigratedException``.
        """
        stalled_ms = (time.monotonic() - self._last_poll) * 1000
        if stalled_ms >= self._config.max_poll_interval_ms:
            raise TransactionAbortedError(
                "send_offsets_to_transaction",
                "MEMBER_LEFT_GROUP",
                f"{stalled_ms:.0f} ms since the last poll exceeds max.poll.interval.ms"
                f" ({self._config.max_poll_interval_ms}): the group has moved on",
            )
        return self._consumer.consumer_group_metadata()

    def _tend_standbys(self) -> None:
        """Re-place the standbys from the group membership now and then; apply their changelogs."""
        assert self._standby is not None
        now = time.monotonic()
        # a warm-up's copies of every partition wait for the first assignment
        warming = self._config.warmup_before_join and not self._ever_assigned
        if (
            not warming
            and (now - self._standby_refreshed) * 1000 >= self._config.standby_refresh_ms
        ):
            self._standby_refreshed = now
            try:
                owners = group_owners(
                    self._admin, self._config.application_id, self._config.input_topics[0]
                )
            except Exception as exc:  # noqa: BLE001 - placement is best effort; retried next time
                logger.info("standby placement skipped: %s", exc)
            else:
                wanted = standby_partitions(
                    owners, self._consumer.memberid() or "", self._config.num_standby_replicas
                )
                self._standby.refresh(wanted - set(self._tasks))
        self._standby.poll()

    def _tend_queries(self) -> None:
        """Refresh the query metadata now and then (never waiting for the broker); publish the
        running and standby partitions' readers."""
        now = time.monotonic()
        ask = (now - self._queries_refreshed) * 1000 >= self._config.query_metadata_refresh_ms
        if ask:
            self._queries_refreshed = now
        self._queries.tend(
            self._admin,
            ask=ask,
            group=self._config.application_id,
            topic=self._config.input_topics[0],
            partitions=self._partitions,
            replicas=self._config.num_standby_replicas,
            changelogs={name: info.name for name, info in self._topics.items()},
            standbys=self._standby,
        )
        active: dict[str, dict[int, Any]] = {}
        for name, spec in self._specs.items():
            if spec.time is not None:  # stores in time are read through stores(name)
                continue
            readers = active[name] = {}
            for task in self._running():
                try:
                    readers[task.partition] = task.stores[name].store.reader()
                except InvalidStateStoreError:  # a failed store answers no query
                    continue
        self._queries.refresh_local(
            active, self._standby, {name: spec.value_serde for name, spec in self._specs.items()}
        )

    def metadata_for_key(
        self, store: str, key: Any, partitioner: Callable[[bytes, int], int] | None = None
    ) -> KeyQueryMetadata:
        """The active owner and the standbys of ``key`` of ``store`` (Kafka Streams'
        ``queryMetadataForKey``), from the last group description.  Thread-safe.

        ``partitioner(serialized key, partitions)``: when the inputs were not
        partitioned by Kafka's default partitioner over the store's key.
        :class:`~statestore.kafka.errors.NotOwnerError` before the first
        description; see :mod:`statestore.kafka.query` for how stale it may be.
        """
        return self._queries.metadata_for_key(store, key, partitioner)

    def metadata_for_partition(self, store: str, partition: int) -> KeyQueryMetadata:
        """The active owner and the standbys of ``partition`` of ``store``.  Thread-safe."""
        return self._queries.metadata_for_partition(store, partition)

    def local_partitions(self, store: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(active, standby)`` partitions of ``store`` that :meth:`query` answers here, as of
        the last poll.  Thread-safe."""
        return self._queries.local_partitions(store)

    def query(
        self,
        store: str,
        key: Any,
        *,
        max_lag_records: int | None = None,
        max_staleness_ms: int | None = None,
        partitioner: Callable[[bytes, int], int] | None = None,
    ) -> QueryResult[Any]:
        """Read ``key`` of ``store`` here if this process may answer for it.  Thread-safe.

        The active owner answers from its committed state; a standby only
        within the caller's bound; otherwise
        :class:`~statestore.kafka.errors.NotOwnerError` names the owner
        (:meth:`statestore.kafka.query.InteractiveQueries.get`).  A store in
        time is not read by key here (its keys are windows, sessions or versions):
        :class:`~statestore.errors.UnsupportedStoreOperationError`.
        """
        spec = self._specs.get(store)
        if spec is not None and spec.time is not None:
            raise UnsupportedStoreOperationError(
                store, "query", "a store in time is read through processor.stores(name)"
            )
        return self._queries.get(
            store,
            key,
            max_lag_records=max_lag_records,
            max_staleness_ms=max_staleness_ms,
            partitioner=partitioner,
        )

    @property
    def standby_partitions(self) -> list[int]:
        """Partitions whose standby replicas this process keeps, sorted."""
        return [] if self._standby is None else sorted(self._standby.partitions)

    def standby_lag(self) -> dict[int, dict[str, int | None]]:
        """``partition -> store -> records`` each standby is behind its changelog's end.

        The changelog end is the high watermark the standby consumer last
        fetched (``None`` until its first fetch); 0 means caught up.  Between
        polls, on the processor's thread.
        """
        if self._standby is None:
            return {}
        return {
            p: {name: self._standby.lag(name, p) for name in self._specs}
            for p in sorted(self._standby.partitions)
        }

    def metrics(self) -> dict[str, Any]:
        """A snapshot of the runtime's metrics, Kafka Streams' names where it has one.

        ``commit-total`` / ``commit-failed-total`` (commits that succeeded /
        failed), ``process-total`` (input records processed; a record replayed
        after a rewind counts again), ``processing-errors-total`` (exceptions ``process()``
        raised), ``dropped-records-total`` (records the handler skipped),
        ``task-states`` (partition -> state) and ``standby-lag`` (as
        :meth:`standby_lag`); over Kafka's sample windows (2 x 30 s,
        :mod:`statestore.kafka.rates`): ``process-rate`` (records a second),
        ``commit-rate`` (commits a second), ``commit-latency-avg`` /
        ``commit-latency-max`` (ms, successful commits); the restore's progress
        (KIP-869's names): ``restore-total`` (changelog records restored since
        the start) and ``restore-remaining-records-total`` (records between the
        restoring partitions' positions and their end offsets).  Any thread (a
        Prometheus scrape, :class:`statestore.metrics.prometheus.ProcessorCollector`):
        it reads counters, locked stats and copies; a read racing with
        :meth:`close` may raise.
        """
        restored, remaining = (0, 0) if self._restorer is None else self._restorer.progress()
        return {
            "commit-total": self.commits,
            "commit-failed-total": self.aborted,
            "commit-rate": self._commit_stat.rate(),
            "commit-latency-avg": self._commit_stat.avg(),
            "commit-latency-max": self._commit_stat.max(),
            "process-total": self.processed_records,
            "process-rate": self._process_stat.rate(),
            "restore-total": restored,
            "restore-remaining-records-total": remaining,
            "processing-errors-total": self.processing_errors,
            "dropped-records-total": self.dropped_records,
            "task-states": {p: state.value for p, state in self.tasks.items()},
            "standby-lag": self.standby_lag(),
        }

    def _drop_all(self) -> None:
        """Abandon the open transaction (aborted: its outputs never show) and every buffer."""
        if self._transaction is not None:
            self._transaction.abandon(self._config.transaction_timeout_ms / 1000)
        for task in self._running():
            for store in task.stores.values():
                store.drop_pending()

    def _rewind_all(self) -> None:
        self._rewinds += 1
        self._drop_all()
        for task in self._running():
            task.positions = dict(task.committed)
            for topic, offset in task.committed.items():
                self._seek(topic, task.partition, offset)

    def _replace_producer(self) -> None:
        logger.warning("producer fenced: starting a new one (%s)", self._config.transactional_id)
        old, self._producer = self._producer, None
        del old
        self._producer = self._new_producer()
        self._producer_clean_at = time.monotonic()
        assert self._transaction is not None
        assert not self._transaction.open
        self._transaction.producer = self._producer

    # -- shutdown --------------------------------------------------------------------------

    def close(self) -> None:
        """Commit what is pending, leave the group (revoke commits again) and close every task.

        After an exception left :meth:`poll_once` nothing of the failing
        transaction is pending any more (it was abandoned); after a fatal
        error (:class:`ProcessorFailedError`) or :meth:`abandon` nothing is
        committed at all.
        """
        self._close(commit=self._may_commit)

    def abandon(self) -> None:
        """Close without committing anything: buffers dropped, no offsets sent.

        What ``__exit__`` does when the ``with`` block raised, and what
        :meth:`run` does when it ends on an exception.  Idempotent.
        """
        self._abandoned = True
        self._rewind_all()
        self._close(commit=False)

    @property
    def _may_commit(self) -> bool:
        return self._fatal is None and not self._abandoned

    def _close(self, *, commit: bool) -> None:
        """Commit (if ``commit``), leave the group, close tasks and clients; raise the commit's
        error (if it failed for good) only once everything is closed."""
        try:
            if self._consumer is not None:
                try:
                    if commit and any(True for _ in self._running()):
                        self._commit(
                            timeout_s=self._config.transaction_timeout_ms / 1000, swallow=True
                        )
                finally:
                    try:
                        self._consumer.close()  # the revoke callback uses self._consumer
                    finally:
                        self._consumer = None
        finally:
            self._close_tasks(
                list(self._tasks), caught_up=commit and self._may_commit, closing=True
            )
            if self._standby is not None:
                self._standby.close()
                self._standby = None
            if self._restorer is not None:
                self._restorer.close()
                self._restorer = None
            if self._transaction is not None:
                self._transaction.abandon(5)  # nothing is open unless the commit failed
                self._transaction.close()
            if self._producer is not None:
                try:
                    self._producer.flush(5)
                except Exception as exc:  # noqa: BLE001 - a failed producer has nothing to deliver
                    logger.warning("producer flush at close: %s", exc)
                self._producer = None
            self._queries.publish_local({}, {})

    @property
    def assignment(self) -> list[int]:
        """Partitions whose tasks are restored and running here, sorted."""
        return sorted(task.partition for task in self._running())

    def stores(self, name: str) -> Mapping[int, KeyValueStore[Any, Any]]:
        """The running partitions of store ``name`` (for queries between polls)."""
        return {task.partition: task.stores[name].store for task in self._running()}

    @property
    def tasks(self) -> dict[int, TaskState]:
        """The state of every assigned task, by partition."""
        # list() copies in one C call: a scrape thread may read while a rebalance assigns
        return {p: task.state for p, task in list(self._tasks.items())}

    def _running(self) -> list[Task]:
        return [task for task in self._tasks.values() if task.state is TaskState.RUNNING]
