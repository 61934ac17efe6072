"""Child-process services of the kill -9 harness (module level, so the harness can pickle them).

Every writer resumes where the recovered state left off: it reads the state,
finds the last commit it holds (``SEQ_KEY``) and continues with the next one.
So each trial is a chain of crash, recovery, more writes, crash, ...
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

from changelog import CleanerConfig, LogConfig
from changelog.cleaner.clean import clean_log
from changelog.errors import CleanerAbortedError, LogClosedError
from changelog.log.log import Log
from statestore.testing import Reporter
from tests.reliability.model import apply, commit_ops, seq_of

PARTITION_DIR = "changelog-0"
CLEANER = CleanerConfig(dedupe_buffer_size_bytes=1 << 20)


def read_log_state(log: Log) -> dict[bytes, bytes]:
    """The key -> value map the log implies (latest value per key; tombstones delete).

    Also checks what every reader relies on: offsets strictly increase, inside
    ``[log start, log end)``.
    """
    state: dict[bytes, bytes] = {}
    previous = log.log_start_offset - 1
    end = log.log_end_offset
    for record in log.read(log.log_start_offset):
        if not previous < record.offset < end:
            raise AssertionError(
                f"{log.dir}: offset {record.offset} after {previous} (log end {end})"
            )
        previous = record.offset
        if record.key is not None:
            apply(state, [(record.key, record.value)])
    return state


def _clean_forever(log: Log, stop: threading.Event, reporter: Reporter) -> None:
    marked = False
    while not stop.is_set():
        try:
            clean_log(log, force=True, config=CLEANER)
        except (CleanerAbortedError, LogClosedError):
            return
        if not marked:
            reporter.mark("compacting")
            marked = True


def log_writer(
    state_dir: Path,
    reporter: Reporter,
    *,
    seed: int,
    config: dict[str, Any],
    compact: bool,
    max_commits: int,
) -> int:
    """Append commits of the workload as single batches, ack each; optionally clean concurrently."""
    log = Log.open(state_dir / PARTITION_DIR, config=LogConfig(**config))
    start = seq_of(read_log_state(log)) + 1
    stop = threading.Event()
    cleaner = None
    if compact:
        cleaner = threading.Thread(target=_clean_forever, args=(log, stop, reporter), daemon=True)
        cleaner.start()
    reporter.mark("writing")
    for i in range(start, start + max_commits):
        log.append(commit_ops(seed, i))
        reporter.ack(i)
    stop.set()
    if cleaner is not None:
        cleaner.join()
    log.close()
    return start + max_commits - 1


def log_reopener(state_dir: Path, reporter: Reporter, *, config: dict[str, Any]) -> int:
    """Open the log (recovery runs here), read it whole, close it; returns its last commit."""
    reporter.mark("restoring")
    log = Log.open(state_dir / PARTITION_DIR, config=LogConfig(**config))
    reporter.mark("opened")
    seq = seq_of(read_log_state(log))
    log.close()
    return seq


# ----------------------------------------------------------------------------- store level

STORE = "kv"


def manager_kwargs(log_config: dict[str, Any], *, cleaner: bool) -> dict[str, Any]:
    """StateManager settings of the store-level trials (busy cleaner when asked)."""
    from changelog import CleanerConfig  # noqa: PLC0415
    from statestore.config import StateManagerConfig  # noqa: PLC0415

    return {
        "config": StateManagerConfig(
            run_cleaner=cleaner,
            cleaner=CleanerConfig(dedupe_buffer_size_bytes=1 << 20, backoff_ms=5),
        ),
        "log_config": LogConfig(**log_config),
    }


def open_kv(manager: Any, restore_mode: Literal["full", "incremental"]) -> Any:
    """The bytes -> bytes store of the trials."""
    from statestore.config import StoreConfig  # noqa: PLC0415

    return manager.store(
        STORE, key_type=bytes, value_type=bytes, config=StoreConfig(restore_mode=restore_mode)
    )


def read_store_state(store: Any) -> dict[bytes, bytes]:
    """Everything a store holds."""
    return dict(store.items())


def store_writer(
    state_dir: Path,
    reporter: Reporter,
    *,
    seed: int,
    log_config: dict[str, Any],
    restore_mode: Literal["full", "incremental"],
    cleaner: bool,
    max_commits: int,
    mark_cleaning: bool = False,
) -> int:
    """Commit the workload through a StateManager store (one transaction per commit), ack each.

    With ``mark_cleaning``, marks ``"cleaning"`` once a cleaning pass has
    ``.cleaned`` files in the changelog directory (so the test can kill it then).
    """
    from statestore.manager import StateManager  # noqa: PLC0415

    reporter.mark("restoring")
    with StateManager(state_dir, **manager_kwargs(log_config, cleaner=cleaner)) as manager:
        store = open_kv(manager, restore_mode)
        reporter.mark("restored")
        start = seq_of(read_store_state(store)) + 1
        reporter.mark("writing")
        for i in range(start, start + max_commits):
            with store.transaction():
                for key, value in commit_ops(seed, i):
                    if value is None:
                        store.delete(key)
                    else:
                        store.put(key, value)
            reporter.ack(i)
            if mark_cleaning and any(
                p.name.endswith(".cleaned") for p in (state_dir / f"{STORE}-changelog-0").iterdir()
            ):
                reporter.mark("cleaning")
                mark_cleaning = False
        return start + max_commits - 1


# ----------------------------------------------------------------------------- disk full


def _limit_file_size(limit_bytes: int) -> None:
    """Make writes past ``limit_bytes`` in any file fail with EFBIG (not kill us with SIGXFSZ)."""
    import resource  # noqa: PLC0415
    import signal  # noqa: PLC0415

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, hard))


def disk_full_log_writer(
    state_dir: Path, reporter: Reporter, *, seed: int, config: dict[str, Any], limit_bytes: int
) -> dict[str, Any]:
    """Append until the file-size limit makes an append fail; report what the failure looked like."""
    from changelog.errors import ChangelogError, LogStorageError  # noqa: PLC0415

    _limit_file_size(limit_bytes)
    log = Log.open(state_dir / PARTITION_DIR, config=LogConfig(**config))
    i = seq_of(read_log_state(log)) + 1
    outcome: dict[str, Any] = {}
    while True:
        try:
            log.append(commit_ops(seed, i))
        except LogStorageError as exc:
            outcome.update(error=type(exc).__name__, errno=exc.errno, path=str(exc.path), failed=i)
            break
        reporter.ack(i)
        i += 1
    # In the same process, after the failure: the log is failed, every call refuses ...
    try:
        read_log_state(log)
        outcome["read_after_failure"] = "ok"
    except ChangelogError as exc:
        outcome["read_after_failure"] = type(exc).__name__
    try:
        log.append(commit_ops(seed, i))
        outcome["second_append"] = "ok"
    except ChangelogError as exc:
        outcome["second_append"] = type(exc).__name__
    log.close()  # a no-op on a failed log: its lock is already released
    # ... and reopening (still under the limit) recovers every acknowledged commit.
    try:
        with Log.open(state_dir / PARTITION_DIR, config=LogConfig(**config)) as reopened:
            outcome["seq_after_failure"] = seq_of(read_log_state(reopened))
    except ChangelogError as exc:
        outcome["read_error"] = f"{type(exc).__name__}: {exc}"
    return outcome


def disk_full_store_writer(
    state_dir: Path, reporter: Reporter, *, seed: int, log_config: dict[str, Any], limit_bytes: int
) -> dict[str, Any]:
    """Commit through a store until the limit makes a commit fail; report the error and the store state."""
    from statestore.errors import CommitFailedError, StateStoreError  # noqa: PLC0415
    from statestore.manager import StateManager  # noqa: PLC0415

    outcome: dict[str, Any] = {}
    manager = StateManager(state_dir, **manager_kwargs(log_config, cleaner=False))
    store = open_kv(manager, "full")
    i = seq_of(read_store_state(store)) + 1
    _limit_file_size(limit_bytes)
    while True:
        try:
            with store.transaction():
                for key, value in commit_ops(seed, i):
                    store.put(key, value)
        except CommitFailedError as exc:
            cause = exc.__cause__
            outcome.update(
                error=type(exc).__name__,
                written=exc.written,
                cause=type(cause).__name__ if cause is not None else None,
                errno=getattr(cause, "errno", None),
                failed=i,
                message=str(exc),
            )
            break
        reporter.ack(i)
        i += 1
    outcome["store_state"] = str(store.state.value)
    try:
        manager.close()
        outcome["close"] = "ok"
    except (StateStoreError, OSError) as exc:
        outcome["close"] = f"{type(exc).__name__}: {exc}"
    return outcome


# ----------------------------------------------------------------------------- locks


def hold_state_dir(state_dir: Path, reporter: Reporter) -> None:
    """Own the state directory (with one store) and never let go."""
    import time  # noqa: PLC0415

    from statestore.manager import StateManager  # noqa: PLC0415

    manager = StateManager(state_dir)
    manager.store("held")
    reporter.mark("locked")
    while True:
        time.sleep(1)


def try_open_state_dir(state_dir: Path, reporter: Reporter) -> dict[str, Any]:
    """Try to own the state directory; report the error (if any) with its fields."""
    from statestore.errors import StateDirLockedError  # noqa: PLC0415
    from statestore.manager import StateManager  # noqa: PLC0415

    try:
        with StateManager(state_dir) as manager:
            manager.store("held")
    except StateDirLockedError as exc:
        return {"error": type(exc).__name__, "path": str(exc.path), "holder": exc.holder}
    return {"error": None}


def try_open_log(state_dir: Path, reporter: Reporter) -> dict[str, Any]:
    """Try to open the partition directory; report the error (if any) with its fields."""
    from changelog.errors import LogLockedError  # noqa: PLC0415

    try:
        Log.open(state_dir / PARTITION_DIR).close()
    except LogLockedError as exc:
        return {"error": type(exc).__name__, "path": str(exc.path), "holder": exc.holder}
    return {"error": None}


# ----------------------------------------------------------------------------- harness

PRELOAD = ["tests.reliability.writers", "statestore.manager", "changelog.cleaner.clean"]


def new_harness(state_dir: Path) -> Any:
    """A SIGKILL harness whose children fork from a preloaded server (~50 ms per start)."""
    from statestore.testing import CrashHarness  # noqa: PLC0415

    return CrashHarness(state_dir, start_method="forkserver", preload=PRELOAD)
