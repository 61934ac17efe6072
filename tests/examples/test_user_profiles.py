"""The user-profile service: its HTTP API against a real server, restarts, and kill -9."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changelog.errors import LogStorageError
from changelog.fs import files
from examples.user_profiles.api import make_server
from examples.user_profiles.service import STORE_NAME, Profile, ProfileService
from statestore import StateManager
from statestore.testing import CrashHarness
from tests.examples.services import profile_ops, profiles_service

ROOT = Path(__file__).resolve().parents[2]


class Client:
    """A tiny JSON HTTP client over urllib (the standard library, as the server)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(
        self, method: str, path: str, body: object = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(self.base + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                payload = response.read()
                return response.status, json.loads(payload) if payload else None
        except urllib.error.HTTPError as exc:
            payload = exc.read()
            exc.close()
            return exc.code, json.loads(payload) if payload else None


@contextlib.contextmanager
def serving(state_dir: Path) -> Iterator[tuple[Client, StateManager]]:
    """A real server on 127.0.0.1 (free port) over a real state directory, in this process."""
    with StateManager(state_dir) as manager:
        service = ProfileService(manager.store(STORE_NAME, value_type=Profile))
        server = make_server(service, 0)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        try:
            yield Client(server.port), manager
        finally:
            server.shutdown()
            thread.join()
            server.server_close()


@pytest.fixture
def served(state_dir: Path) -> Iterator[tuple[Client, StateManager]]:
    """A fresh server per test."""
    with serving(state_dir) as pair:
        yield pair


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, StateManager]]:
    """One server for the bad-request cases (none of which may change anything)."""
    with serving(tmp_path_factory.mktemp("shared") / "state") as pair:
        yield pair


def test_crud_over_http(served: tuple[Client, StateManager]) -> None:
    client, _ = served
    status, alice = client.call("POST", "/users", {"id": "alice", "name": "Alice", "age": 31})
    assert status == 201
    assert alice["fields"] == {"name": "Alice", "age": 31}
    assert alice["version"] == 1

    assert client.call("GET", "/users/alice") == (200, alice)
    assert client.call("POST", "/users", {"id": "alice"})[0] == 409

    status, patched = client.call(
        "PATCH", "/users/alice", {"age": 32, "name": None, "city": "Oslo"}
    )
    assert status == 200
    assert patched["fields"] == {"age": 32, "city": "Oslo"}
    assert patched["version"] == 2

    status, replaced = client.call("PUT", "/users/alice", {"name": "A."})
    assert (status, replaced["fields"], replaced["version"]) == (200, {"name": "A."}, 3)
    status, created = client.call("PUT", "/users/bob", {"name": "Bob"})
    assert (status, created["version"]) == (201, 1)

    assert client.call("DELETE", "/users/alice") == (204, None)
    assert client.call("GET", "/users/alice")[0] == 404
    assert client.call("DELETE", "/users/alice")[0] == 404
    assert client.call("PATCH", "/users/alice", {"x": 1})[0] == 404


def test_list_pages_through_users_in_id_order(served: tuple[Client, StateManager]) -> None:
    client, _ = served
    for name in ["carol", "alice", "bob", "dave", "al"]:
        assert client.call("PUT", f"/users/{name}", {"n": name})[0] == 201
    status, page = client.call("GET", "/users?limit=2")
    assert status == 200
    assert [u["id"] for u in page["users"]] == ["al", "alice"]
    assert page["next"] == "alice"
    _, page = client.call("GET", "/users?limit=2&after=alice")
    assert [u["id"] for u in page["users"]] == ["bob", "carol"]
    _, page = client.call("GET", "/users?limit=2&after=carol")
    assert ([u["id"] for u in page["users"]], page["next"]) == (["dave"], None)
    _, page = client.call("GET", "/users?prefix=al")
    assert [u["id"] for u in page["users"]] == ["al", "alice"]


@pytest.mark.parametrize(
    ("method", "path", "body", "raw", "status", "fragment"),
    [
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
    ],
)
def test_bad_requests_get_clear_errors_and_change_nothing(
    shared: tuple[Client, StateManager],
    method: str,
    path: str,
    body: object,
    raw: bytes | None,
    status: int,
    fragment: str,
) -> None:
    client, manager = shared
    got, payload = client.call(method, path, body, raw)
    assert got == status
    assert fragment in payload["error"]
    assert list(manager.store(STORE_NAME, value_type=Profile).keys()) == []


