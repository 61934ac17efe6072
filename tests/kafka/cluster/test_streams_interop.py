"""Kafka Streams interop, both ways, for the window and the session store, on a real broker.

A real Kafka Streams 4.4 application (``tests/kafka/streams_app/StreamsApp.java``, built and
cached by :mod:`tests.kafka.streams_app.build`) runs a windowed ``count()`` and a
session-windowed ``count()`` in Kafka Streams' default store format, and prints its stores'
contents by interactive query.  A statestore :class:`~statestore.kafka.Processor` with the same
application id keeps a :class:`~statestore.WindowStore` and a :class:`~statestore.SessionStore`
of the same names, so both sides use the same changelog topics:

* Kafka Streams aggregates, statestore restores its changelogs: the contents equal Kafka
  Streams' and the model's;
* statestore aggregates the same inputs, Kafka Streams restores statestore's changelogs:
  its interactive query prints the model's contents;
* the changelog topics the two wrote for the same inputs hold the same last record per key
  (windowed and session key bytes, 8-byte big-endian counts, window timestamps).

The expected contents come from the model of :class:`~tests.kafka.cluster.time_app.TimeApp`.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_harness.broker import KafkaBroker
from statestore import LongSerde, StringSerde
from statestore.kafka import KafkaStoreSpec, Processor, ProcessorConfig, ProcessorContext
from tests.kafka.cluster.oracle import run_until
from tests.kafka.cluster.time_app import GAP_MS, PARTITIONS, USERS, WINDOW_MS, TimeApp
from tests.kafka.streams_app.build import StreamsApp, build

pytestmark = pytest.mark.timeout(420)

GRACE_MS = 3_600_000
RECORDS = 400

Windows = dict[tuple[str, int], tuple[int, int]]
Sessions = dict[tuple[str, int, int], int]


@pytest.fixture(scope="module")
def streams_app() -> StreamsApp:
    """The Kafka Streams application, built once (cached across runs)."""
    return build()


def specs() -> list[KafkaStoreSpec]:
    """Kafka Streams' stores of ``count()``: retention = size (gap) + grace, Long values."""
    return [
        KafkaStoreSpec.window(
            "counts",
            window_size_ms=WINDOW_MS,
            retention_ms=WINDOW_MS + GRACE_MS,
            key_serde=StringSerde(),
            value_serde=LongSerde(),
        ),
        KafkaStoreSpec.session(
            "sessions",
            retention_ms=GAP_MS + GRACE_MS,
            key_serde=StringSerde(),
            value_serde=LongSerde(),
        ),
    ]


def process(context: ProcessorContext, message: Any) -> None:
    """Kafka Streams' windowed and session-windowed ``count()`` of one record."""
    user = message.key().decode()
    ts = message.timestamp()[1]
    start = ts // WINDOW_MS * WINDOW_MS
    counts = context.store("counts")
    old = counts.fetch_window_with_timestamp(user, start)
    if old is None:
        counts.put(user, 1, start, timestamp_ms=ts)
    else:
        counts.put(user, old.value + 1, start, timestamp_ms=max(ts, old.timestamp_ms))
    context.store("sessions").merge(
        user,
        ts,
        inactivity_gap_ms=GAP_MS,
        aggregate=lambda total: (total or 0) + 1,
        merger=lambda a, b: a + b,
    )


def processor(app: TimeApp, state_dir: Path) -> Processor:
    # The classic protocol, as Kafka Streams' group (the same group id) uses by default.
    config = ProcessorConfig(
        application_id=app.name,
        bootstrap_servers=app.bootstrap,
        input_topics=(app.input,),
        instance_id="statestore",
        commit_interval_ms=100,
        group_protocol="classic",
    )
    return Processor(config, state_dir, specs(), process)


