"""The account-balance service: apply a stream of transactions, exactly once.

    python -m examples.balances --state-dir state/ --input txns.jsonl
    python -m examples.balances.generate --count 1000 | python -m examples.balances --state-dir state/

State: the store ``balances`` (:data:`PARTITIONS` changelog partitions),
mapping account id (str) to balance in cents (int), and the service's *input
position* (lines consumed, and the byte offset just after them) under
:data:`POSITION_KEY` in the manager's built-in metadata store
(``manager.metadata``).  Every commit writes the position together with the
balance updates it covers, and ``manager.commit()`` commits both stores as
**one transaction** (the local transaction coordinator: transactional
batches in every partition, a durable decision, COMMIT markers), so after a
crash either both the balances and the position of a commit are there, or
neither is: a restart resumes exactly after the last committed transaction,
and a transaction is never lost nor applied twice.  No ordering between the
stores matters.  (This is the local equivalent of Kafka Streams'
exactly-once, where the consumer offsets are committed in the same Kafka
transaction as the changelog writes.)

On a seekable input (a file) the restart seeks to the committed byte offset;
on stdin the producer must replay the stream from the start and the service
skips the lines it has already applied, as a Kafka consumer skips to its
committed offset.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO, Final, Protocol

import attrs

from changelog.config import CleanerConfig
from examples.balances.transactions import InputError, parse_line
from statestore.config import STORE_LOG_CONFIG

__all__ = [
    "PARTITIONS",
    "POSITION_KEY",
    "STORE_NAME",
    "BalanceStore",
    "Position",
    "RunSummary",
    "balances_of",
    "process",
    "read_position",
]

STORE_NAME: Final = "balances"
PARTITIONS: Final = 4
"""Changelog partitions of the balances store: every commit spans several, so it is a transaction."""
POSITION_KEY: Final = "balances-input-position"
"""The input position's key in the manager's metadata store (``manager.metadata``)."""


class BalanceStore(Protocol):
    """What the service needs of a store (a :class:`statestore.KeyValueStore` has it)."""

    def get(self, key: str, default: Any = None) -> Any:
        """The value under ``key`` (read-your-writes), or ``default``."""

    def put(self, key: str, value: Any) -> None:
        """Buffer a write until the next commit."""


@attrs.frozen
class Position:
    """How much of the input is applied: ``line`` lines, ending at byte ``offset``."""

    line: int = 0
    offset: int = 0

    def to_value(self) -> dict[str, int]:
        """The stored form (a msgpack map)."""
        return {"line": self.line, "offset": self.offset}


@attrs.frozen
class RunSummary:
    """What one run of :func:`process` did."""

    start: Position
    end: Position
    transactions: int
    commits: int
    stopped: bool


def read_position(metadata: BalanceStore) -> Position:
    """The committed input position in the metadata store (zero for a fresh state directory)."""
    value = metadata.get(POSITION_KEY)
    if value is None:
        return Position()
    if not isinstance(value, dict) or set(value) != {"line", "offset"}:
        raise ValueError(f"the stored input position is not valid: {value!r:.80}")
    return Position(line=int(value["line"]), offset=int(value["offset"]))


def balances_of(items: Iterator[tuple[str, Any]]) -> dict[str, int]:
    """The balances of a balances store's items."""
    return {key: int(value) for key, value in items}


def open_balances(manager: Any, *, segment_bytes: int | None = None) -> Any:
    """The balances store of ``manager`` (opened and restored): the store's default changelog
    settings (:data:`~statestore.config.STORE_LOG_CONFIG`), or those with ``segment_bytes``."""
    log_config = (
        None
        if segment_bytes is None
        else attrs.evolve(STORE_LOG_CONFIG, segment_bytes=segment_bytes)
    )
    return manager.store(STORE_NAME, partitions=PARTITIONS, log_config=log_config)


def _lines(source: BinaryIO, start: Position, seekable: bool) -> Iterator[tuple[bytes, int]]:
    """Yield ``(line, byte length)`` for every input line after ``start``."""
    if seekable:
        source.seek(start.offset)
    else:
        for _ in range(start.line):
            if not source.readline():
                raise InputError(
                    start.line, "stdin ended before the committed position; replay the whole input"
                )
    while True:
        text = source.readline()
        if not text:
            return
        yield text, len(text)


class _StopFlag:
    """Set by SIGTERM/SIGINT: finish the current transaction, commit, stop."""

    def __init__(self) -> None:
        self.stopped = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.stopped = True


