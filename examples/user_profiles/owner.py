"""The distributed user-profile service's owner side: writes as commands, applied by the owner.

Every profile write is a **command** in the request topic ``<app>-requests``
(key: the user id, partition: ``murmur2(user id) % partitions``, as the
store's).  The processor of the instance that owns partition ``p`` applies the
commands of ``p`` to its store partition inside its Kafka transaction, so a
write is applied exactly once, by whoever owns ``p`` when it is processed.

The write path, numbered (the steps :class:`Acknowledgements` enforces):

1. the instance that owns the key's partition (in its view of the group)
   checks the request, registers it as pending, and produces the command to
   partition ``p`` (idempotent producer, ``acks=all``);
2. its processor consumes the command, applies it to the store (read, check,
   write: the answer is computed here, e.g. 404 for a PATCH of a missing
   profile) and, the command being its own, **stages** the answer with the
   processor's epoch (commit failures, processing errors, lost partitions so
   far);
3. the processor commits: changelog records and input offsets in one Kafka
   transaction; ``send_offsets_to_transaction`` carries the member epoch, so
   an instance that lost the partition (a fenced zombie) is refused here and
   aborts;
4. only when ``commit_transaction`` returned (``on_commit``) are the staged
   answers of the current epoch released: the client gets its 2xx;
5. a failed commit (the epoch moves on), a lost or revoked partition, a
   failed produce, or ``ack_timeout_s`` without a commit: the request is
   answered 503, **not acknowledged**.  Its command may still be applied (it
   is in the request log, and whoever owns ``p`` next applies it once), as a
   write whose connection broke may have been: retry ``PUT``.

So an acknowledged write is in a committed transaction (durable on the
broker: the changelog restores it wherever ``p`` goes), and an instance that
is no longer the owner cannot acknowledge: its commits are fenced, and its
pending requests fail when the group takes the partition.

Thread-safety: :class:`ProfileOwner` runs the processor on its own thread
(start, poll, close); :meth:`ProfileOwner.submit`, :meth:`ProfileOwner.query`
and :meth:`ProfileOwner.metadata_for_key` are called on the event loop.
:class:`Acknowledgements` is thread-safe (``_lock`` guards its two tables).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import msgpack

from examples.user_profiles.service import MAX_FIELDS, STORE_NAME
from statestore.kafka import (
    HostInfo,
    KafkaStoreSpec,
    KeyQueryMetadata,
    Processor,
    ProcessorConfig,
    ProcessorContext,
    QueryResult,
    RebalanceEvent,
)
from statestore.partitioner import partition_for
from statestore.serdes import MsgpackSerde, StringSerde

__all__ = ["Acknowledgements", "Answer", "NotAcknowledgedError", "ProfileOwner", "apply_command"]

logger = logging.getLogger(__name__)

OPS: Final = frozenset({"create", "replace", "update", "delete"})


@attrs.frozen
class Answer:
    """What a command's processing answers: an HTTP status and a JSON body (``None``: empty)."""

    status: int
    body: dict[str, Any] | None


