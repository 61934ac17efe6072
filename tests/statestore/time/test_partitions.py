"""Window, session and versioned stores of several partitions, against a plain model.

Each key's windows (sessions, versions) live in the partition of its *plain* key, as Kafka
Streams partitions these changelogs (``murmur2(key bytes)``); reads span every partition;
expiry follows the store's stream time (the largest over its partitions), so a window of one
partition expires when another partition's records move the stream time.  Restore (a reopen)
gives the same answers.
"""

from __future__ import annotations

import random

import pytest

from statestore.errors import StoreMetadataMismatchError
from statestore.partitioner import partition_for
from statestore.serdes import LongSerde
from statestore.stores.time.layout import split_session_key, split_windowed_key
from statestore.stores.time.window import Windowed
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import changelog_entries

PARTITIONS = 3
RETENTION = 1_000
KEYS = [f"k{i}" for i in range(20)]


def window_model(puts: list[tuple[str, int, int]]) -> tuple[dict[tuple[str, int], int], int]:
    """Visible windows and stream time after ``puts`` (Kafka Streams' window store rules)."""
    windows: dict[tuple[str, int], int] = {}
    stream = -1
    for key, start, value in puts:
        if start <= max(stream, start) - RETENTION:
            continue  # expired: dropped
        stream = max(stream, start)
        windows[(key, start)] = value
    return {kw: v for kw, v in windows.items() if kw[1] > stream - RETENTION}, stream


def test_window_store_partitions_by_plain_key(open_manager: OpenManager) -> None:
    rng = random.Random(5)
    manager = open_manager()
    store = manager.window_store(
        "w",
        window_size_ms=100,
        retention_ms=RETENTION,
        segment_interval_ms=200,
        value_serde=LongSerde(),
        partitions=PARTITIONS,
    )
    puts: list[tuple[str, int, int]] = []
    for round_ in range(6):
        for _ in range(80):
            key, start = rng.choice(KEYS), rng.randrange(0, 1_000 * (round_ + 1), 100)
            value = rng.randrange(1_000)
            store.put(key, value, start)
            puts.append((key, start, value))
        store.commit()
    expected, stream = window_model(puts)
    assert store.stream_time_ms == stream

    def check(reading: object) -> None:
        assert list(reading.all()) == [  # type: ignore[attr-defined]
            (Windowed(key, start, start + 100), value)
            for (key, start), value in sorted(
                expected.items(), key=lambda kv: (kv[0][0].encode(), kv[0][1])
            )
        ]
        for key in KEYS:
            assert list(reading.fetch(key, 0, 10**6)) == sorted(  # type: ignore[attr-defined]
                (start, value) for (k, start), value in expected.items() if k == key
            )
        assert len(list(reading.fetch_range("k1", "k5", 0, 10**6))) == sum(  # type: ignore[attr-defined]
            1 for (k, _start) in expected if "k1" <= k <= "k5"
        )

    check(store)
    for p, log in enumerate(store.changelogs):
        keys = {split_windowed_key(key)[0] for key, _value in changelog_entries(log) if key}
        assert keys, f"partition {p} got nothing"
        assert {partition_for(key, PARTITIONS) for key in keys} == {p}
    manager.close()
    reopened = open_manager().window_store(
        "w",
        window_size_ms=100,
        retention_ms=RETENTION,
        segment_interval_ms=200,
        value_serde=LongSerde(),
    )
    assert reopened.partitions == PARTITIONS  # as recorded
    assert reopened.stream_time_ms == stream
    check(reopened)


def test_a_partition_s_window_expires_by_another_partition_s_stream_time(
    open_manager: OpenManager,
) -> None:
    store = open_manager().window_store(
        "w",
        window_size_ms=100,
        retention_ms=RETENTION,
        segment_interval_ms=200,
        partitions=PARTITIONS,
    )
    late, early = (
        "k0",
        next(k for k in KEYS if partition_for(k.encode(), 3) != partition_for(b"k0", 3)),
    )
    store.put(early, 1, 0)
    store.commit()
    assert store.fetch_window(early, 0) == 1
    store.put(late, 2, RETENTION)  # another partition: the store's stream time is now RETENTION
    store.commit()
    assert store.fetch_window(early, 0) is None
    assert list(store.all()) == [(Windowed(late, RETENTION, RETENTION + 100), 2)]
    store.put(early, 3, 0)  # expired: dropped, whatever its partition's own stream time
    assert store.expired_records_dropped == 1


