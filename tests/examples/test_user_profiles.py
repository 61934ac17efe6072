"""The user-profile service: its ASGI API in process, the real server under load, restarts, kill -9."""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from starlette.routing import Route

from changelog.errors import LogStorageError
from changelog.fs import files
from examples.user_profiles.app import OPENAPI, make_app
from examples.user_profiles.service import (
    STORE_NAME,
    NotFoundError,
    Profile,
    ProfileService,
    open_profiles,
)
from statestore import StateManager, TtlSettings
from statestore.aio import AsyncStateManager
from statestore.testing import CrashHarness
from tests.examples.services import profile_ops, profiles_service

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0
T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(make(), TIMEOUT_S)

    return asyncio.run(bounded())


@asynccontextmanager
async def serving(state_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The app over a real state directory, called in process through httpx's ASGI transport."""
    async with await AsyncStateManager.open(state_dir) as manager:
        service = ProfileService(await manager.store(STORE_NAME, value_type=Profile))
        transport = httpx.ASGITransport(app=make_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


def body(response: httpx.Response) -> Any:
    return response.json() if response.content else None


def test_crud_over_http(state_dir: Path) -> None:
    async def main() -> None:
        async with serving(state_dir) as client:
            r = await client.post("/users", json={"id": "alice", "name": "Alice", "age": 31})
            assert r.status_code == 201
            alice = r.json()
            assert (alice["fields"], alice["version"]) == ({"name": "Alice", "age": 31}, 1)
            r = await client.get("/users/alice")
            assert (r.status_code, r.json()) == (200, alice)
            assert (await client.post("/users", json={"id": "alice"})).status_code == 409
            r = await client.patch("/users/alice", json={"age": 32, "name": None, "city": "Oslo"})
            assert (r.status_code, r.json()["fields"], r.json()["version"]) == (
                200,
                {"age": 32, "city": "Oslo"},
                2,
            )
            r = await client.put("/users/alice", json={"name": "A."})
            assert (r.status_code, r.json()["fields"], r.json()["version"]) == (
                200,
                {"name": "A."},
                3,
            )
            r = await client.put("/users/bob", json={"name": "Bob"})
            assert (r.status_code, r.json()["version"]) == (201, 1)
            r = await client.delete("/users/alice")
            assert (r.status_code, r.content) == (204, b"")
            assert (await client.get("/users/alice")).status_code == 404
            assert (await client.delete("/users/alice")).status_code == 404
            assert (await client.patch("/users/alice", json={"x": 1})).status_code == 404
            assert (await client.get("/health")).json() == {"status": "ok"}

    run(main)


def test_list_pages_through_users_in_id_order(state_dir: Path) -> None:
    async def main() -> None:
        async with serving(state_dir) as client:
            for name in ["carol", "alice", "bob", "dave", "al"]:
                assert (await client.put(f"/users/{name}", json={"n": name})).status_code == 201
            page = (await client.get("/users?limit=2")).json()
            assert ([u["id"] for u in page["users"]], page["next"]) == (["al", "alice"], "alice")
            page = (await client.get("/users?limit=2&after=alice")).json()
            assert [u["id"] for u in page["users"]] == ["bob", "carol"]
            page = (await client.get("/users?limit=2&after=carol")).json()
            assert ([u["id"] for u in page["users"]], page["next"]) == (["dave"], None)
            page = (await client.get("/users?prefix=al")).json()
            assert [u["id"] for u in page["users"]] == ["al", "alice"]

    run(main)


BAD_REQUESTS = [
    ("POST", "/users", None, b"{nope", 400, "not valid JSON"),
    ("POST", "/users", {"name": "no id"}, None, 400, "needs an 'id'"),
    ("POST", "/users", {"id": "has space"}, None, 400, "invalid user id"),
    ("POST", "/users", {"id": "x", "bad name!": 1}, None, 400, "invalid field name"),
    ("POST", "/users", {"id": "x", "n": None}, None, 400, "is null"),
    ("POST", "/users", {"id": "x", "big": 2**70}, None, 400, "cannot store"),
    ("PUT", "/users/x", [1, 2], None, 400, "JSON object"),
    ("GET", "/users?limit=zero", None, None, 400, "limit"),
    ("GET", "/nowhere", None, None, 404, "no such resource"),
    ("DELETE", "/users", None, None, 405, "not allowed"),
    ("POST", "/users", None, b"x" * (64 * 1024 + 1), 413, "body over"),
]


def test_bad_requests_get_clear_errors_and_change_nothing(state_dir: Path) -> None:
    async def main() -> None:
        async with serving(state_dir) as client:
            for method, path, json_body, raw, status, fragment in BAD_REQUESTS:
                r = await client.request(method, path, json=json_body, content=raw)
                assert r.status_code == status, (method, path, r.text)
                assert fragment in r.json()["error"], (method, path, r.text)
                if status == 405:
                    assert r.headers["allow"] == "GET, POST"
            assert (await client.get("/users")).json()["users"] == []

    run(main)


def test_the_openapi_document_lists_exactly_the_routes(state_dir: Path) -> None:
    async def main() -> None:
        async with await AsyncStateManager.open(state_dir) as manager:
            app = make_app(ProfileService(await manager.store(STORE_NAME, value_type=Profile)))
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                assert (await client.get("/openapi.json")).json() == OPENAPI
        routes = {
            route.path: {m.lower() for m in route.methods or ()} - {"head"}
            for route in app.routes
            if isinstance(route, Route)
        }
        documented = {
            path: {m for m in item if m != "parameters"} for path, item in OPENAPI["paths"].items()
        }
        assert documented == routes

    run(main)


def test_a_failed_commit_answers_503_and_is_not_acknowledged(state_dir: Path) -> None:
    def disk_full(step: str, path: Path) -> None:
        if step == "segment.append":
            raise LogStorageError(path, step, OSError(errno.ENOSPC, "No space left on device"))

    async def main() -> None:
        async with serving(state_dir) as client:
            assert (await client.put("/users/alice", json={"a": 1})).status_code == 201
            with files.inject_faults(disk_full):
                r = await client.put("/users/bob", json={"b": 1})
            assert r.status_code == 503
            assert "No space left on device" in r.json()["error"]
            assert (await client.put("/users/carol", json={"c": 1})).status_code == 503

    run(main)
    with StateManager(state_dir) as manager:
        assert list(manager.store(STORE_NAME, value_type=Profile).keys()) == ["alice"]


def test_profiles_survive_a_clean_restart(state_dir: Path) -> None:
    async def first() -> None:
        async with await AsyncStateManager.open(state_dir) as manager:
            service = ProfileService(await manager.store(STORE_NAME, value_type=Profile))
            await service.create("alice", {"name": "Alice"})
            await service.create("bob", {"name": "Bob"})
            await service.delete("bob")

    async def second() -> None:
        async with await AsyncStateManager.open(state_dir) as manager:
            service = ProfileService(await manager.store(STORE_NAME, value_type=Profile))
            assert (await service.get("alice")).fields == {"name": "Alice"}
            assert [p.user_id for p in await service.list()] == ["alice"]

    run(first)
    run(second)


def test_concurrent_updates_of_one_profile_lose_none(state_dir: Path) -> None:
    async def main() -> None:
        async with serving(state_dir) as client:
            await client.put("/users/u", json={"n": 0})

            async def bump(i: int) -> int:
                r = await client.patch("/users/u", json={f"f{i}": i})
                return int(r.json()["version"])

            versions = await asyncio.gather(*(bump(i) for i in range(40)))
            assert sorted(versions) == list(range(2, 42))  # each saw the one before it
            fields = (await client.get("/users/u")).json()["fields"]
            assert fields == {"n": 0, **{f"f{i}": i for i in range(40)}}

    run(main)


# --------------------------------------------------------------------------- real processes


def _start_server(state_dir: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.user_profiles",
            "--state-dir",
            str(state_dir),
            "--port",
            "0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("listening on http://127.0.0.1:"), line + (
        process.stderr.read() if process.stderr else ""
    )
    return process, line.split(" ", 2)[2].strip()


def _reap(process: subprocess.Popen[str]) -> str:
    process.wait(timeout=TIMEOUT_S)
    err = process.stderr.read() if process.stderr else ""
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    return err


class Load:
    """8 concurrent httpx clients writing and reading profiles; records what was acknowledged.

    Every write sets fields ``a`` and ``b`` to the same new number, by PUT (all fields) or
    PATCH: a profile with ``a != b`` would be a half-applied update.
    """

    def __init__(self, base: str, target: int, users: int = 16) -> None:
        self.base = base
        self.target = target
        self.reached = asyncio.Event()
        """Set once ``target`` writes were acknowledged."""
        self.users = [f"u{i:02d}" for i in range(users)]
        self.acked: dict[str, tuple[int, dict[str, Any]]] = {}  # user -> highest acked version
        self.seen: dict[str, int] = {}  # user -> highest version a GET returned
        self.errors: list[str] = []
        self.writes = 0

    def ack(self, user: str, profile: dict[str, Any]) -> None:
        if profile["fields"].get("a") != profile["fields"].get("b"):
            self.errors.append(f"half-applied write acknowledged: {profile}")
        if profile["version"] > self.acked.get(user, (0, {}))[0]:
            self.acked[user] = (profile["version"], profile["fields"])
        self.writes += 1
        if self.writes >= self.target:
            self.reached.set()

    async def client(self, seed: int, stop: asyncio.Event) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=self.base, timeout=30) as http:
            n = 0
            while not stop.is_set():
                user = rng.choice(self.users)
                n += 1
                value = seed * 1_000_000 + n
                try:
                    roll = rng.random()
                    if roll < 0.35:
                        r = await http.put(f"/users/{user}", json={"a": value, "b": value})
                    elif roll < 0.7:
                        r = await http.patch(f"/users/{user}", json={"a": value, "b": value})
                    else:
                        r = await http.get(f"/users/{user}")
                except httpx.TransportError:
                    return  # the server is gone (killed)
                if r.status_code in (200, 201) and r.request.method != "GET":
                    self.ack(user, r.json())
                elif r.status_code == 200:
                    profile = r.json()
                    if profile["fields"]["a"] != profile["fields"]["b"]:
                        self.errors.append(f"a read saw a half-applied update: {profile}")
                    self.seen[user] = max(self.seen.get(user, 0), profile["version"])
                elif r.status_code != 404:
                    self.errors.append(f"{r.request.method} {user}: {r.status_code} {r.text}")


async def _drive(load: Load, clients: int, end: Callable[[], None]) -> None:
    """Run the clients until ``load.target`` writes were acknowledged, then ``end()`` the server."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(load.client(seed, stop)) for seed in range(clients)]
    done = asyncio.create_task(asyncio.wait(tasks))
    await asyncio.wait(
        [asyncio.create_task(load.reached.wait()), done],
        timeout=TIMEOUT_S,
        return_when=asyncio.FIRST_COMPLETED,
    )
    end()
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT_S)


def _restored(state_dir: Path) -> dict[str, Profile]:
    with StateManager(state_dir) as manager:
        return dict(manager.store(STORE_NAME, value_type=Profile).items())


@pytest.mark.parametrize("kill", ["SIGKILL", "SIGTERM"])
def test_acknowledged_writes_survive_the_server_stopping_under_load(
    state_dir: Path, kill: str
) -> None:
    """8 clients; kill -9 (or a graceful SIGTERM) mid-load; every 2xx write is there after."""
    for trial in range(2):
        process, base = _start_server(state_dir)
        target = 150 * (trial + 1)
        load = Load(base, target)
        try:
            stopper = functools.partial(os.kill, process.pid, getattr(signal, kill))
            run(functools.partial(_drive, load, 8, stopper))
        finally:
            try:
                process.wait(timeout=TIMEOUT_S)  # a graceful stop finishes its requests first
            finally:
                if process.poll() is None:
                    os.kill(process.pid, signal.SIGKILL)
                err = _reap(process)
        assert load.errors == []
        assert load.writes >= target, err
        if kill == "SIGKILL":
            assert process.returncode == -signal.SIGKILL
        else:
            assert process.returncode == 0, err
            assert "stopped cleanly" in err
        restored = _restored(state_dir)
        for user, (version, fields) in load.acked.items():
            profile = restored[user]
            assert profile.version >= version, (user, profile, version)
            if profile.version == version:
                assert profile.fields == fields
            assert profile.fields["a"] == profile.fields["b"]
        for user, version in load.seen.items():  # a read never saw what a crash took back
            assert restored[user].version >= version


def test_a_second_server_on_the_same_state_dir_fails_clearly(state_dir: Path) -> None:
    process, _base = _start_server(state_dir)
    try:
        second = subprocess.run(
            [sys.executable, "-m", "examples.user_profiles", "--state-dir", str(state_dir)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        _reap(process)
    assert second.returncode == 1
    assert "error:" in second.stderr
    assert f"pid {process.pid}" in second.stderr
    assert "Traceback" not in second.stderr


def test_a_port_in_use_is_a_one_line_error(state_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "examples.user_profiles",
                "--state-dir",
                str(state_dir),
                "--port",
                str(port),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    assert result.returncode == 1
    assert f"error: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- statestore.testing


def model_after(seed: int, count: int, applied: int) -> dict[str, tuple[int, dict[str, Any]]]:
    """user -> (version, fields) after the first ``applied`` operations, without the service's code."""
    state: dict[str, tuple[int, dict[str, Any]]] = {}
    for action, user, fields in profile_ops(seed, count)[:applied]:
        if action == "replace":
            version = state[user][0] + 1 if user in state else 1
            state[user] = (version, dict(fields))
        elif action == "update" and user in state:
            version, old = state[user]
            merged = {**old, **{k: v for k, v in fields.items() if v is not None}}
            for k, v in fields.items():
                if v is None:
                    merged.pop(k, None)
            state[user] = (version + 1, merged)
        elif action == "delete":
            state.pop(user, None)
    return state


def test_restore_after_kill9_holds_exactly_the_acknowledged_operations(
    crash_harness: CrashHarness,
) -> None:
    kill_after_acks = 25
    seed, count = 5, 400
    result = crash_harness.run(
        profiles_service, args=(seed, count), kill_after_acks=kill_after_acks
    )
    assert result.killed
    acked = result.ack_count
    assert acked >= kill_after_acks
    with crash_harness.restored(STORE_NAME, value_type=Profile) as stores:
        restored = {key: (p.version, p.fields) for key, p in stores[STORE_NAME].items()}
    # Every acknowledged operation is there; at most the one in flight at the kill is too.
    assert restored in (model_after(seed, count, acked), model_after(seed, count, acked + 1))


def test_inactive_profiles_expire_with_the_ttl_option(state_dir: Path) -> None:
    """``--inactive-ttl-s``: a profile not written for the TTL is gone (reads do not keep it)."""
    clock = [1_000_000]
    ttl_ms = 60_000

    async def main() -> None:
        manager = await AsyncStateManager.open(state_dir, clock=lambda: clock[0])
        async with manager:
            service = ProfileService(await open_profiles(manager, inactive_ttl_ms=ttl_ms))
            await service.create("alice", {"name": "Alice"})
            await service.create("bob", {"name": "Bob"})
            clock[0] += ttl_ms // 2
            await service.update("bob", {"seen": 1})  # a write keeps bob alive
            await service.get("alice")  # a read does not keep alice alive
            clock[0] += ttl_ms // 2
            with pytest.raises(NotFoundError):
                await service.get("alice")
            assert [p.user_id for p in await service.list()] == ["bob"]
            await service.create("alice", {"name": "Alice again"})  # a new profile, version 1
            assert (await service.get("alice")).version == 1

    run(main)
    clock[0] += ttl_ms  # everything inactive by now, after a restart too
    with StateManager(state_dir, lambda: clock[0]) as manager:
        store = manager.ttl_store(STORE_NAME, ttl=TtlSettings(ttl_ms=ttl_ms), value_type=Profile)
        assert list(store.items()) == []
