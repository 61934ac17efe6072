"""Interactive queries without a broker: endpoints, ownership metadata, refusals, standby bounds.

The processor runs against the in-memory cluster (``fake_cluster``), which
describes its main consumer (with the ``client.id`` the processor set) and
the other members a test adds.  The standby bounds run on real RocksDB
engines behind a stand-in for the standby tasks (their offsets are set by
the test).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgpack
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import MemberAssignment, MemberDescription
from hypothesis import given
from hypothesis import strategies as st

from statestore.config import RocksDBConfig
from statestore.errors import InvalidStoreConfigError
from statestore.kafka import (
    HostInfo,
    KafkaStoreSpec,
    NotOwnerError,
    Processor,
    ProcessorConfig,
    ProcessorContext,
    StandbyTooStaleError,
    UnknownStorePartitionError,
)
from statestore.kafka.endpoint import advertised_client_id, parse_client_id
from statestore.kafka.query import GroupView, InteractiveQueries, MemberInfo
from statestore.kafka.standby import standby_partitions
from statestore.partitioner import partition_for
from statestore.serdes import IntSerde, StringSerde
from statestore.stores.engine import RocksDBEngine
from tests.statestore.kafka.fake_cluster import FakeCluster

pytestmark = pytest.mark.timeout(60)

PARTITIONS = 4


# -- endpoints --------------------------------------------------------------------------


def test_host_info_parses_and_prints_host_and_port() -> None:
    assert HostInfo.parse("10.0.0.7:8080") == HostInfo("10.0.0.7", 8080)
    assert str(HostInfo.parse("profiles-2.svc:80")) == "profiles-2.svc:80"
    assert HostInfo.parse("[::1]:9000") == HostInfo("::1", 9000)
    assert str(HostInfo("::1", 9000)) == "[::1]:9000"


@pytest.mark.parametrize(
    "bad", ["", "host", "host:", ":80", "host:http", "host:0", "h:70000", "a;b:1"]
)
def test_a_bad_endpoint_is_refused_by_the_config(bad: str) -> None:
    with pytest.raises(InvalidStoreConfigError) as caught:
        ProcessorConfig(
            application_id="app",
            bootstrap_servers="b:9092",
            input_topics=("in",),
            instance_id="i1",
            application_server=bad,
        )
    assert caught.value.args  # names the setting and the value


def test_the_client_id_carries_instance_and_endpoint_both_ways() -> None:
    client_id = advertised_client_id("worker-1", HostInfo("10.0.0.7", 8080))
    assert client_id == "statestore;worker-1;10.0.0.7:8080"
    assert parse_client_id(client_id) == ("worker-1", HostInfo("10.0.0.7", 8080))
    assert parse_client_id(advertised_client_id("worker-1", None)) == ("worker-1", None)
    assert parse_client_id("rdkafka") == (None, None)
    assert parse_client_id("statestore;w;not-an-endpoint") == ("w", None)


# -- ownership --------------------------------------------------------------------------


def _member(member_id: str, port: int, *partitions: int) -> MemberInfo:
    return MemberInfo(
        member_id=member_id,
        instance_id=member_id,
        endpoint=HostInfo("h", port),
        partitions=partitions,
    )


def test_the_owner_is_the_assigned_member_and_standbys_follow_it_in_the_ring() -> None:
    view = GroupView.of(
        (_member("c", 3, 4, 5), _member("a", 1, 0, 1), _member("b", 2, 2, 3)),
        partitions=6,
        replicas=1,
        fetched_ms=7,
    )
    meta = view.metadata("users", 2)
    assert (meta.active, meta.standbys, meta.view_ms) == (HostInfo("h", 2), (HostInfo("h", 3),), 7)
    assert view.metadata("users", 4).standbys == (HostInfo("h", 1),)  # wraps around
    two = attrs_evolve_replicas(view, 2)
    assert two.metadata("users", 0).standbys == (HostInfo("h", 2), HostInfo("h", 3))


def attrs_evolve_replicas(view: GroupView, replicas: int) -> GroupView:
    return GroupView.of(
        view.members, partitions=view.partitions, replicas=replicas, fetched_ms=view.fetched_ms
    )


def test_a_partition_in_flight_has_no_owner_and_one_claimed_twice_is_dropped() -> None:
    view = GroupView.of(
        (_member("a", 1, 0, 1), _member("b", 2, 1, 2)), partitions=4, replicas=1, fetched_ms=0
    )
    assert view.metadata("s", 3).active is None  # nobody has it (a rebalance moves it)
    assert view.metadata("s", 3).standbys == ()
    assert view.metadata("s", 1).active is None  # two claims: trust neither
    assert view.metadata("s", 0).active == HostInfo("h", 1)


@given(
    st.dictionaries(
        st.text("abcdef", min_size=1, max_size=3),
        st.sets(st.integers(0, 11)),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 3),
)
def test_standbys_named_by_the_metadata_are_where_the_standby_tasks_place_them(
    claims: dict[str, set[int]], replicas: int
) -> None:
    owners: dict[str, list[int]] = {}
    taken: set[int] = set()
    for member, partitions in sorted(claims.items()):
        owners[member] = sorted(partitions - taken)
        taken |= partitions
    view = GroupView.of(
        tuple(_member(m, i, *ps) for i, (m, ps) in enumerate(sorted(owners.items()))),
        partitions=12,
        replicas=replicas,
        fetched_ms=0,
    )
    for member in owners:
        placed = standby_partitions(owners, member, replicas)
        named = {p for p in range(12) if member in {m.member_id for m in view.standbys(p)}}
        assert named == placed


# -- the processor ----------------------------------------------------------------------


def _cluster() -> FakeCluster:
    cluster = FakeCluster()
    cluster.create("in", PARTITIONS)
    for user in range(40):
        key = f"user-{user}".encode()
        cluster.append("in", partition_for(key, PARTITIONS), key, msgpack.packb(user))
    return cluster


def _processor(cluster: FakeCluster, state_dir: Path, **config: Any) -> Processor:
    def process(context: ProcessorContext, message: Any) -> None:
        store = context.store("visits")
        key = message.key().decode()
        store.put(key, store.get(key, 0) + msgpack.unpackb(message.value()))

    return Processor(
        ProcessorConfig(
            application_id="app",
            bootstrap_servers="fake:9092",
            input_topics=("in",),
            instance_id="i1",
            commit_interval_ms=1,
            **config,
        ),
        state_dir,
        [KafkaStoreSpec(name="visits", key_serde=StringSerde(), value_serde=IntSerde())],
        process,
        clients=cluster.clients(),  # type: ignore[arg-type]
    )


def _poll_until(processor: Processor, done: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "condition not reached"
        processor.poll_once(0.01)


def _other(member_id: str, endpoint: str, partitions: list[int]) -> MemberDescription:
    return MemberDescription(
        member_id=member_id,
        client_id=advertised_client_id(member_id, HostInfo.parse(endpoint)),
        host="/10.0.0.2",
        assignment=MemberAssignment([TopicPartition("in", p) for p in partitions]),
    )


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[FakeCluster, Processor]]:
    cluster = _cluster()
    cluster.member_partitions = {0, 1}
    cluster.other_members = [_other("member-2", "10.0.0.2:8080", [2, 3])]
    processor = _processor(
        cluster, tmp_path, application_server="10.0.0.1:8080", query_metadata_refresh_ms=100
    )
    processor.start()
    try:
        mine = sum(partition_for(f"user-{u}".encode(), PARTITIONS) < 2 for u in range(40))
        _poll_until(processor, lambda: processor.processed_records == mine)
        processor.commit()
        processor.poll_once(0.01)  # publishes the committed partitions
        assert processor.assignment == [0, 1]
        yield cluster, processor
    finally:
        processor.close()


def test_the_main_consumer_advertises_the_endpoint_in_its_client_id(
    running: tuple[FakeCluster, Processor],
) -> None:
    cluster, _processor = running
    assert [c.client_id for c in cluster.group_consumers] == ["statestore;i1;10.0.0.1:8080"]


def test_metadata_for_key_names_the_owner_of_the_keys_partition(
    running: tuple[FakeCluster, Processor],
) -> None:
    _cluster, processor = running
    for user in range(40):
        key = f"user-{user}"
        partition = partition_for(key.encode(), PARTITIONS)  # murmur2, as the producers
        meta = processor.metadata_for_key("visits", key)
        assert meta.partition == partition
        expected = HostInfo("10.0.0.1", 8080) if partition < 2 else HostInfo("10.0.0.2", 8080)
        assert meta.active == expected
        assert meta.standbys == ()  # no standby replicas configured
        assert processor.metadata_for_partition("visits", partition) == meta


def test_a_custom_partitioner_decides_the_partition_of_a_key(
    running: tuple[FakeCluster, Processor],
) -> None:
    _cluster, processor = running

    def last_byte(data: bytes, partitions: int) -> int:
        return data[-1] % partitions

    meta = processor.metadata_for_key("visits", "user-3", partitioner=last_byte)
    assert meta.partition == ord("3") % PARTITIONS
    with pytest.raises(NotOwnerError) as caught:  # partition 3 is the other member's
        processor.query("visits", "user-3", partitioner=lambda _data, _count: 3)
    assert caught.value.partition == 3
    assert caught.value.active == HostInfo("10.0.0.2", 8080)


def test_the_owner_answers_its_keys_and_refuses_the_others_naming_their_owner(
    running: tuple[FakeCluster, Processor],
) -> None:
    _cluster, processor = running
    answered = refused = 0
    for user in range(40):
        key = f"user-{user}"
        partition = partition_for(key.encode(), PARTITIONS)
        if partition < 2:
            result = processor.query("visits", key)
            assert (result.value, result.partition, result.active) == (user, partition, True)
            assert result.lag.offset_lag == 0
            answered += 1
        else:
            with pytest.raises(NotOwnerError) as caught:
                processor.query("visits", key, max_lag_records=1_000_000)
            error = caught.value
            assert (error.store, error.partition, error.active) == (
                "visits",
                partition,
                HostInfo("10.0.0.2", 8080),
            )
            assert "10.0.0.2:8080" in str(error)
            refused += 1
    assert answered > 0 and refused > 0


def test_an_unknown_store_or_partition_is_a_typed_error(
    running: tuple[FakeCluster, Processor],
) -> None:
    _cluster, processor = running
    with pytest.raises(UnknownStorePartitionError) as store:
        processor.metadata_for_key("visitz", "user-1")
    assert (store.value.store, store.value.stores, store.value.partitions) == (
        "visitz",
        ("visits",),
        PARTITIONS,
    )
    with pytest.raises(UnknownStorePartitionError):
        processor.query("visitz", "user-1")
    for partition in (-1, PARTITIONS):
        with pytest.raises(UnknownStorePartitionError) as caught:
            processor.metadata_for_partition("visits", partition)
        assert (caught.value.partition, caught.value.partitions) == (partition, PARTITIONS)
        assert f"no partition {partition}" in str(caught.value)


def test_queries_are_refused_before_the_first_description_and_after_close(
    tmp_path: Path,
) -> None:
    cluster = _cluster()
    processor = _processor(cluster, tmp_path, application_server="10.0.0.1:8080")
    with pytest.raises(NotOwnerError) as caught:
        processor.metadata_for_key("visits", "user-1")
    assert caught.value.active is None
    processor.start()
    _poll_until(processor, lambda: processor.processed_records == 40)
    processor.commit()
    processor.poll_once(0.01)
    assert processor.query("visits", "user-1").value == 1
    processor.close()
    with pytest.raises(NotOwnerError):
        processor.query("visits", "user-1")


def test_queries_from_many_threads_while_the_processor_commits(tmp_path: Path) -> None:
    cluster = _cluster()
    processor = _processor(cluster, tmp_path, application_server="10.0.0.1:8080")
    processor.start()
    _poll_until(processor, lambda: processor.processed_records == 40)
    processor.commit()
    processor.poll_once(0.01)
    stop = threading.Event()
    seen: list[list[int]] = [[] for _ in range(3)]
    errors: list[BaseException] = []

    def read(mine: list[int]) -> None:
        try:
            while not stop.is_set():
                value = processor.query("visits", "user-3").value
                assert value is not None
                mine.append(value)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(mine,)) for mine in seen]
    for thread in threads:
        thread.start()
    key = b"user-3"
    for processed in range(41, 61):  # user-3 starts at 3; each round adds 1 and commits
        cluster.append("in", partition_for(key, PARTITIONS), key, msgpack.packb(1))
        _poll_until(processor, lambda n=processed: processor.processed_records == n)  # type: ignore[misc]
        processor.commit()
        processor.poll_once(0.01)
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    final = processor.query("visits", "user-3").value
    processor.close()
    assert not errors
    assert final == 23
    for mine in seen:  # committed values only, and a reader never goes back
        assert mine
        assert all(3 <= value <= 23 for value in mine)
        assert mine == sorted(mine)


# -- standby bounds ---------------------------------------------------------------------


_GROUP: dict[str, Any] = {"group": "app", "topic": "in", "partitions": PARTITIONS, "replicas": 1}


class _Standbys:
    """Stands in for StandbyTasks: real engines, offsets set by the test."""

    def __init__(self, engines: dict[tuple[str, int], RocksDBEngine]) -> None:
        self.engines = engines
        self.positions: dict[tuple[str, int], tuple[int, int]] = {}

    @property
    def partitions(self) -> set[int]:
        return {p for _name, p in self.engines}

    def engine(self, store: str, partition: int) -> RocksDBEngine | None:
        return self.engines.get((store, partition))

    def offsets(self, store: str, partition: int) -> tuple[int, int] | None:
        return self.positions.get((store, partition))


def test_a_standby_answers_only_within_the_callers_bound(tmp_path: Path) -> None:
    clock = [1_000_000]
    queries = InteractiveQueries(
        key_serdes={"visits": StringSerde()},
        endpoint=HostInfo("10.0.0.1", 8080),
        wall_clock_ms=lambda: clock[0],
    )
    key = "user-3"
    partition = partition_for(key.encode(), PARTITIONS)
    engine = RocksDBEngine.open(tmp_path / "standby", config=RocksDBConfig(), cache=None)
    try:
        engine.write([(key.encode(), IntSerde().serialize(7))], 10)
        standbys = _Standbys({("visits", partition): engine})
        queries.publish_view(
            GroupView.of(
                (
                    _member("a", 8080, *[p for p in range(PARTITIONS) if p != partition]),
                    _member("b", 9090, partition),
                ),
                partitions=PARTITIONS,
                replicas=1,
                fetched_ms=clock[0],
            )
        )
        values = {"visits": IntSerde()}
        cluster = FakeCluster()
        cluster.create("changelog", PARTITIONS)
        admin = cluster.clients().admin({})
        topics = {"visits": "changelog"}

        view = queries.view
        assert view is not None

        def refresh(position: int, stable: int, high: int) -> None:
            cluster.ends[("changelog", partition)] = stable  # committed end (LSO)
            cluster.highs[("changelog", partition)] = high  # acknowledged end (HW)
            standbys.positions[("visits", partition)] = (position, high)
            queries.tend(admin, ask=True, changelogs=topics, standbys=standbys, **_GROUP)  # type: ignore[arg-type]
            queries.publish_view(view)  # the fake group has no members: keep the test's
            queries.refresh_local({}, standbys, values)  # type: ignore[arg-type]

        refresh(10, 10, 10)  # holds everything acknowledged by 1_000_000
        clock[0] += 300
        refresh(10, 14, 15)  # 4 committed since, 1 more open: caught up 300 ms ago

        with pytest.raises(NotOwnerError) as unbounded:  # no bound given: standbys not read
            queries.get("visits", key)
        assert not isinstance(unbounded.value, StandbyTooStaleError)
        assert unbounded.value.active == HostInfo("h", 9090)

        result = queries.get("visits", key, max_lag_records=4)
        assert (result.value, result.active, result.lag.offset_lag) == (7, False, 4)
        assert (result.lag.current_offset, result.lag.end_offset) == (10, 14)
        assert result.staleness_ms == 300
        assert queries.get("visits", key, max_staleness_ms=300).value == 7

        with pytest.raises(StandbyTooStaleError) as records:
            queries.get("visits", key, max_lag_records=3)
        assert (records.value.lag_records, records.value.max_lag_records) == (4, 3)
        assert records.value.active == HostInfo("h", 9090)
        with pytest.raises(StandbyTooStaleError) as stale:
            queries.get("visits", key, max_lag_records=100, max_staleness_ms=299)
        assert (stale.value.staleness_ms, stale.value.max_staleness_ms) == (300, 299)

        clock[0] += 50
        # At the committed end, but the transaction open at the last two requests may have
        # been acknowledged without its markers yet: not caught up with either request.
        refresh(14, 14, 16)
        result = queries.get("visits", key, max_lag_records=0)
        assert (result.lag.offset_lag, result.staleness_ms) == (0, 350)

        clock[0] += 20
        refresh(16, 16, 16)  # every acknowledged record applied: caught up now
        assert queries.get("visits", key, max_lag_records=0, max_staleness_ms=0).staleness_ms == 0
        clock[0] += 20  # no refresh since: the claim ages
        assert queries.get("visits", key, max_lag_records=0).staleness_ms == 20
    finally:
        engine.close()


def test_a_standby_never_caught_up_has_no_staleness_and_fails_a_time_bound(
    tmp_path: Path,
) -> None:
    queries = InteractiveQueries(
        key_serdes={"visits": StringSerde()}, endpoint=None, wall_clock_ms=lambda: 5
    )
    engine = RocksDBEngine.open(tmp_path / "standby", config=RocksDBConfig(), cache=None)
    try:
        standbys = _Standbys({("visits", p): engine for p in range(1)})
        standbys.positions[("visits", 0)] = (50, 50)  # at the high watermark
        queries.publish_view(
            GroupView.of((_member("b", 9090, 0),), partitions=1, replicas=1, fetched_ms=5)
        )
        # no stable offset asked for yet: measured against the high watermark, never fresh
        queries.refresh_local({}, standbys, {"visits": IntSerde()})  # type: ignore[arg-type]
        assert queries.get("visits", "k", max_lag_records=0).lag.caught_up_ms is None
        cluster = FakeCluster()
        cluster.create("changelog", 1)
        cluster.ends[("changelog", 0)] = 80
        queries.tend(
            cluster.clients().admin({}),
            ask=True,
            changelogs={"visits": "changelog"},
            standbys=standbys,  # type: ignore[arg-type]
            **_GROUP,
        )
        queries.publish_view(  # the fake group has no members: the test's view again
            GroupView.of((_member("b", 9090, 0),), partitions=1, replicas=1, fetched_ms=5)
        )
        queries.refresh_local({}, standbys, {"visits": IntSerde()})  # type: ignore[arg-type]
        with pytest.raises(StandbyTooStaleError) as caught:
            queries.get("visits", "k", max_staleness_ms=1_000_000)
        assert caught.value.staleness_ms is None
        assert queries.get("visits", "k", max_lag_records=30).lag.offset_lag == 30
    finally:
        engine.close()


class _SlowAdmin:
    """An admin client whose answers arrive when the test says (pending futures)."""

    def __init__(self) -> None:
        self.described: list[Future[Any]] = []

    def describe_consumer_groups(self, groups: list[str], **_kw: Any) -> dict[str, Future[Any]]:
        future: Future[Any] = Future()
        self.described.append(future)
        return {groups[0]: future}


class _Description:
    def __init__(self, members: list[MemberDescription]) -> None:
        self.members = members


def test_tend_never_waits_for_the_broker_and_publishes_what_arrived() -> None:
    clock = [1000]
    queries = InteractiveQueries(
        key_serdes={"visits": StringSerde()}, endpoint=None, wall_clock_ms=lambda: clock[0]
    )
    admin = _SlowAdmin()

    def tend(ask: bool) -> None:
        queries.tend(admin, ask=ask, changelogs={}, standbys=None, **_GROUP)

    tend(ask=True)  # asks, returns at once
    assert len(admin.described) == 1
    assert queries.view is None
    clock[0] = 1500
    tend(ask=True)  # still out: not asked twice
    assert len(admin.described) == 1
    admin.described[0].set_result(_Description([_other("m-1", "10.0.0.9:80", [0, 1, 2, 3])]))
    tend(ask=False)
    view = queries.view
    assert view is not None
    assert view.fetched_ms == 1000  # when it was asked, not when it arrived
    assert queries.metadata_for_partition("visits", 2).active == HostInfo("10.0.0.9", 80)
    tend(ask=True)
    admin.described[1].set_exception(RuntimeError("coordinator moved"))
    tend(ask=False)  # a failed answer keeps the last view
    assert queries.view is view
    tend(ask=True)
    assert len(admin.described) == 3