def process(
    store: BalanceStore,
    metadata: BalanceStore,
    commit: Callable[[], object],
    source: BinaryIO,
    *,
    seekable: bool,
    commit_every: int = 500,
    on_commit: Callable[[Position], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> RunSummary:
    """Apply every transaction of ``source`` after the committed position.

    ``store`` holds the balances and ``metadata`` the position; ``commit``
    (``manager.commit``) commits both as one transaction every
    ``commit_every`` transactions and at the end of the input; ``on_commit`` is called after
    each commit has returned, that is once it is durable.  A bad line raises
    :class:`InputError` after committing everything before it.
    """
    if commit_every < 1:
        raise ValueError(f"commit_every must be >= 1, got {commit_every}")
    start = read_position(metadata)
    line, offset = start.line, start.offset
    committed = start
    applied = pending = commits = 0

    def commit_position() -> None:
        nonlocal pending, commits, committed
        position = Position(line=line, offset=offset)
        metadata.put(POSITION_KEY, position.to_value())
        commit()
        pending = 0
        commits += 1
        committed = position
        if on_commit is not None:
            on_commit(position)

    try:
        for text, size in _lines(source, start, seekable):
            if stop():
                break
            number = line + 1
            if text.strip():
                changes = parse_line(text, number).changes
                for account, delta in changes:
                    store.put(account, store.get(account, 0) + delta)
                applied += 1
                pending += 1
            line, offset = number, offset + size
            if pending >= commit_every:
                commit_position()
    except InputError:
        if pending:
            commit_position()  # everything before the bad line, then report it
        raise
    if Position(line=line, offset=offset) != committed:
        commit_position()  # the rest, and any blank lines after the last transaction
    return RunSummary(
        start=start,
        end=Position(line=line, offset=offset),
        transactions=applied,
        commits=commits,
        stopped=stop(),
    )


def _emit(events: bool, event: str, **fields: object) -> None:
    if events:
        print(json.dumps({"event": event, **fields}), flush=True)


def run(
    state_dir: Path,
    input_path: Path | None,
    *,
    commit_every: int = 500,
    events: bool = False,
    segment_bytes: int | None = None,
    metrics_port: int | None = None,
) -> RunSummary:
    """Open the state, restore it, process the input and close cleanly (the entry point's body).

    With ``events`` every step is reported on stdout as one JSON line:
    ``restored`` (position, accounts, seconds), ``commit`` (position) after
    each durable commit, and ``done``.  With ``metrics_port`` the manager's
    metrics are served in Prometheus' text format at
    ``http://127.0.0.1:<port>/metrics`` while the input is processed (0: a
    free port, reported by a ``metrics`` event; extra ``statestore[prometheus]``).
    """
    from statestore import StateManager, StateManagerConfig  # noqa: PLC0415 - fast --help

    flag = _StopFlag()
    signal.signal(signal.SIGTERM, flag)
    signal.signal(signal.SIGINT, flag)
    started = time.perf_counter()
    # The cleaner checks every 0.5 s (Kafka: 15 s) so that short runs show compaction too.
    config = StateManagerConfig(cleaner=CleanerConfig(backoff_ms=500))
    with StateManager(state_dir, config=config) as manager:
        store = open_balances(manager, segment_bytes=segment_bytes)
        restored = read_position(manager.metadata)
        restore_seconds = time.perf_counter() - started
        _emit(
            events,
            "restored",
            line=restored.line,
            offset=restored.offset,
            keys=_count_keys(store),
            records_replayed=sum(
                result.records_restored for result in manager.restore_results(STORE_NAME)
            ),
            offsets_written=sum(log.log_end_offset for log in store.changelogs),
            seconds=round(restore_seconds, 4),
            pid=os.getpid(),
        )

        metrics_server = None if metrics_port is None else _serve_metrics(manager, metrics_port)
        if metrics_server is not None:
            _emit(events, "metrics", port=metrics_server.server_port)
            if not events:
                print(
                    f"metrics on http://127.0.0.1:{metrics_server.server_port}/metrics",
                    file=sys.stderr,
                )

        def on_commit(position: Position) -> None:
            _emit(events, "commit", line=position.line, offset=position.offset)

        if input_path is None:
            summary = process(
                store,
                manager.metadata,
                manager.commit,
                sys.stdin.buffer,
                seekable=False,
                commit_every=commit_every,
                on_commit=on_commit,
                stop=lambda: flag.stopped,
            )
        else:
            with input_path.open("rb") as source:
                summary = process(
                    store,
                    manager.metadata,
                    manager.commit,
                    source,
                    seekable=True,
                    commit_every=commit_every,
                    on_commit=on_commit,
                    stop=lambda: flag.stopped,
                )
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
    _emit(
        events,
        "done",
        line=summary.end.line,
        offset=summary.end.offset,
        transactions=summary.transactions,
        commits=summary.commits,
        stopped=summary.stopped,
        seconds=round(time.perf_counter() - started, 4),
    )
    return summary


def _serve_metrics(manager: Any, port: int) -> Any:
    """Serve ``manager``'s metrics on ``127.0.0.1:port`` (a daemon thread); returns the server."""
    from prometheus_client import CollectorRegistry, start_http_server  # noqa: PLC0415 - extra

    from statestore.metrics.prometheus import StateStoreCollector  # noqa: PLC0415

    registry = CollectorRegistry()
    registry.register(StateStoreCollector(manager))
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    return server


def _count_keys(store: Any) -> int:
    """Accounts in the store."""
    return sum(1 for _key in store.keys())  # noqa: SIM118 - a store, not a dict
