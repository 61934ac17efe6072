"""A cleaning pass whose CPU work runs in a child Python process (the service's default).

:func:`clean_in_process` takes the snapshot under ``log.lock`` (read-only
descriptors of the source segments, handed to the child), starts
``python -c "from changelog.cleaner.worker import main; ..."`` with the
request on stdin, waits for it while checking ``abort()``, then opens the
child's ``.cleaned`` segments and swaps them in (steps 3-4 of
:mod:`changelog.cleaner.clean`) itself.  The child (:func:`main`) lowers its CPU
priority by :data:`WORKER_NICENESS`, runs :func:`changelog.cleaner.clean.compact`
and replies with one JSON line on stdout.

Why a process: a pass is CPU-bound Python; in a thread it holds the GIL and
writers in the same process stall (see docs/operations.md).  A worker process
costs an interpreter start per pass and ~32 MB of RSS while it runs.

Thread-safety: :func:`clean_in_process` may run in any thread; two passes
over the same log must not run at once (the caller ensures it).
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import os
import select
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs

from changelog.cleaner.clean import (
    CleanerStats,
    Compacted,
    PassInput,
    SourceSegment,
    commit,
    compact,
    snapshot,
)
from changelog.cleaner.manager import LogToClean
from changelog.cleaner.throttle import Throttler
from changelog.config import CleanerConfig, LogConfig
from changelog.errors import (
    CleanerAbortedError,
    CleanerWorkerError,
    CorruptRecordError,
)
from changelog.fs import files
from changelog.segment.reader import SegmentReader
from changelog.segment.segment import LogSegment

__all__ = ["WORKER_NICENESS", "clean_in_process", "main"]

_log = logging.getLogger(__name__)

_POLL_S: Final = 0.02
_PARENT_PID_ENV: Final = "STATESTORE_CLEANER_PARENT_PID"
_CHILD_CODE: Final = (
    # Ask to die with the parent before anything else (imports take a while), then run.
    "import ctypes, os, signal, sys\n"
    "if sys.platform.startswith('linux'):\n"
    "    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)\n"
    "if os.getppid() != int(os.environ['STATESTORE_CLEANER_PARENT_PID']):\n"
    "    os._exit(1)\n"
    "from changelog.cleaner.worker import main\n"
    "raise SystemExit(main())\n"
)

WORKER_NICENESS: Final = 10
"""How much the worker process lowers its own CPU priority (``os.nice``) before a pass.

Writers in the parent keep the default priority, so when they and a pass
contend for the cores the writers win; an idle machine still gives the pass
every free cycle.  A worker process cannot raise its priority back, so this
is set once per child (each pass runs in a fresh one)."""


def _cleaned_files(directory: Path, base_offset: int) -> list[Path]:
    return [
        directory / (files.segment_file_name(base_offset, kind) + files.CLEANED_SUFFIX)
        for kind in files.SEGMENT_SUFFIXES
    ]


def _worker_env() -> dict[str, str]:
    """The parent's environment, with this package's root first on ``PYTHONPATH``."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    env[_PARENT_PID_ENV] = str(os.getpid())
    return env


def clean_in_process(
    to_clean: LogToClean,
    *,
    config: CleanerConfig,
    now_ms: int,
    abort: Callable[[], bool] = lambda: False,
) -> CleanerStats:
    """One pass whose CPU work (steps 1-2) runs in a child Python process.

    The parent takes the snapshot under ``log.lock`` (read-only descriptors
    of the source segments, handed to the child), waits for the child while
    checking ``abort()``, then opens the child's ``.cleaned`` segments and
    swaps them in (steps 3-4) itself.  Writers in the parent then compete
    with the pass for CPU, not for the GIL (see docs/operations.md).  On an
    abort the child is killed and its ``.cleaned`` files deleted.  A failure
    in the child is re-raised here (``CorruptRecordError`` keeps its path and
    position).
    """
    started = time.monotonic()
    inputs, segments, sources = snapshot(to_clean)
    inputs = attrs.evolve(inputs, now_ms=now_ms)
    directory = Path(inputs.directory)
    request = {
        "inputs": {**attrs.asdict(inputs), "log_config": attrs.asdict(inputs.log_config)},
        "config": attrs.asdict(config),
        "sources": [
            {
                **attrs.asdict(source, filter=lambda a, _v: a.name != "reader"),
                "path": str(source.reader.path),
            }
            for source in sources
        ],
    }
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD_CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=[source.fd for source in sources],
            text=True,
            env=_worker_env(),
        )
    except BaseException:
        for source in sources:
            source.reader.close()
        raise
    for source in sources:  # the child has its own copies now
        source.reader.close()
    try:
        with proc:  # closes the pipes and reaps the child whatever happens
            reply = _wait(proc, json.dumps(request), abort, inputs.name)
    except Exception:
        for source in sources:
            for path in _cleaned_files(directory, source.base_offset):
                files.delete_file(path, "cleaner.worker.cleanup")
        raise
    cleaned = [
        LogSegment.open(directory, base, config=inputs.log_config, file_suffix=files.CLEANED_SUFFIX)
        for base in reply["cleaned"]
    ]
    stats = CleanerStats(**reply["stats"])
    compacted = Compacted(stats=stats, cleaned=cleaned, replaced=reply["replaced"])
    return commit(to_clean.log, segments, compacted, started)


