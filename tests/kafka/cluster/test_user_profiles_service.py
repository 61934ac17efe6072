"""The distributed user-profile service on the broker: three uvicorn processes, httpx clients.

Every request goes to a random instance (no load balancer); an instance that
does not own the key proxies it to the owner (``examples.user_profiles.routing``).
Writers each own a set of users and write them one request at a time, so a
user's writes are ordered and every attempt is known: ``seq`` counts a user's
attempts, and a write sets ``x`` and ``y`` to its ``seq`` (a half-applied
write would show them apart).  The checks:

* **acknowledged writes survive**: at the end, each user's ``seq`` is its last
  acknowledged one or a later attempt that got no 2xx (a write that was not
  acknowledged may still have taken effect);
* **routed reads are correct**: a read served by the owner shows at least the
  ``seq`` of every write acknowledged before the read was sent, and nothing
  that was not attempted before it returned;
* **standby reads stay within their declared staleness**: a read served by a
  standby says how stale it is (``X-Statestore-Staleness-Ms``), at most the
  bound asked for, and shows every write acknowledged before *send time
  minus that staleness*;
* after a ``kill -9`` of one instance under that load, **how long until every
  key is answerable** again, for reads and for writes (printed, bounded);
* **a fenced instance refuses writes**: an instance paused (SIGSTOP) until the
  others own its partitions, then resumed, answers every write sent to it
  while it was stopped ``503``/``421``, never 2xx (they carry the forwarded
  header, so it must decide itself and cannot proxy); a write in flight at the
  stop may have committed just before it; every write it did acknowledge is
  present.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from kafka_harness.broker import KafkaBroker, free_port
from statestore.partitioner import partition_for

REPO = Path(__file__).resolve().parents[3]
PARTITIONS = 6
USERS = [f"user-{n:02d}" for n in range(36)]
WRITERS = 6
READERS = 4
STALE_BOUND_MS = 3000
"""The ``max_staleness_ms`` half of the reads ask for (a standby may answer them)."""
CLOCK_SLACK_S = 0.01
"""Wall-clock rounding between the client's and the server's millisecond stamps."""


class Instance:
    """One service process and its stdout (a reader thread waits for ``listening on``)."""

    def __init__(self, name: str, port: int, argv: list[str], log: Path) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            start_new_session=True,
        )
        self.listening = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("listening on"):
                self.listening.set()

    def kill9(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: every thread stops, heartbeats too (the broker will declare it dead)."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill9()
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


@pytest.fixture
def service(cluster: KafkaBroker, tmp_path: Path) -> Iterator[Callable[[str], list[Instance]]]:
    """``start(app)``: three instances of application ``app``, listening; stopped at the end."""
    started: list[Instance] = []

    def start(app: str) -> list[Instance]:
        mine = _start(cluster, tmp_path, app)
        started.extend(mine)
        for instance in mine:
            assert instance.listening.wait(120), f"{instance.name} did not start"
        return mine

    try:
        yield start
    finally:
        for instance in started:
            instance.resume()
            instance.stop()


def _start(cluster: KafkaBroker, tmp_path: Path, app: str) -> list[Instance]:
    started = []
    for n in range(3):
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "examples.user_profiles.cluster",
            "--bootstrap",
            cluster.bootstrap_servers,
            "--app",
            app,
            "--instance",
            f"i{n}",
            "--state-dir",
            str(tmp_path / f"state-i{n}"),
            "--port",
            str(port),
            "--partitions",
            str(PARTITIONS),
            "--standbys",
            "1",
        ]
        started.append(Instance(f"i{n}", port, argv, tmp_path / f"{app}-i{n}.stderr"))
    return started


@attrs.define
class Attempt:
    user: str
    seq: int
    sent: float
    done: float = 0.0
    status: int | None = None


@attrs.define
class Model:
    """Every write attempt, by user, in order; and what the checks found."""

    attempts: dict[str, list[Attempt]] = attrs.field(factory=lambda: {u: [] for u in USERS})
    violations: list[str] = attrs.field(factory=list)
    reads: dict[str, int] = attrs.field(factory=dict)
    visibility_lag_s: float = 0.0
    """The most a write acknowledged before a standby read's horizon was missing from it."""

    def acked_before(self, user: str, moment: float) -> int:
        acked = [a.seq for a in self.attempts[user] if _ok(a.status) and a.done < moment]
        return max(acked, default=0)

    def started_before(self, user: str, moment: float) -> int:
        return max((a.seq for a in self.attempts[user] if a.sent < moment), default=0)


