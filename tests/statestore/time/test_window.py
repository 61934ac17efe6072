"""The window store: Kafka Streams' layout and semantics, segments dropped whole, restore skips expired."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from statestore.config import StoreConfig
from statestore.errors import InvalidStoreConfigError, InvalidTimestampError
from statestore.serdes import LongSerde
from statestore.stores.time.layout import windowed_key
from statestore.stores.time.settings import ADDITIONAL_RETENTION_MS, TimeSettings
from statestore.stores.time.window import Windowed, WindowStore
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import engine_of

SIZE = 10
RETENTION = 100
SEGMENT = 50


def _window(manager: object, **kwargs: object) -> WindowStore[str, int]:
    kwargs.setdefault("window_size_ms", SIZE)
    kwargs.setdefault("retention_ms", RETENTION)
    kwargs.setdefault("segment_interval_ms", SEGMENT)
    kwargs.setdefault("value_serde", LongSerde())
    return manager.window_store("w", **kwargs)  # type: ignore[attr-defined,no-any-return]


def test_fetch_variants(open_manager: OpenManager) -> None:
    store = _window(open_manager())
    for start in (0, 10, 20, 30):
        store.put("a", start + 1, start)
        store.put("b", start + 2, start)
    store.put("ab", 99, 10)
    store.commit()
    store.put("a", 1000, 20)  # pending: read-your-writes
    assert list(store.fetch("a", 10, 20)) == [(10, 11), (20, 1000)]
    assert list(store.backward_fetch("a", 0, 100)) == [(30, 31), (20, 1000), (10, 11), (0, 1)]
    assert list(store.fetch("a", 31, 100)) == []
    assert list(store.fetch("a", 20, 10)) == []
    assert store.fetch_window("b", 30) == 32
    assert store.fetch_window("b", 31) is None
    assert list(store.fetch_range("a", "ab", 10, 10)) == [
        (Windowed("a", 10, 20), 11),
        (Windowed("ab", 10, 20), 99),
    ]
    assert list(store.fetch_range(None, "a", 30, 30)) == [(Windowed("a", 30, 40), 31)]
    assert list(store.fetch_range("b", None, 0, 0)) == [(Windowed("b", 0, 10), 2)]
    assert [(w.key, w.start_ms) for w, _ in store.fetch_all(20, 20)] == [("a", 20), ("b", 20)]
    assert [(w.key, w.start_ms) for w, _ in store.backward_fetch_all(20, 20)] == [
        ("b", 20),
        ("a", 20),
    ]
    assert len(list(store.all())) == 9
    assert [w.start_ms for w, _ in store.backward_all()][:2] == [30, 20]
    store.put("a", None, 20)  # delete
    assert list(store.fetch("a", 20, 20)) == []
    store.commit()
    assert list(store.fetch("a", 20, 20)) == []


def test_a_fetch_of_one_key_reads_only_the_segments_of_its_time_range(
    open_manager: OpenManager,
) -> None:
    store = _window(open_manager())
    # "a" + 8 bytes that sort between "a"'s windowed keys 100 and 190: another key, whose
    # windows live in the other segments; a fetch of "a" must neither read nor return them
    other = "a\x00\x00\x00\x00\x00\x00\x00p"
    for start in range(100, 200, 10):
        store.put("a", start, start)
        store.put("b", start, start)
    store.put(other, 7, 120)
    store.put(other, 8, 170)
    store.commit()
    engine = engine_of(store.inner)
    assert engine.live_segments == (2, 3)  # 100-149, 150-199

    def scans(fetch: Callable[[], Iterable[object]]) -> tuple[list[object], int]:
        before = engine.segment_scans
        found = list(fetch())
        return found, engine.segment_scans - before

    assert scans(lambda: store.fetch("a", 100, 140)) == ([(s, s) for s in range(100, 150, 10)], 1)
    assert scans(lambda: store.backward_fetch("a", 150, 180)) == (
        [(s, s) for s in (180, 170, 160, 150)],
        1,
    )
    assert scans(lambda: store.fetch("a", 140, 150)) == ([(140, 140), (150, 150)], 2)
    assert scans(lambda: store.fetch("a", 500, 600)) == ([], 0)
    assert scans(lambda: store.fetch(other, 0, 1_000)) == ([(120, 7), (170, 8)], 2)
    assert scans(lambda: store.fetch_range("a", "a", 160, 160)) == (
        [(Windowed("a", 160, 170), 160)],
        1,
    )
    assert scans(lambda: store.fetch_all(100, 100))[1] == 2  # several keys: every live segment
    store.put("a", 1, 190)  # pending, in the other segment: read-your-writes, not read there
    assert scans(lambda: store.fetch("a", 100, 110)) == ([(100, 100), (110, 110)], 1)
    assert scans(lambda: store.fetch("a", 180, 190)) == ([(180, 180), (190, 1)], 1)
    # the engine's contract: the same entries as the full scan, keys of that length only
    lo, hi = windowed_key(b"a", 100, 0), windowed_key(b"a", 190, 0x7FFFFFFF) + b"\x00"
    want = [(key, value) for key, value in engine.items(lo, hi) if len(key) == 13]
    assert len(want) == 10
    assert list(engine.items(lo, hi, key_size_bytes=13)) == want
    assert list(engine.items(lo, hi, key_size_bytes=13, reverse=True)) == want[::-1]


def test_changelog_layout_is_kafka_streams(open_manager: OpenManager) -> None:
    manager = open_manager(clock=lambda: 5)
    store = _window(manager)
    store.put("k", 3, 1_000, timestamp_ms=1_007)
    store.put("k", None, 990)
    store.commit()
    (log,) = store.changelogs
    records = [(r.key, r.value, r.timestamp_ms, r.headers) for r in log.read(0)]
    assert records == [
        (b"k" + (1_000).to_bytes(8, "big") + bytes(4), (3).to_bytes(8, "big"), 1_007, ()),
        (b"k" + (990).to_bytes(8, "big") + bytes(4), None, 5, ()),
    ]
    assert log.config.cleanup_policy == "compact,delete"
    assert log.config.retention_ms == RETENTION + ADDITIONAL_RETENTION_MS


def test_retain_duplicates(open_manager: OpenManager) -> None:
    store = _window(open_manager(), retain_duplicates=True)
    store.put("a", 1, 10)
    store.put("a", 2, 10)
    store.put("a", None, 10)  # ignored with duplicates
    store.commit()
    assert list(store.fetch("a", 0, 50)) == [(10, 1), (10, 2)]
    assert store.fetch_window("a", 10) == 1
    keys = [r.key for r in store.changelogs[0].read(0)]
    assert keys == [windowed_key(b"a", 10, 1), windowed_key(b"a", 10, 2)]


def test_expired_windows_are_hidden_dropped_and_segments_removed(
    open_manager: OpenManager,
) -> None:
    store = _window(open_manager())
    for start in range(0, 200, 10):
        store.put("k", start, start)
    store.commit()
    engine = engine_of(store.inner)
    assert store.stream_time_ms == 190
    # visible: start > 190 - 100
    assert [s for s, _ in store.fetch("k", 0, 1_000)] == list(range(100, 200, 10))
    # segments 0 (0-49) was removed by one delete_range; 1 (50-99) still holds 50..90
    assert engine.live_segments == (1, 2, 3)
    store.put("k", 1, 80)  # expired: dropped
    assert store.expired_records_dropped == 1
    assert store.pending_count == 0
    store.put("k", 7, 300)  # moves stream time: 100..190 expire
    assert [s for s, _ in store.fetch("k", 0, 1_000)] == [300]
    store.commit()
    # the oldest live segment is now (300 - 100) // 50 = 4, which is empty; 1..3 went whole
    assert engine.live_segments == (6,)
    assert [key for key, _ in engine.items()] == [windowed_key(b"k", 300, 0)]


def test_restore_skips_expired_segments(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = _window(manager)
    for start in range(0, 1_000, 10):
        store.put("k", start, start)
        store.commit()
    expected = list(store.fetch("k", 0, 10_000))
    manager.close()
    manager = open_manager()
    store = _window(manager)
    assert list(store.fetch("k", 0, 10_000)) == expected
    engine = engine_of(store.inner)
    assert engine.expired_records_dropped > 0
    assert engine.live_segments == (17, 18, 19)
    assert sum(1 for _ in engine.items()) == 15  # segments 17..19 hold 850, 860, ..., 990


def test_changelog_retention_deletes_old_segments_and_restore_matches(
    open_manager: OpenManager,
) -> None:
    clock = [0]
    manager = open_manager(clock=lambda: clock[0])
    store = _window(manager)
    for start in range(0, 2_000, 10):
        clock[0] = start
        store.put("k", start, start, timestamp_ms=start)
        store.commit()
    (log,) = store.changelogs
    # Kafka's time retention by record timestamp: segments whose newest record is older
    # than now - (retention + 1 day) go; the windows still live are all younger
    clock[0] = 1_500 + ADDITIONAL_RETENTION_MS + RETENTION
    log.roll()
    assert log.delete_old_segments() > 0
    assert log.log_start_offset > 0
    expected = list(store.fetch("k", 0, 10_000))
    assert [start for start, _ in expected] == list(range(1_900, 2_000, 10))
    manager.close()
    manager = open_manager(clock=lambda: clock[0])
    store = _window(manager)
    assert list(store.fetch("k", 0, 10_000)) == expected


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_crash_and_reopen_keeps_stream_time(open_manager: OpenManager, mode: str) -> None:
    config = StoreConfig(restore_mode=mode)  # type: ignore[arg-type]
    manager = open_manager()
    store = _window(manager, config=config)
    store.put("k", 1, 500)
    store.commit()
    store.put("k", 2, 900)  # uncommitted: lost, stream time falls back
    manager.crash()
    manager = open_manager()
    store = _window(manager, config=config)
    assert store.stream_time_ms == 500
    assert list(store.fetch("k", 0, 1_000)) == [(500, 1)]


def test_settings_are_checked(open_manager: OpenManager) -> None:
    manager = open_manager()
    with pytest.raises(InvalidStoreConfigError):
        manager.window_store("w", window_size_ms=10, retention_ms=5)
    with pytest.raises(InvalidStoreConfigError):
        manager.window_store("w", window_size_ms=0, retention_ms=5)
    store = _window(manager)
    with pytest.raises(InvalidStoreConfigError):
        _window(manager, retention_ms=200)
    with pytest.raises(InvalidTimestampError):
        store.put("k", 1, -1)
    with pytest.raises(InvalidTimestampError):
        list(store.fetch("k", -5, 10))


def test_default_segment_interval_is_kafka_streams() -> None:
    assert TimeSettings.window(window_size_ms=1, retention_ms=1_000).segment_interval_ms == 60_000
    assert (
        TimeSettings.window(window_size_ms=1, retention_ms=600_000).segment_interval_ms == 300_000
    )