def _wait(
    proc: subprocess.Popen[str], request: str, abort: Callable[[], bool], name: str
) -> dict[str, Any]:
    """Send the request, wait for the reply while honouring ``abort``; raise what the child raised.

    The request is written here, whole, before ``communicate`` polls: a
    ``communicate(input, timeout=...)`` that times out before it wrote all of
    ``input`` does not resume the write when retried (``input`` may not be
    passed twice, and a retry without it never writes nor closes stdin), so
    the child would wait for EOF for ever.  That happened whenever the first
    poll lost its time slice (a request above the pipe buffer, or a loaded
    machine).  CPython's issue gh-141473, still present in 3.11 (the write above works either way).
    """
    try:
        _send(proc, request.encode(), abort, name)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    while True:
        try:
            # stdin is fully written; the first call closes it (the child sees EOF).
            out, _ = proc.communicate(timeout=_POLL_S)
            break
        except subprocess.TimeoutExpired:
            if abort():
                proc.kill()
                proc.wait()
                raise CleanerAbortedError(
                    f"[{name}] cleaning aborted (worker process killed)"
                ) from None
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    try:
        reply: dict[str, Any] = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except ValueError:
        reply = {}
    if proc.returncode == 0 and "stats" in reply:
        return reply
    error = reply.get("error") or {}
    if error.get("type") == "CorruptRecordError":
        raise CorruptRecordError(
            error["path"],
            error["position"],
            error["reason"],
            expected=error.get("expected"),
            actual=error.get("actual"),
        )
    if error.get("type") == "CleanerAbortedError":
        raise CleanerAbortedError(error.get("message", "aborted"))
    raise CleanerWorkerError(
        name,
        exit_code=proc.returncode,
        error_type=error.get("type", "no reply"),
        reason=error.get("message", ""),
    )


def _send(proc: subprocess.Popen[str], data: bytes, abort: Callable[[], bool], name: str) -> None:
    """Write ``data`` to the child's stdin (left open: ``communicate`` closes it).

    Chunks of at most ``select.PIPE_BUF`` bytes, each once the pipe has room,
    so a write never blocks; ``abort()`` is checked while the pipe is full.
    A child that exited early (a broken pipe) ends the write: its exit code
    and reply are read by the caller.
    """
    assert proc.stdin is not None
    fd = proc.stdin.fileno()
    view = memoryview(data)
    offset = 0
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_WRITE)
        while offset < len(view):
            if not selector.select(_POLL_S):
                if abort():
                    raise CleanerAbortedError(f"[{name}] cleaning aborted (worker process killed)")
                continue
            try:
                offset += os.write(fd, view[offset : offset + select.PIPE_BUF])
            except BrokenPipeError:
                return


_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


def _die_with_parent() -> None:
    """Have the kernel SIGKILL this worker when its parent dies (Linux).

    A service killed with ``kill -9`` must not leave a pass writing ``.cleaned``
    files into a state directory that the next owner is already using.  The
    parent's pid is passed in the environment to close the race of a parent
    that died before the ``prctl`` call.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: rely on the check below
            _log.debug("cleaner worker could not ask to die with its parent", exc_info=True)
    expected = os.environ.get(_PARENT_PID_ENV)
    if expected is not None and os.getppid() != int(expected):
        os._exit(1)  # the parent is already gone: write nothing


def main() -> int:
    """Entry point of the child: read the request from stdin, compact, reply on stdout."""
    _die_with_parent()
    try:
        os.nice(WORKER_NICENESS)  # writers first (see WORKER_NICENESS)
    except OSError:  # pragma: no cover - a platform or sandbox that refuses: run at normal priority
        _log.debug("cleaner worker could not lower its priority", exc_info=True)
    request = json.loads(sys.stdin.read())
    inputs_raw = dict(request["inputs"])
    inputs_raw["log_config"] = LogConfig(**inputs_raw["log_config"])
    inputs = PassInput(**inputs_raw)
    config = CleanerConfig(**request["config"])
    sources = [
        SourceSegment(
            base_offset=raw["base_offset"],
            next_base_offset=raw["next_base_offset"],
            size_bytes=raw["size_bytes"],
            offset_index_bytes=raw["offset_index_bytes"],
            time_index_bytes=raw["time_index_bytes"],
            fd=raw["fd"],
            reader=SegmentReader(
                raw["fd"],
                Path(raw["path"]),
                raw["base_offset"],
                raw["size_bytes"],
                functools.partial(os.close, raw["fd"]),
            ),
        )
        for raw in request["sources"]
    ]
    throttler = Throttler(config.io_max_bytes_per_second / config.threads)
    try:
        compacted = compact(inputs, sources, config=config, throttle=throttler.maybe_throttle)
    except CorruptRecordError as exc:
        reply: dict[str, Any] = {
            "error": {
                "type": "CorruptRecordError",
                "path": str(exc.path),
                "position": exc.position,
                "reason": exc.reason,
                "expected": repr(exc.expected) if exc.expected is not None else None,
                "actual": repr(exc.actual) if exc.actual is not None else None,
            }
        }
        print(json.dumps(reply), flush=True)
        return 1
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        print(json.dumps({"error": {"type": type(exc).__name__, "message": str(exc)}}), flush=True)
        return 1
    for segment in compacted.cleaned:
        segment.close()
    reply = {
        "niceness": os.nice(0),
        "stats": attrs.asdict(compacted.stats),
        "cleaned": [segment.base_offset for segment in compacted.cleaned],
        "replaced": compacted.replaced,
    }
    print(json.dumps(reply), flush=True)
    return 0