def test_session_store_partitions_by_plain_key(open_manager: OpenManager) -> None:
    rng = random.Random(6)
    manager = open_manager()
    store = manager.session_store(
        "s",
        retention_ms=RETENTION,
        segment_interval_ms=200,
        value_serde=LongSerde(),
        partitions=PARTITIONS,
    )
    sessions: dict[tuple[str, int, int], int] = {}
    stream = -1
    for round_ in range(5):
        for _ in range(60):
            key = rng.choice(KEYS)
            start = rng.randrange(0, 1_000 * (round_ + 1))
            end = start + rng.randrange(50)
            value = rng.randrange(1_000)
            store.put(Windowed(key, start, end), value)
            if end > max(stream, end) - RETENTION:
                stream = max(stream, end)
                sessions[(key, start, end)] = value
        store.commit()
    visible = {s: v for s, v in sessions.items() if s[2] > stream - RETENTION}
    order = sorted(visible, key=lambda s: (s[0].encode(), s[2], s[1]))
    assert [((w.key, w.start_ms, w.end_ms), v) for w, v in store.all()] == [
        (s, visible[s]) for s in order
    ]
    for p, log in enumerate(store.changelogs):
        keys = {split_session_key(key)[0] for key, _value in changelog_entries(log) if key}
        assert {partition_for(key, PARTITIONS) for key in keys} == {p}
    manager.close()
    reopened = open_manager().session_store(
        "s", retention_ms=RETENTION, segment_interval_ms=200, value_serde=LongSerde()
    )
    assert [((w.key, w.start_ms, w.end_ms), v) for w, v in reopened.all()] == [
        (s, visible[s]) for s in order
    ]


def test_versioned_store_partitions_by_plain_key(open_manager: OpenManager) -> None:
    rng = random.Random(7)
    history = 500
    manager = open_manager()
    store = manager.versioned_store(
        "v", history_retention_ms=history, value_serde=LongSerde(), partitions=PARTITIONS
    )
    versions: dict[str, dict[int, int]] = {}
    stream = -1
    for _ in range(300):
        key, stamp, value = rng.choice(KEYS), rng.randrange(3_000), rng.randrange(1_000)
        kept = store.put(key, value, stamp)
        assert kept == (stamp >= max(stream, stamp) - history)
        if kept:
            stream = max(stream, stamp)
            versions.setdefault(key, {})[stamp] = value
    store.commit()

    def check(reading: object) -> None:
        for key in KEYS:
            found = reading.get(key)  # type: ignore[attr-defined]
            if key not in versions:
                assert found is None
                continue
            latest = max(versions[key])
            assert (found.value, found.timestamp_ms) == (versions[key][latest], latest)
            as_of = stream - history // 2
            older = [t for t in versions[key] if t <= as_of]
            found = reading.get(key, as_of)  # type: ignore[attr-defined]
            if older:
                assert (found.value, found.timestamp_ms) == (versions[key][max(older)], max(older))
            else:
                assert found is None

    check(store)
    for p, log in enumerate(store.changelogs):
        keys = {key for key, _value in changelog_entries(log) if key}
        assert {partition_for(key, PARTITIONS) for key in keys} == {p}
    manager.close()
    check(
        open_manager().versioned_store("v", history_retention_ms=history, value_serde=LongSerde())
    )


def test_other_partitions_than_recorded_are_refused(open_manager: OpenManager) -> None:
    manager = open_manager()
    manager.window_store("w", window_size_ms=100, retention_ms=RETENTION, partitions=2)
    manager.close()
    with pytest.raises(StoreMetadataMismatchError):
        open_manager().window_store("w", window_size_ms=100, retention_ms=RETENTION, partitions=3)