def test_health(served: tuple[Client, StateManager]) -> None:
    client, _ = served
    assert client.call("GET", "/health") == (200, {"status": "ok"})


def test_a_failed_commit_answers_503_and_is_not_acknowledged(state_dir: Path) -> None:
    def disk_full(step: str, path: Path) -> None:
        if step == "segment.append":
            raise LogStorageError(path, step, OSError(errno.ENOSPC, "No space left on device"))

    with serving(state_dir) as (client, _manager):
        assert client.call("PUT", "/users/alice", {"a": 1})[0] == 201
        with files.inject_faults(disk_full):
            status, payload = client.call("PUT", "/users/bob", {"b": 1})
        assert status == 503
        assert "No space left on device" in payload["error"]
        assert client.call("GET", "/users/alice")[0] == 503  # the store failed: restart
    with StateManager(state_dir) as manager:
        service = ProfileService(manager.store(STORE_NAME, value_type=Profile))
        assert [p.user_id for p in service.list()] == ["alice"]


def test_profiles_survive_a_clean_restart(state_dir: Path) -> None:
    with StateManager(state_dir) as manager:
        service = ProfileService(manager.store(STORE_NAME, value_type=Profile))
        service.create("alice", {"name": "Alice"})
        service.create("bob", {"name": "Bob"})
        service.delete("bob")
    with StateManager(state_dir) as manager:
        service = ProfileService(manager.store(STORE_NAME, value_type=Profile))
        assert service.get("alice").fields == {"name": "Alice"}
        assert [p.user_id for p in service.list()] == ["alice"]


# --------------------------------------------------------------------------- real processes, kill -9


def _start_server(state_dir: Path) -> tuple[subprocess.Popen[str], Client]:
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
    return process, Client(int(line.rsplit(":", 1)[1]))


def _reap(process: subprocess.Popen[str]) -> str:
    process.wait(timeout=30)
    err = process.stderr.read() if process.stderr else ""
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    return err


def test_acknowledged_requests_survive_kill9_of_the_server_process(state_dir: Path) -> None:
    process, client = _start_server(state_dir)
    model: dict[str, dict[str, Any]] = {}
    try:
        for i in range(40):
            user = f"u{i % 9}"
            if i % 5 == 4:
                status, _ = client.call("DELETE", f"/users/{user}")
                if status == 204:
                    del model[user]
            else:
                status, profile = client.call("PUT", f"/users/{user}", {"i": i})
                assert status in (200, 201)
                model[user] = profile["fields"]
    finally:
        os.kill(process.pid, signal.SIGKILL)
        _reap(process)
    assert process.returncode == -signal.SIGKILL

    process, client = _start_server(state_dir)
    try:
        status, page = client.call("GET", "/users?limit=1000")
        assert status == 200
        assert {u["id"]: u["fields"] for u in page["users"]} == model
    finally:
        process.send_signal(signal.SIGTERM)
        err = _reap(process)
    assert process.returncode == 0, err
    assert "stopped cleanly" in err


def test_a_second_server_on_the_same_state_dir_fails_clearly(state_dir: Path) -> None:
    process, _client = _start_server(state_dir)
    try:
        second = subprocess.run(
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
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        _reap(process)
    assert second.returncode == 1
    assert "error:" in second.stderr
    assert f"pid {process.pid}" in second.stderr
    assert "Traceback" not in second.stderr


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
    run = crash_harness.run(profiles_service, args=(seed, count), kill_after_acks=kill_after_acks)
    assert run.killed
    acked = run.ack_count
    assert acked >= kill_after_acks
    with crash_harness.restored(STORE_NAME, value_type=Profile) as stores:
        restored = {key: (p.version, p.fields) for key, p in stores[STORE_NAME].items()}
    # Every acknowledged operation is there; at most the one in flight at the kill is too.
    assert restored in (model_after(seed, count, acked), model_after(seed, count, acked + 1))


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
            timeout=30,
            check=False,
        )
    assert result.returncode == 1
    assert f"error: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