def _ok(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


async def _writer(
    http: httpx.AsyncClient, model: Model, users: list[str], targets: list[Instance], stop: Any
) -> None:
    while not stop.is_set():
        user = random.choice(users)
        history = model.attempts[user]
        seq = len(history) + 1
        attempt = Attempt(user=user, seq=seq, sent=time.time())
        history.append(attempt)
        target = random.choice(targets)
        try:
            answer = await http.put(f"{target.url}/users/{user}", json={"x": seq, "y": seq})
            attempt.status = answer.status_code
            if _ok(answer.status_code):
                fields = answer.json()["fields"]
                if fields != {"x": seq, "y": seq}:
                    model.violations.append(f"{user} write {seq} answered {fields}")
        except httpx.HTTPError:
            attempt.status = None
        attempt.done = time.time()


async def _reader(
    http: httpx.AsyncClient, model: Model, targets: list[Instance], stop: Any
) -> None:
    while not stop.is_set():
        user = random.choice(USERS)
        bounded = random.random() < 0.5
        query = f"?max_staleness_ms={STALE_BOUND_MS}" if bounded else ""
        sent = time.time()
        try:
            answer = await http.get(f"{random.choice(targets).url}/users/{user}{query}")
        except httpx.HTTPError:
            continue
        done = time.time()
        role = answer.headers.get("x-statestore-role", "")
        if answer.status_code not in (200, 404):
            model.reads["refused"] = model.reads.get("refused", 0) + 1
            continue
        model.reads[role] = model.reads.get(role, 0) + 1
        seq = 0
        if answer.status_code == 200:
            fields = answer.json()["fields"]
            seq = fields["x"]
            if fields["y"] != seq:
                model.violations.append(f"{user}: half-applied {fields}")
        if seq > model.started_before(user, done):
            model.violations.append(f"{user}: read {seq}, never written before the read ended")
        if role == "active":
            floor = model.acked_before(user, sent)
            if seq < floor:
                model.violations.append(f"{user}: owner read {seq} after ack of {floor}")
        elif role == "standby":
            staleness_s = int(answer.headers["x-statestore-staleness-ms"]) / 1000
            if staleness_s * 1000 > STALE_BOUND_MS:
                model.violations.append(f"{user}: standby staleness {staleness_s}s over the bound")
            horizon = sent - staleness_s - CLOCK_SLACK_S  # committed before it: must be here
            missing = [
                a.done
                for a in model.attempts[user]
                if _ok(a.status) and a.seq > seq and a.done < horizon
            ]
            if missing:  # acknowledged before the horizon, not yet visible to the standby
                behind_s = horizon - min(missing)
                model.visibility_lag_s = max(model.visibility_lag_s, behind_s)
                model.violations.append(
                    f"{user}: standby {answer.headers.get('x-statestore-served-by')} read"
                    f" {seq} declared {staleness_s}s stale, but a write acknowledged"
                    f" {behind_s:.3f}s before that horizon is missing"
                )
        else:
            model.violations.append(f"{user}: answer without a role ({answer.status_code})")


async def _wait_balanced(
    http: httpx.AsyncClient, targets: list[Instance], timeout_s: float
) -> None:
    """Until every instance runs its share of the partitions, unchanged for 2 s."""
    deadline = time.monotonic() + timeout_s
    share = PARTITIONS // len(targets)
    stable_since, last = time.monotonic(), None
    while True:
        seen: list[list[int]] = []
        with contextlib.suppress(httpx.HTTPError):
            for target in targets:
                seen.append((await http.get(f"{target.url}/health")).json()["active"])
        if seen != last:
            stable_since, last = time.monotonic(), seen
        spread = len(seen) == len(targets) and all(len(active) == share for active in seen)
        if spread and time.monotonic() - stable_since >= 2:
            return
        assert time.monotonic() < deadline, f"partitions not spread in {timeout_s}s: {seen}"
        await asyncio.sleep(0.2)


async def _answerable(
    http: httpx.AsyncClient, targets: list[Instance], users: dict[int, str], method: str
) -> bool:
    """Whether one request per partition, each to a random live instance, is answered 2xx."""
    for partition, user in users.items():
        target = random.choice(targets)
        try:
            if method == "GET":
                answer = await http.get(f"{target.url}/users/{user}")
                good = answer.status_code == 200
            else:
                answer = await http.put(f"{target.url}/users/{user}", json={"probe": partition})
                good = _ok(answer.status_code)
        except httpx.HTTPError:
            return False
        if not good:
            return False
    return True


async def _scenario(instances: list[Instance], how: str) -> dict[str, Any]:
    model = Model()
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=30.0, limits=limits) as http:
        await _wait_balanced(http, instances, timeout_s=120)
        probes = {}  # one probe user per partition, outside the writers' users
        n = 0
        while len(probes) < PARTITIONS:
            user = f"probe-{n}"
            probes.setdefault(partition_for(user.encode(), PARTITIONS), user)
            n += 1
        for user in probes.values():  # created before the kill: a read must find them
            answer = await http.put(f"{instances[0].url}/users/{user}", json={"probe": -1})
            assert _ok(answer.status_code), answer.text  # the group is stable
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(_writer(http, model, USERS[w::WRITERS], instances, stop))
            for w in range(WRITERS)
        ] + [asyncio.create_task(_reader(http, model, instances, stop)) for _ in range(READERS)]
        await asyncio.sleep(8)
        before = dict(model.reads)
        acked_before_kill = sum(_ok(a.status) for h in model.attempts.values() for a in h)
        latencies = sorted(  # acknowledged writes before the kill, seconds
            a.done - a.sent for h in model.attempts.values() for a in h if _ok(a.status)
        )

        victim = instances[1]
        if how == "kill-9":
            victim.kill9()
        else:  # a clean stop: it commits, leaves the group, answers what it holds
            victim.proc.send_signal(signal.SIGTERM)
        killed = time.monotonic()
        live = [i for i in instances if i is not victim]
        recovered: dict[str, float] = {}
        while len(recovered) < 2:
            for method in ("GET", "PUT"):
                if method not in recovered and await _answerable(http, live, probes, method):
                    recovered[method] = time.monotonic() - killed
            assert time.monotonic() - killed < 150, f"not answerable in 150 s: {recovered}"
            await asyncio.sleep(0.1)
        await asyncio.sleep(4)  # load on the new owners
        stop.set()
        await asyncio.gather(*tasks)

        final: dict[str, int] = {}
        for user in USERS:
            seen = set()
            for target in live:
                answer = await http.get(f"{target.url}/users/{user}")
                assert answer.status_code in (200, 404), answer.text
                seen.add(answer.json()["fields"]["x"] if answer.status_code == 200 else 0)
            assert len(seen) == 1, f"{user}: the instances disagree: {seen}"
            final[user] = seen.pop()
    return {
        "model": model,
        "final": final,
        "recovered": recovered,
        "reads_before_kill": before,
        "acked_before_kill": acked_before_kill,
        "write_ms": (
            1000 * latencies[len(latencies) // 2],
            1000 * latencies[int(len(latencies) * 0.99)],
        ),
    }


@pytest.mark.parametrize("how", ["kill-9", "sigterm"])
def test_one_of_three_instances_stops_under_load(
    service: Callable[[str], list[Instance]], how: str
) -> None:
    outcome = asyncio.run(_scenario(service(f"profiles-{how}"), how))
    model: Model = outcome["model"]
    final: dict[str, int] = outcome["final"]
    acked = 0
    for user, history in model.attempts.items():
        last = max((a.seq for a in history if _ok(a.status)), default=0)
        acked += sum(_ok(a.status) for a in history)
        unacked_after = {a.seq for a in history if a.seq > last and not _ok(a.status)}
        assert final[user] == last or final[user] in unacked_after, (
            f"{user}: final seq {final[user]}, last acknowledged {last}, unacknowledged after it"
            f" {sorted(unacked_after)}"
        )
    recovered = outcome["recovered"]
    print(
        f"\n{how}: acknowledged writes: {acked} ({outcome['acked_before_kill']} before the stop);"
        f" reads: {model.reads} (before the kill {outcome['reads_before_kill']});"
        f" every key readable {recovered['GET']:.2f}s and writable {recovered['PUT']:.2f}s"
        f" after the {how}; acknowledged writes before it took p50 {outcome['write_ms'][0]:.0f}"
        f" / p99 {outcome['write_ms'][1]:.0f} ms; acknowledged writes a standby missed at most"
        f" {model.visibility_lag_s:.3f}s before its declared horizon"
    )
    assert not model.violations, model.violations[:10]
    assert outcome["acked_before_kill"] > 0
    assert acked > outcome["acked_before_kill"]  # writes acknowledged after the kill too
    assert model.reads.get("standby", 0) > 0, "no read was served by a standby"
    assert model.reads.get("active", 0) > 0


async def _zombie_scenario(instances: list[Instance]) -> dict[str, Any]:
    """Writes to one instance (never proxied); SIGSTOP it, send it more writes while it is
    stopped, wait until the others own its partitions, SIGCONT: what does it answer?"""
    zombie, survivors = instances[2], instances[:2]
    model = Model()
    forwarded = {"x-statestore-forwarded-by": "test"}  # the zombie must decide itself
    # a new connection per request: a request sent on a kept-alive connection while the server
    # is paused finds the connection closed by uvicorn's keep-alive timer when it resumes
    fresh = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=60.0, limits=fresh) as http:
        await _wait_balanced(http, instances, timeout_s=120)
        owned = set((await http.get(f"{zombie.url}/health")).json()["active"])
        users = [
            u
            for u in (f"z-{n:03d}" for n in range(400))
            if partition_for(u.encode(), PARTITIONS) in owned
        ]
        writers, held_users = users[:WRITERS], users[WRITERS : 2 * WRITERS]
        resumed_at: list[float] = []

        async def put(user: str) -> Attempt:
            history = model.attempts.setdefault(user, [])
            attempt = Attempt(user=user, seq=len(history) + 1, sent=time.time())
            history.append(attempt)
            body = {"x": attempt.seq, "y": attempt.seq}
            try:
                answer = await http.put(f"{zombie.url}/users/{user}", json=body, headers=forwarded)
                attempt.status = answer.status_code
                said = str(answer.status_code) if _ok(answer.status_code) else answer.text[:50]
            except httpx.HTTPError as exc:
                attempt.status = None
                said = type(exc).__name__
            attempt.done = time.time()
            if attempt.sent < resumed_at[0] if resumed_at else True:
                model.reads[said] = model.reads.get(said, 0) + 1
            return attempt

        async def write(user: str) -> None:
            while not resumed_at or time.time() < resumed_at[0] + 3:
                await put(user)
                await asyncio.sleep(0.01)

        tasks = [asyncio.create_task(write(user)) for user in writers]
        await asyncio.sleep(3)  # the zombie-to-be acknowledges as the owner
        acked_before = sum(_ok(a.status) for h in model.attempts.values() for a in h)
        zombie.pause()
        paused_at = time.time()
        model.reads.clear()  # from now on: the answers to writes sent before the resume
        held = [asyncio.create_task(put(user)) for user in held_users]  # sent while stopped
        stopped = time.monotonic()
        await _wait_balanced(http, survivors, timeout_s=120)  # they own its partitions now
        taken_over_s = time.monotonic() - stopped
        await asyncio.sleep(1)
        resumed_at.append(time.time())
        zombie.resume()
        await asyncio.gather(*held, *tasks)
        final = {}
        for user in writers + held_users:
            answer = await http.get(f"{survivors[0].url}/users/{user}")
            final[user] = answer.json()["fields"]["x"] if answer.status_code == 200 else 0
    everything = [a for history in model.attempts.values() for a in history]
    # sent while it was stopped: nothing of them can have been committed before the stop
    held_attempts = [a for a in everything if paused_at < a.sent < resumed_at[0]]
    # sent before the stop, answered after it: committed before the stop, or not
    in_flight = [a for a in everything if a.sent < paused_at < a.done]
    return {
        "model": model,
        "held": held_attempts,
        "in_flight": in_flight,
        "final": final,
        "acked_before": acked_before,
        "taken_over_s": taken_over_s,
    }


