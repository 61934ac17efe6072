"""Errors raised by :mod:`statestore.testing` (the crash-test helpers, not the stores).

The tree::

    CrashTestError
    ├── ServiceFailedError    the service function raised in the child process
    ├── ServiceTimeoutError   the child reached neither its kill point nor its end in time
    └── ServiceExitError      the child died on its own (signal or exit code) before its kill point

These describe the *test's* child process, never the state directory: what
the stores hold after a crash is checked by reopening them.
"""

from __future__ import annotations

__all__ = [
    "CrashTestError",
    "ServiceExitError",
    "ServiceFailedError",
    "ServiceTimeoutError",
]


class CrashTestError(Exception):
    """Base class of every error raised by :mod:`statestore.testing`."""


class ServiceFailedError(CrashTestError):
    """The service function raised an exception in the child process.

    ``exception_type`` is the qualified name of the exception class,
    ``traceback_text`` the child's formatted traceback, and ``acks`` the
    payloads the child acknowledged before it failed.
    """

    def __init__(self, exception_type: str, traceback_text: str, acks: tuple[object, ...]) -> None:
        super().__init__(
            f"the service raised {exception_type} in the child process "
            f"after {len(acks)} acknowledged commit(s):\n{traceback_text}"
        )
        self.exception_type = exception_type
        self.traceback_text = traceback_text
        self.acks = acks


class ServiceTimeoutError(CrashTestError):
    """The child neither reached its kill point nor returned within ``timeout_s``.

    The child was killed (SIGKILL) before this was raised.
    """

    def __init__(self, timeout_s: float, acks: tuple[object, ...], marks: tuple[str, ...]) -> None:
        super().__init__(
            f"the service neither reached its kill point nor returned within {timeout_s}s "
            f"({len(acks)} ack(s), marks {list(marks)!r}); it was killed"
        )
        self.timeout_s = timeout_s
        self.acks = acks
        self.marks = marks


class ServiceExitError(CrashTestError):
    """The child process died before its kill point without reporting a result.

    ``exitcode`` is the child's exit code (negative: killed by that signal).
    """

    def __init__(self, exitcode: int | None, acks: tuple[object, ...]) -> None:
        super().__init__(
            f"the service process died on its own with exit code {exitcode} "
            f"after {len(acks)} acknowledged commit(s)"
        )
        self.exitcode = exitcode
        self.acks = acks
