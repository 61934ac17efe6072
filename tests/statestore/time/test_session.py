"""The session store: Kafka Streams' session key layout, find_sessions, merging, expiry, restore."""

from __future__ import annotations

import pytest

from statestore.config import StoreConfig
from statestore.errors import InvalidTimestampError
from statestore.serdes import LongSerde
from statestore.stores.time.layout import session_key
from statestore.stores.time.session import SessionStore
from statestore.stores.time.settings import ADDITIONAL_RETENTION_MS
from statestore.stores.time.window import Windowed
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import engine_of

RETENTION = 1_000


def _sessions(manager: object, **kwargs: object) -> SessionStore[str, int]:
    kwargs.setdefault("retention_ms", RETENTION)
    kwargs.setdefault("segment_interval_ms", 200)
    kwargs.setdefault("value_serde", LongSerde())
    return manager.session_store("s", **kwargs)  # type: ignore[attr-defined,no-any-return]


def test_find_sessions(open_manager: OpenManager) -> None:
    store = _sessions(open_manager())
    store.put(Windowed("a", 0, 10), 1)
    store.put(Windowed("a", 20, 30), 2)
    store.put(Windowed("a", 100, 150), 3)
    store.put(Windowed("ab", 25, 25), 4)
    store.commit()
    # end >= 15 and start <= 100
    assert list(store.find_sessions("a", 15, 100)) == [
        (Windowed("a", 20, 30), 2),
        (Windowed("a", 100, 150), 3),
    ]
    assert [w.start_ms for w, _ in store.backward_find_sessions("a", 0, 1_000)] == [100, 20, 0]
    assert list(store.find_sessions("a", 31, 99)) == []
    assert [w.key for w, _ in store.find_sessions_range("a", "ab", 25, 25)] == ["a", "ab"]
    assert [w.key for w, _ in store.find_sessions_range(None, None, 0, 10**6)] == [
        "a",
        "a",
        "a",
        "ab",
    ]
    assert store.fetch_session("a", 20, 30) == 2
    assert store.fetch_session("a", 20, 31) is None
    assert len(list(store.fetch("a"))) == 3
    store.remove(Windowed("a", 20, 30))
    assert store.fetch_session("a", 20, 30) is None
    store.commit()
    assert [w.start_ms for w, _ in store.all()] == [0, 100, 25]


def test_find_sessions_of_one_key_skips_the_segments_of_sessions_ended_before(
    open_manager: OpenManager,
) -> None:
    store = _sessions(open_manager())  # segments of 200 ms by session end
    for end in (50, 250, 450, 650):
        store.put(Windowed("a", end - 10, end), end)
        store.put(Windowed("b", end - 10, end), end)
    store.commit()
    engine = engine_of(store.inner)
    assert engine.live_segments == (0, 1, 2, 3)
    before = engine.segment_scans
    assert list(store.find_sessions("a", 400, 10_000)) == [
        (Windowed("a", 440, 450), 450),
        (Windowed("a", 640, 650), 650),
    ]
    assert engine.segment_scans - before == 2  # segments 2 and 3: ends from 400 on
    before = engine.segment_scans
    assert len(list(store.find_sessions_range("a", "b", 400, 10_000))) == 4
    assert engine.segment_scans - before == 4  # several keys: every live segment


def test_changelog_layout_and_merge_tombstones(open_manager: OpenManager) -> None:
    store = _sessions(open_manager(clock=lambda: 7))

    def add(timestamp: int) -> tuple[Windowed[str], int]:
        return store.merge(
            "u",
            timestamp,
            inactivity_gap_ms=15,
            aggregate=lambda agg: (agg or 0) + 1,
            merger=lambda a, b: a + b,
        )

    assert add(100) == (Windowed("u", 100, 100), 1)
    assert add(130) == (Windowed("u", 130, 130), 1)  # beyond the gap: a new session
    store.commit()
    assert add(115) == (Windowed("u", 100, 130), 3)  # bridges both
    store.commit()
    assert list(store.fetch("u")) == [(Windowed("u", 100, 130), 3)]
    records = [(r.key, r.value, r.timestamp_ms) for r in store.changelogs[0].read(0)]
    one = (1).to_bytes(8, "big")
    assert records == [
        (session_key(b"u", 100, 100), one, 7),
        (session_key(b"u", 130, 130), one, 7),
        (session_key(b"u", 100, 100), None, 7),  # merged into the larger session: tombstones
        (session_key(b"u", 130, 130), None, 7),
        (session_key(b"u", 100, 130), (3).to_bytes(8, "big"), 7),
    ]
    # Kafka Streams' SessionKeySchema: key | end | start
    assert session_key(b"u", 100, 130) == b"u" + (130).to_bytes(8, "big") + (100).to_bytes(8, "big")
    (log,) = store.changelogs
    assert log.config.cleanup_policy == "compact,delete"
    assert log.config.retention_ms == RETENTION + ADDITIONAL_RETENTION_MS


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_expiry_and_restore(open_manager: OpenManager, mode: str) -> None:
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    manager = open_manager()
    store = _sessions(manager, config=config)
    for n in range(50):
        store.put(Windowed(f"k{n % 3}", n * 100, n * 100 + 50), n)
        store.commit()
    # stream time 4950: sessions ending at or before 3950 expired
    visible = [(w.start_ms, v) for w, v in store.all()]
    assert sorted(v for _, v in visible) == list(range(40, 50))
    store.put(Windowed("late", 0, 3_900), 1)  # expired: dropped
    assert store.expired_records_dropped == 1
    assert store.pending_count == 0
    assert engine_of(store.inner).live_segments[0] >= 3_950 // 200 - 1
    manager.crash()
    manager = open_manager()
    store = _sessions(manager, config=config)
    assert sorted((w.start_ms, v) for w, v in store.all()) == sorted(visible)
    assert store.stream_time_ms == 4_950


def test_bad_sessions_are_refused(open_manager: OpenManager) -> None:
    store = _sessions(open_manager())
    with pytest.raises(InvalidTimestampError):
        store.put(Windowed("a", 10, 5), 1)
    with pytest.raises(InvalidTimestampError):
        store.put(Windowed("a", -1, 5), 1)
    assert store.pending_count == 0