class NotAcknowledgedError(Exception):
    """A write that was not acknowledged (step 5): ``reason``; it may still take effect."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def apply_command(store: Any, user_id: str, command: Mapping[str, Any]) -> Answer:
    """Apply one command to ``store`` (the partition's store, on the processor's thread).

    The same rules as :class:`examples.user_profiles.service.ProfileService`;
    the time is the command's (``ts_ms``), so a replay writes the same profile.
    """
    op = command["op"]
    now = int(command["ts_ms"])
    old: dict[str, Any] | None = store.get(user_id)
    fields: dict[str, Any] = dict(command.get("fields") or {})
    if op == "create":
        if old is not None:
            return Answer(409, {"error": f"user {user_id!r} already has a profile"})
        new = _profile(user_id, fields, 1, now, now)
        store.put(user_id, new)
        return Answer(201, new)
    if op == "replace":
        if old is None:
            new = _profile(user_id, fields, 1, now, now)
        else:
            new = _profile(user_id, fields, old["version"] + 1, old["created_ms"], now)
        store.put(user_id, new)
        return Answer(201 if old is None else 200, new)
    if old is None:
        return Answer(404, {"error": f"no profile for user {user_id!r}"})
    if op == "delete":
        store.delete(user_id)
        return Answer(204, None)
    merged = dict(old["fields"])
    for name, value in fields.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    if len(merged) > MAX_FIELDS:
        return Answer(400, {"error": f"at most {MAX_FIELDS} fields per profile"})
    new = _profile(user_id, merged, old["version"] + 1, old["created_ms"], now)
    store.put(user_id, new)
    return Answer(200, new)


def _profile(
    user_id: str, fields: dict[str, Any], version: int, created_ms: int, updated_ms: int
) -> dict[str, Any]:
    return {
        "id": user_id,
        "fields": fields,
        "version": version,
        "created_ms": created_ms,
        "updated_ms": updated_ms,
    }


Epoch = tuple[int, int, int]
"""``(failed commits, processing errors, lost rebalances)`` of the processor: a staged answer is
released only by a commit of the epoch it was staged in."""


class Acknowledgements:
    """Pending writes of this instance and their staged answers (steps 1, 2, 4, 5).

    Invariants: a staged answer's request is pending; a future is resolved
    once (2xx only from :meth:`committed`, for an answer staged in the epoch of
    that commit).  Thread-safe: ``_lock`` guards ``_pending`` and ``_staged``;
    futures are resolved on their loop (``call_soon_threadsafe``).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[int, asyncio.Future[Answer]]] = {}
        self._staged: dict[str, tuple[Epoch, Answer]] = {}

    def expect(self, rid: str, partition: int) -> asyncio.Future[Answer]:
        """Step 1 (on the loop): register request ``rid`` of ``partition``."""
        future: asyncio.Future[Answer] = self._loop.create_future()
        with self._lock:
            self._pending[rid] = (partition, future)
        return future

    def forget(self, rid: str) -> None:
        """The request ended (answered, timed out, cancelled): drop it."""
        with self._lock:
            self._pending.pop(rid, None)
            self._staged.pop(rid, None)

    def stage(self, rid: str, answer: Answer, epoch: Epoch) -> None:
        """Step 2 (processor's thread): the answer of a command processed in ``epoch``."""
        with self._lock:
            if rid in self._pending:
                self._staged[rid] = (epoch, answer)

    def committed(self, epoch: Epoch) -> int:
        """Step 4 (processor's thread, after ``commit_transaction``): release the answers staged
        in ``epoch``; drop the others (their commands replay after the rewind).  How many."""
        released = []
        with self._lock:
            for rid, (staged_in, answer) in list(self._staged.items()):
                del self._staged[rid]
                entry = self._pending.pop(rid, None)
                if entry is not None and staged_in == epoch:
                    released.append((entry[1], answer))
                elif entry is not None:
                    self._pending[rid] = entry  # processed again after the rewind
        for future, answer in released:
            self._loop.call_soon_threadsafe(_settle, future, answer, None)
        return len(released)

    def fail(self, partitions: set[int] | None, reason: str) -> int:
        """Step 5: answer the pending requests of ``partitions`` (``None``: all) as not
        acknowledged.  Any thread.  How many."""
        failed = []
        with self._lock:
            for rid, (partition, future) in list(self._pending.items()):
                if partitions is None or partition in partitions:
                    del self._pending[rid]
                    self._staged.pop(rid, None)
                    failed.append(future)
        for future in failed:
            self._loop.call_soon_threadsafe(_settle, future, None, NotAcknowledgedError(reason))
        return len(failed)

    def fail_one(self, rid: str, reason: str) -> None:
        """Step 5 for one request (its command could not be produced).  Any thread."""
        with self._lock:
            entry = self._pending.pop(rid, None)
            self._staged.pop(rid, None)
        if entry is not None:
            self._loop.call_soon_threadsafe(_settle, entry[1], None, NotAcknowledgedError(reason))