def statestore_contents(running: Processor) -> tuple[Windows, Sessions]:
    windows: Windows = {}
    for store in running.stores("counts").values():
        for windowed, value in store.all():
            stamped = store.fetch_window_with_timestamp(windowed.key, windowed.start_ms)
            windows[(windowed.key, windowed.start_ms)] = (value, stamped.timestamp_ms)
    sessions: Sessions = {
        (session.key, session.start_ms, session.end_ms): value
        for store in running.stores("sessions").values()
        for session, value in store.all()
    }
    return windows, sessions


def run_statestore(app: TimeApp, state_dir: Path) -> tuple[Windows, Sessions]:
    """Restore (and process what is not committed yet) until the inputs are committed."""
    with processor(app, state_dir) as running:
        run_until(
            lambda: running.poll_once(0.1),
            lambda: len(running.stores("counts")) == PARTITIONS and app.committed_end(),
            timeout_s=180,
        )
        running.commit()
        return statestore_contents(running)


def run_streams(
    streams_app: StreamsApp, app: TimeApp, state_dir: Path, expected: int
) -> tuple[Windows, Sessions]:
    """Run the Kafka Streams application until ``expected`` records are aggregated; its stores."""
    argv = streams_app.argv(
        [
            app.bootstrap,
            app.name,
            app.input,
            str(state_dir),
            str(expected),
            str(USERS),
            str(WINDOW_MS),
            str(GAP_MS),
            str(GRACE_MS),
        ]
    )
    log = state_dir.with_suffix(".stderr")
    with log.open("w") as stderr:
        done = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=300, check=False
        )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, (done.returncode, lines[-3:], log.read_text()[-3000:])
    assert lines[-1] == {"event": "closed"}, lines[-3:]
    windows: Windows = {
        (line["key"], line["start"]): (line["value"], line["ts"])
        for line in lines
        if line.get("store") == "counts"
    }
    sessions: Sessions = {
        (line["key"], line["start"], line["end"]): line["value"]
        for line in lines
        if line.get("store") == "sessions"
    }
    return windows, sessions


def changelogs(app: TimeApp) -> dict[str, dict[bytes, tuple[int, bytes | None]]]:
    """The last record per key of both changelog topics (windows with their timestamps)."""
    return {
        "counts": {key: (stamp, value) for key, stamp, value in app.last_per_key("counts")},
        "sessions": {key: (0, value) for key, _stamp, value in app.last_per_key("sessions")},
    }


def test_each_restores_the_others_window_and_session_changelogs(
    cluster: KafkaBroker, tmp_path: Path, streams_app: StreamsApp
) -> None:
    base_ms = int(time.time() * 1000)
    # Kafka Streams aggregates; statestore restores its changelog topics.
    from_streams = TimeApp(cluster.bootstrap_servers, "interop-ks", base_ms=base_ms, seed="x")
    from_streams.feed(RECORDS)
    expected = (from_streams.expected_windows(), from_streams.expected_sessions())
    assert len(expected[0]) > 100, "too few windows to compare"
    assert any(count > 1 for count in expected[1].values()), "no session was ever merged"
    assert run_streams(streams_app, from_streams, tmp_path / "ks-1", RECORDS) == expected
    assert run_statestore(from_streams, tmp_path / "ss-1") == expected

    # statestore aggregates the same inputs; Kafka Streams restores statestore's topics.
    from_statestore = TimeApp(cluster.bootstrap_servers, "interop-ss", base_ms=base_ms, seed="x")
    from_statestore.feed(RECORDS)
    assert from_statestore.fed == from_streams.fed
    assert run_statestore(from_statestore, tmp_path / "ss-2") == expected
    assert run_streams(streams_app, from_statestore, tmp_path / "ks-2", 0) == expected

    # The two changelogs hold the same bytes per key (the windows' timestamps too), and the
    # same tombstones for the sessions merged into larger ones.
    written = changelogs(from_streams)
    assert any(value is None for _stamp, value in written["sessions"].values())
    assert changelogs(from_statestore) == written