def test_a_fenced_instance_refuses_the_writes_it_held(
    service: Callable[[str], list[Instance]],
) -> None:
    outcome = asyncio.run(_zombie_scenario(service("profiles-zombie")))
    model: Model = outcome["model"]
    held: list[Attempt] = outcome["held"]
    in_flight: list[Attempt] = outcome["in_flight"]
    print(
        f"\nacknowledged before the pause: {outcome['acked_before']}; partitions taken over"
        f" {outcome['taken_over_s']:.2f}s after SIGSTOP; writes sent to it while stopped:"
        f" {len(held)}, in flight at the stop: {[a.status for a in in_flight]}; its answers"
        f" to both: {model.reads}"
    )
    assert outcome["acked_before"] > 0
    assert len(held) >= WRITERS  # at least the writes to its own users sent while stopped
    acknowledged = [a for a in held if _ok(a.status)]
    assert not acknowledged, f"the fenced instance acknowledged {acknowledged}"
    # every one reached the zombie's own logic and was refused: not acknowledged (503) or
    # not the owner (421), never a broken connection
    assert all(a.status in (421, 503) for a in held), [(a.user, a.status) for a in held]
    # a write in flight at the stop may have committed before it; acknowledged means present
    for user, final in outcome["final"].items():
        history = model.attempts[user]
        last = max((a.seq for a in history if _ok(a.status)), default=0)
        unacked_after = {a.seq for a in history if a.seq > last and not _ok(a.status)}
        assert final == last or final in unacked_after, (user, final, last, unacked_after)
