"""The child side of a crash test: the :class:`Reporter` a service talks to, and the entry point.

A service function under test runs in a child process started by
:class:`~statestore.testing.CrashHarness`.  It is called as
``service(state_dir, reporter, *args, **kwargs)`` and tells the parent what
happened through ``reporter``:

- :meth:`Reporter.ack` right after a commit returned: the payload (anything
  picklable, e.g. the commit's sequence number) is *acknowledged*, and after
  any crash the restored state must contain it;
- :meth:`Reporter.mark` at interesting moments (``"restoring"``,
  ``"compacting"``) so that the parent can kill the child there.

Messages travel over a one-way :func:`multiprocessing.Pipe`.  The parent
keeps reading while the child runs and drains what is left after the kill, so
an ack sent just before the SIGKILL is still counted.

Thread-safety: a :class:`Reporter` may be used from several threads of the
child (a lock serializes the sends).
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

__all__ = ["MSG_ACK", "MSG_DONE", "MSG_ERROR", "MSG_MARK", "MSG_STARTED", "Reporter", "child_main"]

MSG_STARTED: Final = "started"
MSG_ACK: Final = "ack"
MSG_MARK: Final = "mark"
MSG_DONE: Final = "done"
MSG_ERROR: Final = "error"

ServiceFunction = Callable[..., object]
"""``service(state_dir: Path, reporter: Reporter, *args, **kwargs)``: a module-level function."""


class Reporter:
    """What a service running under a crash harness uses to report progress to the test.

    Thread-safety: thread-safe (``_lock`` guards the pipe's write end).
    """

    def __init__(self, connection: Connection) -> None:
        """Wrap the write end of the harness pipe (done by the harness, not by users)."""
        self._connection = connection
        self._lock = threading.Lock()
        self._acks = 0

    @property
    def acks_sent(self) -> int:
        """How many acks this process has reported so far."""
        return self._acks

    @property
    def pid(self) -> int:
        """The child's process id."""
        return os.getpid()

    def ack(self, payload: object = None) -> None:
        """Report that a commit has returned: ``payload`` is now acknowledged (durable).

        Call it *after* ``commit()`` (or the ``with store.transaction():``
        block) returned, never before: the harness checks that every
        acknowledged payload survives the crash.
        """
        self._send((MSG_ACK, payload))
        self._acks += 1

    def mark(self, label: str) -> None:
        """Report that the service reached the point ``label`` (kill points can wait for it)."""
        self._send((MSG_MARK, label))

    def _send(self, message: tuple[str, object]) -> None:
        with self._lock:
            self._connection.send(message)


def child_main(
    connection: Connection,
    service: ServiceFunction,
    state_dir: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> None:
    """Entry point of the child process: run ``service`` and report its outcome.

    Sends ``("started", pid)``, then the service's acks and marks, then
    ``("done", result)`` or ``("error", (type name, traceback text))``.
    """
    reporter = Reporter(connection)
    reporter._send((MSG_STARTED, os.getpid()))
    try:
        result = service(Path(state_dir), reporter, *args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - report everything, SystemExit included, to the parent
        name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        reporter._send((MSG_ERROR, (name, traceback.format_exc())))
        connection.close()
        raise SystemExit(1) from None
    try:
        reporter._send((MSG_DONE, result))
    except Exception as exc:  # noqa: BLE001 - an unpicklable result is reported, not lost
        reporter._send((MSG_ERROR, (type(exc).__qualname__, f"unpicklable result: {exc!r}")))
    connection.close()