def _settle(future: asyncio.Future[Answer], answer: Answer | None, error: Exception | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert answer is not None
        future.set_result(answer)


class ProfileOwner:
    """This instance's processor (on its own thread), its command producer, and its pending writes.

    Lifecycle: :meth:`start` (returns once the processor joined the group),
    then :meth:`stop`.  See the module docstring for who calls what.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        application_id: str,
        instance_id: str,
        state_dir: Path,
        endpoint: HostInfo,
        partitions: int,
        standbys: int,
        loop: asyncio.AbstractEventLoop,
        commit_interval_ms: int = 50,
        ack_timeout_s: float = 20.0,
    ) -> None:
        self.instance_id = instance_id
        self.endpoint = endpoint
        self.partitions = partitions
        self.requests_topic = f"{application_id}-requests"
        self._bootstrap = bootstrap_servers
        self._ack_timeout_s = ack_timeout_s
        self.acks = Acknowledgements(loop)
        self._lost = 0
        self._stop = threading.Event()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._config = ProcessorConfig(
            application_id=application_id,
            bootstrap_servers=bootstrap_servers,
            input_topics=(self.requests_topic,),
            instance_id=instance_id,
            application_server=str(endpoint),
            num_standby_replicas=standbys,
            commit_interval_ms=commit_interval_ms,
            standby_refresh_ms=500,
            query_metadata_refresh_ms=500,
            # commands and standbys are fetched within 50 ms of their commit, not 500
            consumer_overrides={"fetch.wait.max.ms": "50"},
        )
        self.processor = Processor(
            self._config,
            state_dir,
            [KafkaStoreSpec(name=STORE_NAME, key_serde=StringSerde(), value_serde=MsgpackSerde())],
            self._process,
            on_commit=self._on_commit,
            on_rebalance=self._on_rebalance,
        )
        self._producer: Any = None
        self._threads: list[threading.Thread] = []

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, timeout_s: float = 120) -> None:
        """Create the request topic if missing, start the producer and the processor thread."""
        from confluent_kafka import Producer  # noqa: PLC0415
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415
        from confluent_kafka.cimpl import NewTopic  # noqa: PLC0415

        admin = AdminClient({"bootstrap.servers": self._bootstrap})
        futures = admin.create_topics([NewTopic(self.requests_topic, self.partitions, 1)])
        try:
            futures[self.requests_topic].result(timeout=30)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise
        self._producer = Producer(
            {
                "bootstrap.servers": self._bootstrap,
                "enable.idempotence": "true",
                "acks": "all",
                "linger.ms": "1",
            }
        )
        for target, name in ((self._run_processor, "processor"), (self._run_producer, "producer")):
            thread = threading.Thread(target=target, name=f"{self.instance_id}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if not self._started.wait(timeout_s):
            raise TimeoutError(f"the processor did not start in {timeout_s} s")
        if self._failure is not None:
            raise self._failure

    @property
    def failed(self) -> BaseException | None:
        """The error the processor stopped on (``None``: running)."""
        return self._failure

    def stop(self) -> None:
        """Stop the processor (a clean close: commit, leave the group) and the producer."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        self.acks.fail(None, "the instance is shutting down")
        if self._producer is not None:
            self._producer.flush(5)

    def _run_processor(self) -> None:
        try:
            self.processor.start()
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._failure = exc
            self._started.set()
            return
        self._started.set()
        try:
            while not self._stop.is_set():
                before = self._epoch()
                try:
                    self.processor.poll_once(0.05)
                finally:
                    if self._epoch()[:2] != before[:2]:
                        self.acks.fail(None, "the commit failed and was aborted")
            self.processor.close()
        except BaseException as exc:
            self._failure = exc
            logger.exception("the processor stopped")
            self.acks.fail(None, f"the processor stopped: {exc}")
            self.processor.abandon()

    def _run_producer(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)

    # -- the processor's side (its thread) ---------------------------------------------------

    def _epoch(self) -> Epoch:
        return (self.processor.aborted, self.processor.processing_errors, self._lost)

    def _process(self, context: ProcessorContext, message: Any) -> None:
        command = msgpack.unpackb(message.value())
        user_id = message.key().decode()
        answer = apply_command(context.store(STORE_NAME), user_id, command)
        if command.get("origin") == self.instance_id:
            self.acks.stage(command["rid"], answer, self._epoch())

    def _on_commit(self, _result: object) -> None:
        self.acks.committed(self._epoch())

    def _on_rebalance(self, event: RebalanceEvent) -> None:
        if event.kind == "lost":
            self._lost += 1
        if event.kind in ("lost", "revoked"):
            count = self.acks.fail(
                set(event.partitions),
                f"partitions {list(event.partitions)} {event.kind}: ownership moved before the"
                " write was committed",
            )
            if count:
                logger.warning("%s writes not acknowledged: partitions %s", count, event.kind)

    # -- the loop's side -------------------------------------------------------------------

    def partition_of(self, user_id: str) -> int:
        """The partition of ``user_id`` (the store's, the request topic's)."""
        return partition_for(user_id.encode(), self.partitions)

    def metadata_for_key(self, user_id: str) -> KeyQueryMetadata:
        """Owner and standbys of ``user_id`` (this instance's view)."""
        return self.processor.metadata_for_key(STORE_NAME, user_id)

    def query(
        self, user_id: str, *, max_lag_records: int | None, max_staleness_ms: int | None
    ) -> QueryResult[Any]:
        """Read ``user_id`` here (the owner, or a standby within the bound)."""
        return self.processor.query(
            STORE_NAME, user_id, max_lag_records=max_lag_records, max_staleness_ms=max_staleness_ms
        )

    async def submit(self, user_id: str, op: str, fields: Mapping[str, Any] | None) -> Answer:
        """Steps 1-5 for one write: its answer once committed, or NotAcknowledgedError."""
        assert op in OPS
        rid = uuid.uuid4().hex
        partition = self.partition_of(user_id)
        future = self.acks.expect(rid, partition)
        command = {
            "rid": rid,
            "origin": self.instance_id,
            "op": op,
            "fields": dict(fields or {}),
            "ts_ms": time.time_ns() // 1_000_000,
        }

        def delivered(error: Any, _message: Any) -> None:  # on the producer's thread
            if error is not None:
                self.acks.fail_one(rid, f"the command could not be written: {error}")

        try:
            self._producer.produce(
                self.requests_topic,
                key=user_id.encode(),
                value=msgpack.packb(command),
                partition=partition,
                on_delivery=delivered,
            )
            return await asyncio.wait_for(asyncio.shield(future), self._ack_timeout_s)
        except TimeoutError:
            raise NotAcknowledgedError(
                f"no commit within {self._ack_timeout_s} s (the write may still take effect)"
            ) from None
        except BufferError:
            raise NotAcknowledgedError("the command queue is full") from None
        finally:
            self.acks.forget(rid)
