"""The distributed service's routing without a broker: two instances' apps, in process.

Each app runs over a stand-in for its :class:`~examples.user_profiles.owner.ProfileOwner`
(a view of who owns which partition, a dict of committed profiles per
partition, a standby with a lag); the apps reach each other through httpx's
ASGI transport, mounted at their endpoints.  What is checked is the routing:
served here, proxied one hop, ``421`` on a second hop, ``503`` without an
owner, standby answers with their lag, the errors of bad requests.  The real
service is tested on a broker in ``tests/kafka/cluster/test_user_profiles_service.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from examples.user_profiles.owner import Answer, NotAcknowledgedError
from examples.user_profiles.routing import FORWARDED_BY, make_cluster_app
from statestore.kafka import (
    HostInfo,
    KeyQueryMetadata,
    LagInfo,
    NotOwnerError,
    QueryResult,
    StandbyTooStaleError,
)
from statestore.partitioner import partition_for

pytestmark = pytest.mark.timeout(60)

PARTITIONS = 4
A = HostInfo("a.test", 80)
B = HostInfo("b.test", 80)


class _Processor:
    def __init__(self, owner: _Owner) -> None:
        self._owner = owner

    def local_partitions(self, _store: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return tuple(sorted(self._owner.data)), tuple(sorted(self._owner.standby))


class _Owner:
    """What the routing asks of a ProfileOwner, over plain data."""

    def __init__(self, name: str, endpoint: HostInfo, owners: dict[int, HostInfo | None]) -> None:
        self.instance_id = name
        self.endpoint = endpoint
        self.owners = owners
        mine = [p for p, host in owners.items() if host == endpoint]
        self.data: dict[int, dict[str, Any]] = {p: {} for p in mine}
        self.standby: dict[int, tuple[dict[str, Any], int]] = {}
        self.failed: BaseException | None = None
        self.refuse_writes = False
        self.processor = _Processor(self)

    def metadata_for_key(self, user_id: str) -> KeyQueryMetadata:
        partition = partition_for(user_id.encode(), PARTITIONS)
        return KeyQueryMetadata(
            store="user-profiles",
            partition=partition,
            active=self.owners[partition],
            standbys=(),
            view_ms=0,
        )

    def query(
        self, user_id: str, *, max_lag_records: int | None, max_staleness_ms: int | None
    ) -> QueryResult[Any]:
        meta = self.metadata_for_key(user_id)
        p = meta.partition
        if p in self.data:
            lag = LagInfo(current_offset=-1, end_offset=-1, offset_lag=0, caught_up_ms=0)
            return QueryResult(
                value=self.data[p].get(user_id),
                store="user-profiles",
                partition=p,
                active=True,
                lag=lag,
                staleness_ms=0,
            )
        if p in self.standby and (max_lag_records is not None or max_staleness_ms is not None):
            values, behind = self.standby[p]
            if max_lag_records is not None and behind > max_lag_records:
                raise StandbyTooStaleError(
                    "user-profiles",
                    p,
                    meta.active,
                    (),
                    lag_records=behind,
                    staleness_ms=None,
                    max_lag_records=max_lag_records,
                    max_staleness_ms=max_staleness_ms,
                )
            lag = LagInfo(
                current_offset=10, end_offset=10 + behind, offset_lag=behind, caught_up_ms=0
            )
            return QueryResult(
                value=values.get(user_id),
                store="user-profiles",
                partition=p,
                active=False,
                lag=lag,
                staleness_ms=1234,
            )
        raise NotOwnerError("user-profiles", p, meta.active, (), "not here")

    async def submit(self, user_id: str, op: str, fields: dict[str, Any] | None) -> Answer:
        if self.refuse_writes:
            raise NotAcknowledgedError("partitions [1] lost")
        store = self.data[partition_for(user_id.encode(), PARTITIONS)]
        created = user_id not in store
        store[user_id] = {"id": user_id, "fields": fields, "by": self.instance_id}
        return Answer(201 if created else 200, store[user_id])


def _user_in(partition: int) -> str:
    n = 0
    while partition_for(f"u{n}".encode(), PARTITIONS) != partition:
        n += 1
    return f"u{n}"


class _Hosts(httpx.AsyncBaseTransport):
    """Sends each request to the app of its host (the apps are added after the client exists:
    each app proxies through that same client)."""

    def __init__(self) -> None:
        self.apps: dict[str, httpx.ASGITransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.apps[request.url.host].handle_async_request(request)


async def _with_apps(test: Any) -> None:
    owners: dict[int, HostInfo | None] = {0: A, 1: A, 2: B, 3: None}
    a, b = _Owner("a", A, owners), _Owner("b", B, owners)
    hosts = _Hosts()
    async with httpx.AsyncClient(transport=hosts) as http:
        hosts.apps["a.test"] = httpx.ASGITransport(make_cluster_app(a, http))  # type: ignore[arg-type]
        hosts.apps["b.test"] = httpx.ASGITransport(make_cluster_app(b, http))  # type: ignore[arg-type]
        await test(http, a, b)


def test_any_instance_answers_by_serving_or_proxying_one_hop() -> None:
    async def test(http: httpx.AsyncClient, a: _Owner, b: _Owner) -> None:
        user_a, user_b = _user_in(0), _user_in(2)
        put = await http.put(f"http://b.test/users/{user_a}", json={"x": 1})  # proxied to a
        assert put.status_code == 201
        assert put.json()["by"] == "a"
        assert put.headers["x-statestore-served-by"] == "a.test:80"
        got = await http.get(f"http://b.test/users/{user_a}")
        assert (got.status_code, got.json()["fields"]) == (200, {"x": 1})
        assert got.headers["x-statestore-role"] == "active"
        assert got.headers["x-statestore-partition"] == "0"
        assert (await http.put(f"http://b.test/users/{user_b}", json={"y": 2})).json()["by"] == "b"
        missing = await http.get(f"http://a.test/users/{_user_in(1)}")
        assert missing.status_code == 404
        assert missing.headers["x-statestore-served-by"] == "a.test:80"

    asyncio.run(_with_apps(test))


def test_a_forwarded_request_to_a_non_owner_is_misdirected_not_forwarded_again() -> None:
    async def test(http: httpx.AsyncClient, _a: _Owner, _b: _Owner) -> None:
        user_a = _user_in(0)
        for method in ("GET", "PUT"):
            answer = await http.request(
                method,
                f"http://b.test/users/{user_a}",
                json={"x": 1},
                headers={FORWARDED_BY: "a.test:80"},
            )
            assert answer.status_code == 421
            assert (answer.json()["owner"], answer.json()["partition"]) == ("a.test:80", 0)

    asyncio.run(_with_apps(test))


def test_without_an_owner_or_an_acknowledgement_the_answer_is_503_retry() -> None:
    async def test(http: httpx.AsyncClient, a: _Owner, _b: _Owner) -> None:
        orphan = _user_in(3)
        for method in ("GET", "PUT"):
            answer = await http.request(method, f"http://a.test/users/{orphan}", json={})
            assert (answer.status_code, answer.headers["retry-after"]) == (503, "1")
            assert "no owner" in answer.json()["error"]
        a.refuse_writes = True
        refused = await http.put(f"http://b.test/users/{_user_in(1)}", json={"x": 1})
        assert refused.status_code == 503
        assert refused.json()["error"] == "not acknowledged: partitions [1] lost"
        a.failed = RuntimeError("fenced")
        stopped = await http.put(f"http://a.test/users/{_user_in(1)}", json={"x": 1})
        assert stopped.status_code == 503
        assert "stopped" in stopped.json()["error"]
        assert (await http.get("http://a.test/health")).status_code == 503

    asyncio.run(_with_apps(test))


def test_a_standby_answers_within_the_bound_with_its_lag_else_the_owner() -> None:
    async def test(http: httpx.AsyncClient, a: _Owner, b: _Owner) -> None:
        user = _user_in(0)
        a.data[0][user] = {"id": user, "fields": {"v": "new"}}
        b.standby[0] = ({user: {"id": user, "fields": {"v": "old"}}}, 3)
        near = await http.get(f"http://b.test/users/{user}?max_lag_records=5")
        assert near.json()["fields"] == {"v": "old"}
        assert near.headers["x-statestore-role"] == "standby"
        assert near.headers["x-statestore-lag-records"] == "3"
        assert near.headers["x-statestore-staleness-ms"] == "1234"
        far = await http.get(f"http://b.test/users/{user}?max_lag_records=2")
        assert far.json()["fields"] == {"v": "new"}  # too stale here: the owner answered
        assert far.headers["x-statestore-role"] == "active"
        unbounded = await http.get(f"http://b.test/users/{user}")
        assert unbounded.headers["x-statestore-served-by"] == "a.test:80"
        health = (await http.get("http://b.test/health")).json()
        assert (health["active"], health["standby"]) == ([2], [0])

    asyncio.run(_with_apps(test))


def test_bad_requests_are_refused_before_routing() -> None:
    async def test(http: httpx.AsyncClient, _a: _Owner, _b: _Owner) -> None:
        cases = [
            ("GET", "http://a.test/users/-bad", None, 400),
            ("PUT", "http://a.test/users/ok", b"{nope", 400),
            ("PUT", "http://a.test/users/ok", b'{"f": null}', 400),
            ("GET", "http://a.test/users/ok?max_lag_records=x", None, 400),
            ("POST", "http://a.test/users", b'{"name": "no id"}', 400),
            ("GET", "http://a.test/users", None, 501),
        ]
        for method, url, body, status in cases:
            answer = await http.request(method, url, content=body)
            assert answer.status_code == status, (method, url, answer.text)
            assert "error" in answer.json()

    asyncio.run(_with_apps(test))
