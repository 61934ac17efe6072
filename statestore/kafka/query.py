"""Interactive queries across instances: who owns a key, and reads bounded by their staleness.

Kafka Streams' ``KafkaStreams.queryMetadataForKey`` and ``store(StoreQueryParameters)``
for the processor runtime:

* **Endpoints.**  Each instance advertises ``application_server`` (``host:port``,
  Kafka Streams' ``application.server``) in the ``client.id`` of its main
  consumer (:func:`statestore.kafka.endpoint.advertised_client_id`).  librdkafka does not let an
  application put user data in the group protocol's member metadata (its
  assignors are not pluggable, and KIP-848 assigns on the broker), but
  ``AdminClient.describe_consumer_groups`` returns every member's
  ``client_id`` with its assignment, so the endpoint travels with the
  membership itself: it appears when the member joins and disappears when
  the coordinator removes it (clean leave at once, a crash after the
  session timeout).  No metadata topic to keep, no second source of truth.
* **Ownership.**  :class:`GroupView` is one description of the group: the
  active owner of partition ``p`` is the member assigned ``p`` of the input
  topics; its standbys are the ``num_standby_replicas`` members after it in the
  ring of sorted member ids (the placement every member derives in
  :mod:`statestore.kafka.standby`).  A partition being moved (revoked, not
  yet assigned) has no active owner in the view.
* **Staleness of the metadata.**  The view is refreshed every
  ``query_metadata_refresh_ms`` on the processor's thread; between refreshes
  and during a rebalance it can name an owner that has just lost the
  partition.  That is why a read on an instance that is not (or no longer)
  the owner is refused with :class:`~statestore.kafka.errors.NotOwnerError`
  naming the owner *this* instance believes in, and why writes are fenced by
  the transaction, not by the view.
* **Local reads.**  :class:`InteractiveQueries` holds, besides the view, the
  partitions this process answers for: a reader of each running task's
  store (the committed state), and of each standby with its :class:`LagInfo`.
  A read of a standby is allowed only when the caller bounds it
  (``max_lag_records`` and/or ``max_staleness_ms``); one outside its bound
  raises :class:`~statestore.kafka.errors.StandbyTooStaleError`.

Lag of a standby.  Every ``query_metadata_refresh_ms`` the processor asks the
broker for the two ends of each standby's changelog partition
(:meth:`InteractiveQueries.tend`, ``list_offsets`` requests, never waited for):
the **last stable offset** (the end a ``read_committed`` reader can reach;
Kafka's ``endOffsets`` under ``read_committed``) and the **high watermark**
(every record acknowledged before the request lies below it, its transaction
decided or not).  ``offset_lag`` is the last stable offset minus the standby's
position.  ``caught_up_ms`` is the time the newest request whose *high
watermark* the standby's position has reached was *sent*: every transaction
whose ``commit_transaction`` returned before then had its records acknowledged
below that high watermark, and a ``read_committed`` position at or past it has
passed their commit markers and applied them.  So ``staleness_ms`` at a read
(``now - caught_up_ms``) bounds what is missing: no write acknowledged longer
ago than that (``None``: never caught up).  The commit markers' own delay is
inside the bound, not beside it.  The staleness of a caught-up standby is at
least the age of the last request, up to ``query_metadata_refresh_ms``; under
steady writes, one commit interval more (the transaction open at a request must
be decided and applied before the standby reaches its high watermark).

Thread-safety: :class:`InteractiveQueries` is thread-safe: the processor's
thread publishes immutable snapshots (:meth:`InteractiveQueries.publish_view`,
:meth:`InteractiveQueries.publish_local`), any thread reads.  Point reads
(``get``) only: RocksDB calls hold the GIL, so a read racing with the close
of a partition (revoked, lost) either completes or raises
:class:`~statestore.errors.InvalidStateStoreError`, which is reported as
:class:`~statestore.kafka.errors.NotOwnerError`.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from statestore.errors import InvalidStateStoreError, SerializationError
from statestore.kafka.endpoint import HostInfo, parse_client_id
from statestore.kafka.errors import (
    NotOwnerError,
    StandbyTooStaleError,
    UnknownStorePartitionError,
)
from statestore.kafka.topics import request_end_offsets
from statestore.partitioner import partition_for
from statestore.serdes import Serde
from statestore.stores.reader import StoreReader

if TYPE_CHECKING:
    from statestore.kafka.standby import StandbyTasks
    from statestore.stores.engine import RocksDBEngine

__all__ = [
    "GroupView",
    "InteractiveQueries",
    "KeyQueryMetadata",
    "LagInfo",
    "MemberInfo",
    "QueryResult",
    "group_view",
]

V = TypeVar("V")

HIGHS_KEPT = 64
"""High watermarks kept per standby that its position has not reached yet (one per request,
``query_metadata_refresh_ms`` apart); an older one dropped only makes ``caught_up_ms`` older."""

Partitioner = Callable[[bytes, int], int]
"""``partitioner(serialized key, partitions) -> partition``."""

logger = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class MemberInfo:
    """One member of the group as the coordinator described it.  Immutable."""

    member_id: str
    instance_id: str | None
    endpoint: HostInfo | None
    partitions: tuple[int, ...]


@attrs.frozen(kw_only=True)
class KeyQueryMetadata:
    """Where the partition of a key lives (Kafka Streams' ``KeyQueryMetadata``).  Immutable.

    ``active`` is ``None`` when no member owns the partition in the view (a
    rebalance is moving it, or its owner advertises no endpoint); ``standbys``
    are the endpoints that should keep a warm copy, in ring order.
    """

    store: str
    partition: int
    active: HostInfo | None
    standbys: tuple[HostInfo, ...]
    view_ms: int
    """Wall-clock time of the group description this answer comes from."""


@attrs.frozen(kw_only=True)
class GroupView:
    """One description of the group: members, their partitions and endpoints.  Immutable.

    Invariant: no partition is listed under two members (a description taken
    mid-rebalance that shows one twice keeps neither: see :meth:`of`).
    """

    members: tuple[MemberInfo, ...]
    partitions: int
    replicas: int
    fetched_ms: int

    @classmethod
    def of(
        cls, members: tuple[MemberInfo, ...], *, partitions: int, replicas: int, fetched_ms: int
    ) -> GroupView:
        """A view of ``members``; a partition claimed by two members is dropped from both."""
        seen: dict[int, int] = {}
        for member in members:
            for p in member.partitions:
                seen[p] = seen.get(p, 0) + 1
        twice = {p for p, count in seen.items() if count > 1}
        if twice:
            members = tuple(
                attrs.evolve(m, partitions=tuple(p for p in m.partitions if p not in twice))
                for m in members
            )
        ordered = tuple(sorted(members, key=lambda m: m.member_id))
        return cls(members=ordered, partitions=partitions, replicas=replicas, fetched_ms=fetched_ms)

    def owner(self, partition: int) -> MemberInfo | None:
        """The member assigned ``partition``, or ``None``."""
        for member in self.members:
            if partition in member.partitions:
                return member
        return None

    def standbys(self, partition: int) -> tuple[MemberInfo, ...]:
        """The members that keep standbys of ``partition``: the ``replicas`` after its owner in
        the ring of member ids (as :func:`statestore.kafka.standby.standby_partitions`)."""
        owner = self.owner(partition)
        count = len(self.members)
        if owner is None or self.replicas < 1 or count < 2:
            return ()
        index = self.members.index(owner)
        steps = range(1, min(self.replicas, count - 1) + 1)
        return tuple(self.members[(index + step) % count] for step in steps)

    def metadata(self, store: str, partition: int) -> KeyQueryMetadata:
        """:class:`KeyQueryMetadata` of ``partition`` of ``store``."""
        owner = self.owner(partition)
        return KeyQueryMetadata(
            store=store,
            partition=partition,
            active=None if owner is None else owner.endpoint,
            standbys=tuple(m.endpoint for m in self.standbys(partition) if m.endpoint is not None),
            view_ms=self.fetched_ms,
        )


def group_view(
    description: Any, topic: str, *, partitions: int, replicas: int, fetched_ms: int
) -> GroupView:
    """The :class:`GroupView` of a ``describe_consumer_groups`` result.

    A member's partitions are its current assignment of ``topic`` (one input
    topic stands for all: they are co-partitioned).
    """
    members = []
    for member in description.members:
        assignment = member.assignment
        tps = assignment.topic_partitions if assignment is not None else []
        instance_id, endpoint = parse_client_id(member.client_id or "")
        members.append(
            MemberInfo(
                member_id=member.member_id,
                instance_id=instance_id,
                endpoint=endpoint,
                partitions=tuple(sorted(tp.partition for tp in tps if tp.topic == topic)),
            )
        )
    return GroupView.of(
        tuple(members), partitions=partitions, replicas=replicas, fetched_ms=fetched_ms
    )


@attrs.frozen(kw_only=True)
class LagInfo:
    """How far a replica of a store partition is behind its changelog (Kafka Streams' ``LagInfo``).

    ``current_offset`` is the replica's position, ``end_offset`` the changelog's
    high watermark as last fetched, ``offset_lag`` the difference;
    ``caught_up_ms`` the last wall-clock time it was seen with no lag (``None``:
    never).  The active replica is the changelog's only writer: lag 0, caught up
    at every moment.  Immutable.
    """

    current_offset: int
    end_offset: int
    offset_lag: int
    caught_up_ms: int | None

    def staleness_ms(self, now_ms: int) -> int | None:
        """How long ago the replica was last known to be caught up (``None``: never)."""
        return None if self.caught_up_ms is None else max(0, now_ms - self.caught_up_ms)


@attrs.frozen(kw_only=True)
class QueryResult(Generic[V]):
    """A value read by :meth:`InteractiveQueries.get`, with where it came from.  Immutable.

    ``active``: read on the partition's active owner (this process), else on a
    standby, whose ``lag`` says how stale it may be; ``staleness_ms`` is the
    standby's staleness at the read (0 for the active).
    """

    value: V | None
    store: str
    partition: int
    active: bool
    lag: LagInfo
    staleness_ms: int | None


@attrs.frozen(kw_only=True)
class _Local:
    """What this process answers for: active readers, standby readers with their lag."""

    active: Mapping[str, Mapping[int, StoreReader[Any, Any]]] = attrs.field(factory=dict)
    standby: Mapping[str, Mapping[int, tuple[StoreReader[Any, Any], LagInfo]]] = attrs.field(
        factory=dict
    )


class InteractiveQueries:
    """The query side of a processor: metadata for keys and bounded local reads (module docstring).

    Invariants: the published view and local snapshot are immutable and
    replaced whole; a standby's ``caught_up_ms`` never decreases while it
    stays a standby here (and is forgotten when it leaves); at most one
    description and one stable-offsets request are out at a time.

    Thread-safe: the processor's thread publishes (:meth:`tend`,
    :meth:`refresh_local`, :meth:`publish_view`, :meth:`publish_local`), any
    thread calls :meth:`metadata_for_key`, :meth:`metadata_for_partition`,
    :meth:`local_partitions` and :meth:`get`.  ``_lock`` guards the swap of
    the two snapshot references only.
    """

    def __init__(
        self,
        *,
        key_serdes: Mapping[str, Serde[Any]],
        endpoint: HostInfo | None,
        wall_clock_ms: Callable[[], int],
    ) -> None:
        """Queries over stores with these key serdes; ``endpoint``: this process's own."""
        self._key_serdes = dict(key_serdes)
        self._key_locks = {name: threading.Lock() for name in self._key_serdes}
        self._endpoint = endpoint
        self._wall_clock_ms = wall_clock_ms
        self._lock = threading.Lock()
        self._view: GroupView | None = None
        self._local = _Local()
        self._standby_readers: dict[
            tuple[str, int], tuple[RocksDBEngine, StoreReader[Any, Any]]
        ] = {}
        """Processor's thread only: the reader of each standby engine."""
        self._caught_up: dict[tuple[str, int], int] = {}
        """Processor's thread only: per standby, the time of the newest request whose high
        watermark its position had reached."""
        self._stable: dict[tuple[str, int], int] = {}
        """Processor's thread only: last stable offsets of the standbys' changelog partitions."""
        self._highs: dict[tuple[str, int], collections.deque[tuple[int, int]]] = {}
        """Processor's thread only: per standby, ``(asked at ms, high watermark)`` of the
        requests its position has not reached yet, oldest first."""
        self._described: tuple[Any, int] | None = None
        """Processor's thread only: the description asked for and when, until it arrives."""
        self._ends_asked: tuple[dict[tuple[str, int, bool], Any], int] | None = None
        """Processor's thread only: the end offsets asked for (``(store, partition,
        committed)``: the last stable offset, or the high watermark) and when, until they
        arrive."""

    @property
    def endpoint(self) -> HostInfo | None:
        """This process's advertised endpoint."""
        return self._endpoint

    @property
    def view(self) -> GroupView | None:
        """The last group description (``None`` before the first one)."""
        return self._view

    def publish_view(self, view: GroupView) -> None:
        """Take ``view`` as the current group description (processor's thread)."""
        with self._lock:
            self._view = view

    def publish_local(
        self,
        active: Mapping[str, Mapping[int, StoreReader[Any, Any]]],
        standby: Mapping[str, Mapping[int, tuple[StoreReader[Any, Any], LagInfo]]],
    ) -> None:
        """Take the partitions this process answers for now (processor's thread)."""
        local = _Local(active=active, standby=standby)
        with self._lock:
            self._local = local

    def local_partitions(self, store: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(active, standby)``: the partitions of ``store`` this process answers for now."""
        local = self._local
        return (
            tuple(sorted(local.active.get(store, {}))),
            tuple(sorted(local.standby.get(store, {}))),
        )

    def tend(
        self,
        admin: Any,
        *,
        ask: bool,
        group: str,
        topic: str,
        partitions: int,
        replicas: int,
        changelogs: Mapping[str, str],
        standbys: StandbyTasks | None,
    ) -> None:
        """Ask the broker again (``ask``, unless a request is still out) and take the answers
        that arrived: the group's description (:meth:`publish_view`) and the last stable
        offset of every standby partition, the end a standby is measured against.

        Processor's thread, once per poll; never waits for the broker (the admin
        client's futures are polled).  A failed request is logged and asked again
        at the next ``ask``.
        """
        standby_partitions = [] if standbys is None else sorted(standbys.partitions)
        try:
            if ask and self._described is None:
                self._described = (
                    admin.describe_consumer_groups([group], request_timeout=5)[group],
                    self._wall_clock_ms(),
                )
            if ask and self._ends_asked is None and standby_partitions:
                at_ms = self._wall_clock_ms()  # before the request: what it shows is that old
                futures = {
                    (name, p, committed): future
                    for name, changelog in changelogs.items()
                    for committed in (True, False)
                    for p, future in request_end_offsets(
                        admin, changelog, standby_partitions, committed=committed
                    ).items()
                }
                self._ends_asked = (futures, at_ms)
        except Exception as exc:  # noqa: BLE001 - best effort; asked again
            logger.info("query metadata not requested: %s", exc)
        if not standby_partitions:
            self._stable, self._highs = {}, {}
        if self._described is not None and self._described[0].done():
            future, asked_ms = self._described
            self._described = None
            try:
                description = future.result()
            except Exception as exc:  # noqa: BLE001 - best effort; asked again
                logger.info("query metadata not refreshed: %s", exc)
            else:
                self.publish_view(
                    group_view(
                        description,
                        topic,
                        partitions=partitions,
                        replicas=replicas,
                        fetched_ms=asked_ms,
                    )
                )
        if self._ends_asked is not None and all(f.done() for f in self._ends_asked[0].values()):
            futures, at_ms = self._ends_asked
            self._ends_asked = None
            try:
                ends = {key: future.result().offset for key, future in futures.items()}
            except Exception as exc:  # noqa: BLE001 - the lag stays as it was; asked again
                logger.info("standby end offsets not refreshed: %s", exc)
            else:
                self.take_ends(ends, at_ms)

    def take_ends(self, ends: Mapping[tuple[str, int, bool], int], at_ms: int) -> None:
        """Take the end offsets of one request sent at ``at_ms`` (processor's thread):
        ``(store, partition, committed) -> offset``, the last stable offset where
        ``committed``, else the high watermark."""
        self._stable = {(name, p): end for (name, p, committed), end in ends.items() if committed}
        for (name, p, committed), end in ends.items():
            if not committed:
                highs = self._highs.setdefault((name, p), collections.deque(maxlen=HIGHS_KEPT))
                highs.append((at_ms, end))

    def refresh_local(
        self,
        active: Mapping[str, Mapping[int, StoreReader[Any, Any]]],
        standbys: StandbyTasks | None,
        value_serdes: Mapping[str, Serde[Any]],
    ) -> None:
        """Publish ``active`` (running partitions' readers) and every standby with its lag now.

        Processor's thread, once per poll.  A standby's reader is built once per
        engine it opened; it is caught up as of a request's time when its position
        reached that request's high watermark (module docstring).
        """
        standby: dict[str, dict[int, tuple[StoreReader[Any, Any], LagInfo]]] = {}
        kept: dict[tuple[str, int], tuple[RocksDBEngine, StoreReader[Any, Any]]] = {}
        partitions = () if standbys is None else sorted(standbys.partitions)
        for name, key_serde in self._key_serdes.items():
            for p in partitions:
                assert standbys is not None
                engine = standbys.engine(name, p)
                offsets = standbys.offsets(name, p)
                if engine is None or offsets is None:
                    continue
                cached = self._standby_readers.get((name, p))
                if cached is None or cached[0] is not engine:
                    reader: StoreReader[Any, Any] = StoreReader(
                        name=name,
                        engines=[engine],
                        key_serde=key_serde,
                        value_serde=value_serdes[name],
                        visibility=threading.Lock(),
                    )
                    cached = (engine, reader)
                kept[(name, p)] = cached
                position, high = offsets
                stable = self._stable.get((name, p))
                if stable is None:  # no stable offset yet: the fetched high watermark
                    end, lag_records = high, max(0, high - position)
                else:
                    end, lag_records = stable, max(0, stable - position)
                highs = self._highs.get((name, p))
                while highs and highs[0][1] <= position:  # reached: holds what was acked then
                    at_ms, _high = highs.popleft()
                    self._caught_up[(name, p)] = max(self._caught_up.get((name, p), 0), at_ms)
                lag = LagInfo(
                    current_offset=position,
                    end_offset=end,
                    offset_lag=lag_records,
                    caught_up_ms=self._caught_up.get((name, p)),
                )
                standby.setdefault(name, {})[p] = (cached[1], lag)
        self._standby_readers = kept
        self._caught_up = {k: v for k, v in self._caught_up.items() if k in kept}
        self._highs = {k: v for k, v in self._highs.items() if k in kept}
        self.publish_local(active, standby)

    def _store_serde(self, store: str) -> Serde[Any]:
        serde = self._key_serdes.get(store)
        if serde is None:
            view = self._view
            raise UnknownStorePartitionError(
                store, None, list(self._key_serdes), None if view is None else view.partitions
            )
        return serde

    def partition_for_key(
        self, store: str, key: Any, partitioner: Partitioner | None = None
    ) -> int:
        """The partition of ``key``: ``partitioner(serialized key, partitions)``, by default
        murmur2 of the serialized key, as the producers' (Kafka's default partitioner)."""
        serde = self._store_serde(store)
        view = self._view
        if view is None:
            raise NotOwnerError(store, None, None, (), "no group description yet")
        if key is None:
            raise SerializationError(store, "key", "NoneType", "keys must not be None")
        try:
            with self._key_locks[store]:
                data = serde.serialize(key)
        except Exception as exc:
            raise SerializationError(store, "key", type(key).__name__, str(exc)) from exc
        return (partitioner or partition_for)(data, view.partitions)

    def metadata_for_key(
        self, store: str, key: Any, partitioner: Partitioner | None = None
    ) -> KeyQueryMetadata:
        """Who serves ``key`` of ``store``: the active owner and the standbys, from the last
        group description.  NotOwnerError (``partition`` ``None``) before the first one.

        ``partitioner(serialized key, partitions)``: how the input records that
        reach this store's partitions were partitioned, when that was not
        Kafka's default partitioner over the store's key (Kafka Streams'
        ``queryMetadataForKey(store, key, partitioner)``).
        """
        partition = self.partition_for_key(store, key, partitioner)
        return self.metadata_for_partition(store, partition)

    def metadata_for_partition(self, store: str, partition: int) -> KeyQueryMetadata:
        """Who serves ``partition`` of ``store`` (as :meth:`metadata_for_key`)."""
        self._store_serde(store)
        view = self._view
        if view is None:
            raise NotOwnerError(store, partition, None, (), "no group description yet")
        if isinstance(partition, bool) or not 0 <= partition < view.partitions:
            raise UnknownStorePartitionError(
                store, partition, list(self._key_serdes), view.partitions
            )
        return view.metadata(store, partition)

    def get(
        self,
        store: str,
        key: Any,
        *,
        max_lag_records: int | None = None,
        max_staleness_ms: int | None = None,
        partitioner: Partitioner | None = None,
    ) -> QueryResult[Any]:
        """The committed value of ``key`` read here, if this process may answer for it.

        The active owner always answers.  A standby answers only when a bound
        is given and it holds: at most ``max_lag_records`` behind the
        changelog's end and last caught up at most ``max_staleness_ms`` ago
        (each ``None``: not bounded; both ``None``: standbys are not read).
        Otherwise :class:`~statestore.kafka.errors.StandbyTooStaleError` (a
        standby outside its bound) or
        :class:`~statestore.kafka.errors.NotOwnerError`, naming the owner.
        """
        partition = self.partition_for_key(store, key, partitioner)
        local = self._local
        reader = local.active.get(store, {}).get(partition)
        now_ms = self._wall_clock_ms()
        if reader is not None:
            try:
                value = reader.get(key)
            except InvalidStateStoreError:
                pass  # closed under us: no longer ours
            else:
                lag = LagInfo(current_offset=-1, end_offset=-1, offset_lag=0, caught_up_ms=now_ms)
                return QueryResult(
                    value=value,
                    store=store,
                    partition=partition,
                    active=True,
                    lag=lag,
                    staleness_ms=0,
                )
        meta = self.metadata_for_partition(store, partition)
        standby = local.standby.get(store, {}).get(partition)
        bounded = max_lag_records is not None or max_staleness_ms is not None
        if standby is None or not bounded:
            reason = "not the active owner" + (
                "" if standby is None else " (a standby is here: give a bound to read it)"
            )
            raise NotOwnerError(store, partition, meta.active, meta.standbys, reason)
        reader, lag = standby
        staleness = lag.staleness_ms(now_ms)
        too_many = max_lag_records is not None and lag.offset_lag > max_lag_records
        too_old = max_staleness_ms is not None and (
            staleness is None or staleness > max_staleness_ms
        )
        if too_many or too_old:
            raise StandbyTooStaleError(
                store,
                partition,
                meta.active,
                meta.standbys,
                lag_records=lag.offset_lag,
                staleness_ms=staleness,
                max_lag_records=max_lag_records,
                max_staleness_ms=max_staleness_ms,
            )
        try:
            value = reader.get(key)
        except InvalidStateStoreError as exc:
            raise NotOwnerError(
                store, partition, meta.active, meta.standbys, "the standby was closed"
            ) from exc
        return QueryResult(
            value=value,
            store=store,
            partition=partition,
            active=False,
            lag=lag,
            staleness_ms=staleness,
        )
