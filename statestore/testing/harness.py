"""Run a service in a child process, kill it with SIGKILL at a chosen point, reopen its state.

:class:`CrashHarness` is the parent side of a restore-after-crash test::

    def service(state_dir: Path, reporter: Reporter, n: int) -> None:   # module level
        with StateManager(state_dir) as manager:
            store = manager.store("counters")
            for i in range(n):
                store.put("i", i)
                store.commit()
                reporter.ack(i)            # i is now acknowledged

    run = harness.run(service, args=(1000,), kill_after_acks=10)
    with harness.restored("counters") as stores:
        assert stores["counters"]["i"] >= run.last_ack

Kill points (checked in this order, all optional):

- ``kill_after_acks=N``: as soon as the parent has received the N-th ack;
- ``kill_at_mark="label"``: as soon as the child called ``reporter.mark("label")``
  (together with ``kill_after_acks``: when both happened);
- ``kill_delay_s=t``: wait ``t`` seconds more (alone: ``t`` seconds after the
  service started; a random ``t`` gives a random kill moment).

With none of them the service runs to completion.  The child keeps running
between the trigger and the SIGKILL (the parent does not pause it), so it is
killed *somewhere after* the point, usually in the middle of its next commit:
that is the point of the exercise.  Acks still in the pipe when the child dies
are drained and counted.

The service function is pickled by reference: define it at module level in an
importable module (a test module is fine).  Children are started with the
``"spawn"`` method by default (``"forkserver"`` also works; ``"fork"`` is
refused, as forking a process with RocksDB and cleaner threads is unsafe).

Thread-safety: a harness is meant for one test thread.  Invariants: at most one
child is alive per harness, and none is alive once :meth:`CrashHarness.run`
returned or raised.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from statestore.testing.errors import ServiceExitError, ServiceFailedError, ServiceTimeoutError
from statestore.testing.process import (
    MSG_ACK,
    MSG_DONE,
    MSG_ERROR,
    MSG_MARK,
    MSG_STARTED,
    ServiceFunction,
    child_main,
)

if TYPE_CHECKING:
    from statestore.manager import StateManager

__all__ = ["CrashHarness", "CrashRun", "RestoredStores"]

_START_METHODS: Final = frozenset({"spawn", "forkserver"})
_JOIN_TIMEOUT_S: Final = 30.0


@attrs.frozen(kw_only=True)
class CrashRun:
    """What happened in one child run.

    ``acks`` are the acknowledged payloads in order (including those drained
    after the kill); ``marks`` the labels reported; ``killed`` whether the
    harness killed the child (``False``: the service returned first, and
    ``result`` is its return value); ``exitcode`` the child's exit code
    (``-9`` after a kill).
    """

    acks: tuple[Any, ...]
    marks: tuple[str, ...]
    killed: bool
    exitcode: int | None
    result: Any
    pid: int | None
    elapsed_s: float

    @property
    def ack_count(self) -> int:
        """Number of acknowledged payloads."""
        return len(self.acks)

    @property
    def last_ack(self) -> Any:
        """The last acknowledged payload, or ``None`` if nothing was acknowledged."""
        return self.acks[-1] if self.acks else None


class RestoredStores(Mapping[str, Any]):
    """The stores reopened after a crash, by name, and the manager that owns them."""

    def __init__(self, manager: StateManager, stores: Mapping[str, Any]) -> None:
        """Wrap ``stores`` (name -> store) opened by ``manager``."""
        self.manager = manager
        self._stores = dict(stores)

    def __getitem__(self, name: str) -> Any:
        """The store called ``name``."""
        return self._stores[name]

    def __iter__(self) -> Iterator[str]:
        """Store names."""
        return iter(self._stores)

    def __len__(self) -> int:
        """Number of stores."""
        return len(self._stores)


class CrashHarness:
    """Runs service functions in child processes over one state directory and kills them.

    ``runs`` keeps every :class:`CrashRun` of this harness, oldest first.
    """

    def __init__(
        self,
        state_dir: Path | str,
        *,
        start_method: str = "spawn",
        timeout_s: float = 60.0,
        preload: Sequence[str] = (),
    ) -> None:
        """Prepare a harness for ``state_dir`` (created if missing).

        ``preload`` (``"forkserver"`` only) names modules the fork server
        imports once, so that each child starts in a few milliseconds instead
        of re-importing them (e.g. ``["statestore.manager", "myservice"]``).
        The fork server is shared by the whole process: only the preload
        list in effect when it first starts counts.
        """
        if start_method not in _START_METHODS:
            raise ValueError(
                f"start_method must be one of {sorted(_START_METHODS)}, not {start_method!r}"
            )
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s!r}")
        self._state_dir = Path(state_dir)
        self._state_dir.mkdir(parents=True, exist_ok=True)
        self._context: SpawnContext | ForkServerContext = (
            multiprocessing.get_context("spawn")
            if start_method == "spawn"
            else multiprocessing.get_context("forkserver")
        )
        if preload:
            if start_method != "forkserver":
                raise ValueError("preload needs start_method='forkserver'")
            self._context.set_forkserver_preload(list(preload))
        self._timeout_s = timeout_s
        self._process: BaseProcess | None = None
        self.runs: list[CrashRun] = []

    @property
    def state_dir(self) -> Path:
        """The state directory every run and reopen uses."""
        return self._state_dir

    def run(
        self,
        service: ServiceFunction,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        kill_after_acks: int | None = None,
        kill_at_mark: str | None = None,
        kill_delay_s: float | None = None,
        timeout_s: float | None = None,
    ) -> CrashRun:
        """Run ``service(state_dir, reporter, *args, **kwargs)`` in a child; kill it at the point.

        Returns the :class:`CrashRun`.  Raises :class:`ServiceFailedError` if
        the service raised, :class:`ServiceExitError` if the child died on its
        own, :class:`ServiceTimeoutError` if it neither reached the kill point nor
        returned within ``timeout_s`` seconds of its start (it is killed first).
        """
        if kill_after_acks is not None and kill_after_acks < 0:
            raise ValueError(f"kill_after_acks must be >= 0, not {kill_after_acks}")
        if kill_delay_s is not None and kill_delay_s < 0:
            raise ValueError(f"kill_delay_s must be >= 0, not {kill_delay_s}")
        timeout = self._timeout_s if timeout_s is None else timeout_s
        wants_kill = (
            kill_after_acks is not None or kill_at_mark is not None or kill_delay_s is not None
        )
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=child_main,
            args=(sender, service, str(self._state_dir), tuple(args), dict(kwargs or {})),
            name=f"statestore-crash-{getattr(service, '__name__', 'service')}",
            daemon=True,
        )
        acks: list[Any] = []
        marks: list[str] = []
        started = time.monotonic()
        self._process = process
        try:
            process.start()
            sender.close()  # the child holds the only write end: EOF means it is gone
            outcome = _Outcome()
            kill_at: float | None = None
            deadline = started + timeout
            while True:
                now = time.monotonic()
                if (
                    wants_kill
                    and kill_at is None
                    and outcome.started
                    and (kill_after_acks is None or len(acks) >= kill_after_acks)
                    and (kill_at_mark is None or kill_at_mark in marks)
                ):
                    kill_at = now + (kill_delay_s or 0.0)
                if kill_at is not None and now >= kill_at:
                    _kill(process)
                    outcome.killed = True
                    break
                if now >= deadline:
                    _kill(process)
                    outcome.killed = outcome.timed_out = True
                    break
                wait = min(deadline, kill_at) if kill_at is not None else deadline
                if not receiver.poll(max(0.0, wait - now)):
                    continue
                if not _receive_one(receiver, acks, marks, outcome):
                    break  # EOF: the child is gone (returned, failed or died)
            _drain(receiver, acks, marks, outcome)
            process.join(_JOIN_TIMEOUT_S)
        finally:
            if process.is_alive():
                _kill(process)
            sender.close()  # idempotent; matters only if start() failed
            receiver.close()
            self._process = None
        run = CrashRun(
            acks=tuple(acks),
            marks=tuple(marks),
            killed=outcome.killed,
            exitcode=process.exitcode,
            result=outcome.result,
            # the child's own report, or the pid we spawned when it was killed before reporting
            pid=outcome.pid if outcome.pid is not None else process.pid,
            elapsed_s=time.monotonic() - started,
        )
        self.runs.append(run)
        if outcome.timed_out:
            raise ServiceTimeoutError(timeout, run.acks, run.marks)
        if outcome.error is not None and not outcome.killed:
            raise ServiceFailedError(outcome.error[0], outcome.error[1], run.acks)
        if not outcome.killed and not outcome.done:
            raise ServiceExitError(process.exitcode, run.acks)
        return run

    @contextlib.contextmanager
    def reopen(self, **manager_kwargs: Any) -> Iterator[StateManager]:
        """Open a :class:`~statestore.StateManager` on the state directory (closed on exit)."""
        from statestore.manager import StateManager  # noqa: PLC0415 - keeps the plugin import light

        with StateManager(self._state_dir, **manager_kwargs) as manager:
            yield manager

    @contextlib.contextmanager
    def restored(
        self,
        *names: str,
        manager_kwargs: Mapping[str, Any] | None = None,
        **store_kwargs: Any,
    ) -> Iterator[RestoredStores]:
        """Reopen the state directory and the stores ``names`` (restored), closed on exit.

        ``store_kwargs`` are passed to every ``manager.store(name, ...)``; for
        stores with different settings, use :meth:`reopen` and open them yourself.
        """
        with self.reopen(**dict(manager_kwargs or {})) as manager:
            stores = {name: manager.store(name, **store_kwargs) for name in names}
            yield RestoredStores(manager, stores)

    def close(self) -> None:
        """Kill a child still running (after an interrupted :meth:`run`); idempotent."""
        process, self._process = self._process, None
        if process is not None and process.is_alive():
            _kill(process)


@attrs.define
class _Outcome:
    started: bool = False
    pid: int | None = None
    done: bool = False
    killed: bool = False
    timed_out: bool = False
    result: Any = None
    error: tuple[str, str] | None = None


def _receive_one(
    receiver: Connection, acks: list[Any], marks: list[str], outcome: _Outcome
) -> bool:
    """Handle one message; ``False`` at EOF (or a message torn by the kill)."""
    try:
        kind, payload = receiver.recv()
    except (EOFError, OSError):
        return False
    except Exception:  # noqa: BLE001 - a message cut short by SIGKILL does not unpickle
        return False
    if kind == MSG_ACK:
        acks.append(payload)
    elif kind == MSG_MARK:
        marks.append(payload)
    elif kind == MSG_STARTED:
        outcome.started = True
        outcome.pid = payload
    elif kind == MSG_DONE:
        outcome.done = True
        outcome.result = payload
    elif kind == MSG_ERROR:
        outcome.error = payload
    return True


def _drain(receiver: Connection, acks: list[Any], marks: list[str], outcome: _Outcome) -> None:
    """Read what the child sent before it died (it is dead or exiting: EOF comes soon)."""
    while receiver.poll(_JOIN_TIMEOUT_S):
        if not _receive_one(receiver, acks, marks, outcome):
            return


def _kill(process: BaseProcess) -> None:
    """SIGKILL the child and reap it."""
    if process.pid is not None and process.exitcode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    process.join(_JOIN_TIMEOUT_S)
