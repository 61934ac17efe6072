"""Hypothesis state machines over the stores in time against plain models, time moving forward.

Timestamped key-value, window, session (merges included) and versioned stores.

Steps: puts (window starts both late and ahead of the stream time), deletes,
commit, abort, compact (roll + forced cleaning passes), reopen (clean
shutdown), crash (no shutdown), and for incremental restores a crash where
RocksDB falls back to its last flush (its stream time with it); the versioned
store also prunes its history.  After every step the store equals the model's
committed state plus the pending writes, with expired windows hidden; after
every reopen, the committed state; a versioned store's RocksDB holds exactly
the committed versions its last prune point keeps.

Tombstones are kept by the cleaner here (``delete_retention_ms`` of a day on a
clock that stands still): removing the tombstone of the newest window can make
a full restore compute an older stream time (docs/time.md, "Limits"), which the
window model does not describe.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from statestore.config import StoreConfig
from statestore.serdes import LongSerde
from statestore.stores.time.timestamped import ValueAndTimestamp
from statestore.stores.time.versioned import VersionedRecord
from statestore.stores.time.window import Windowed
from tests.statestore.helpers import engine_of
from tests.statestore.machines import RestartingMachine

RETENTION = 100
SEGMENT = 40
SIZE = 10


class TimestampedMachine(RestartingMachine):
    """A timestamped key-value store against ``{key: (value, timestamp)}``."""

    name = "ts"

    def __init__(self) -> None:
        self.committed: dict[str, tuple[int, int]] = {}
        super().__init__()

    def _open_store(self, config: StoreConfig) -> Any:
        return self.manager.timestamped_store(self.name, value_serde=LongSerde(), config=config)

    def _expected(self) -> dict[str, tuple[int, int]]:
        return self._with_pending(self.committed)

    def _check_committed(self) -> None:
        assert self._actual() == self.committed

    def _actual(self) -> dict[str, tuple[int, int]]:
        return {key: (vt.value, vt.timestamp_ms) for key, vt in self.store.items()}

    @rule(
        key=st.sampled_from(["a", "b", "c"]),
        value=st.integers(-(2**63), 2**63 - 1),
        stamp=st.integers(0, 2**45),
    )
    def put(self, key: str, value: int, stamp: int) -> None:
        self.store.put(key, value, timestamp_ms=stamp)
        self.pending[key] = (value, stamp)

    @rule(key=st.sampled_from(["a", "b", "c"]))
    def delete(self, key: str) -> None:
        old = self.store.delete(key)
        expected = self._expected().get(key)
        assert old == (None if expected is None else ValueAndTimestamp(*expected))
        self.pending[key] = None

    @rule()
    def commit(self) -> None:
        self.store.commit()
        self.committed = self._expected()
        self.pending = {}

    @rule()
    def abort(self) -> None:
        self.store.abort()
        self.pending = {}

    @invariant()
    def matches_model(self) -> None:
        assert self._actual() == self._expected()
        for key in ("a", "b", "c"):
            entry = self._expected().get(key)
            found = self.store.get_with_timestamp(key)
            assert found == (None if entry is None else ValueAndTimestamp(*entry))


WKEYS = st.sampled_from(["a", "ab", "b", ""])


class WindowMachine(RestartingMachine):
    """A window store against ``{(key, start): (value, timestamp)}`` plus the stream time."""

    name = "win"

    def __init__(self) -> None:
        self.committed: dict[tuple[str, int], tuple[int, int]] = {}
        self.committed_stream_time = -1
        super().__init__()

    def _open_store(self, config: StoreConfig) -> Any:
        return self.manager.window_store(
            self.name,
            window_size_ms=SIZE,
            retention_ms=RETENTION,
            segment_interval_ms=SEGMENT,
            value_serde=LongSerde(),
            config=config,
        )

    def _stream_time(self) -> int:
        starts = [start for _key, start in self.pending]
        return max([self.committed_stream_time, *starts])

    def _merged(self) -> dict[tuple[str, int], tuple[int, int]]:
        return self._with_pending(self.committed)

    def _visible(self) -> dict[tuple[str, int], tuple[int, int]]:
        horizon = self._stream_time() - RETENTION
        return {w: e for w, e in self._merged().items() if w[1] > horizon}

    def _actual(self) -> dict[tuple[str, int], tuple[int, int]]:
        return {
            (windowed.key, windowed.start_ms): (value, 0) for windowed, value in self.store.all()
        }

    def _check_committed(self) -> None:
        assert self.store.stream_time_ms == self.committed_stream_time
        assert self._actual() == {w: (e[0], 0) for w, e in self._visible().items()}

    @rule(key=WKEYS, value=st.integers(0, 1000), ahead=st.integers(-150, 60))
    def put(self, key: str, value: int, ahead: int) -> None:
        start = max(0, self._stream_time() + ahead)
        self.store.put(key, value, start, timestamp_ms=start + 1)
        if start > max(self._stream_time(), start) - RETENTION:
            self.pending[(key, start)] = (value, start + 1)

    @rule(key=WKEYS, ahead=st.integers(-150, 10))
    def delete(self, key: str, ahead: int) -> None:
        start = max(0, self._stream_time() + ahead)
        self.store.put(key, None, start)
        if start > self._stream_time() - RETENTION:
            self.pending[(key, start)] = None

    @rule()
    def commit(self) -> None:
        self.store.commit()
        self.committed_stream_time = self._stream_time()
        self.committed = self._merged()
        self.pending = {}

    @rule()
    def abort(self) -> None:
        self.store.abort()
        self.pending = {}

    @invariant()
    def matches_model(self) -> None:
        visible = self._visible()
        assert self.store.stream_time_ms == self._stream_time()
        ordered = sorted(visible, key=lambda w: w[0].encode() + w[1].to_bytes(8, "big"))
        assert [(w.key, w.start_ms) for w, _ in self.store.all()] == ordered
        assert [(w.key, w.start_ms) for w, _ in self.store.backward_all()] == ordered[::-1]
        now = self._stream_time()
        for key in ("a", "ab", ""):
            expected = sorted((s, e[0]) for (k, s), e in visible.items() if k == key)
            assert list(self.store.fetch(key, 0, 2**62)) == expected
            low, high = max(0, now - 60), max(0, now)
            assert list(self.store.fetch(key, low, high)) == [
                (s, v) for s, v in expected if low <= s <= high
            ]
        first = sorted(visible, key=lambda w: w[1])[:1]
        for key, start in first:
            found = self.store.fetch_window_with_timestamp(key, start)
            assert found == ValueAndTimestamp(*visible[(key, start)])
        in_range = sorted(
            (w for w in visible if "a" <= w[0] <= "ab"),
            key=lambda w: w[0].encode() + w[1].to_bytes(8, "big"),
        )
        assert [(w.key, w.start_ms) for w, _ in self.store.fetch_range("a", "ab", 0, 2**62)] == (
            in_range
        )


class SessionMachine(RestartingMachine):
    """A session store against ``{(key, start, end): aggregate}`` plus the stream time."""

    name = "sess"

    def __init__(self) -> None:
        self.committed: dict[tuple[str, int, int], int] = {}
        self.committed_stream_time = -1
        super().__init__()

    def _open_store(self, config: StoreConfig) -> Any:
        return self.manager.session_store(
            self.name,
            retention_ms=RETENTION,
            segment_interval_ms=SEGMENT,
            value_serde=LongSerde(),
            config=config,
        )

    def _stream_time(self) -> int:
        return max([self.committed_stream_time, *(end for _k, _s, end in self.pending)])

    def _merged(self) -> dict[tuple[str, int, int], int]:
        return self._with_pending(self.committed)

    def _visible(self) -> dict[tuple[str, int, int], int]:
        horizon = self._stream_time() - RETENTION
        return {s: v for s, v in self._merged().items() if s[2] > horizon}

    def _actual(self) -> dict[tuple[str, int, int], int]:
        return {(w.key, w.start_ms, w.end_ms): v for w, v in self.store.all()}

    def _check_committed(self) -> None:
        assert self.store.stream_time_ms == self.committed_stream_time
        assert self._actual() == self._visible()

    # values small enough that merge's sums of them stay within LongSerde's int64
    @rule(
        key=WKEYS,
        ahead=st.integers(-150, 60),
        length=st.integers(0, 30),
        value=st.integers(0, 2**40),
    )
    def put(self, key: str, ahead: int, length: int, value: int) -> None:
        end = max(0, self._stream_time() + ahead)
        start = max(0, end - length)
        self.store.put(Windowed(key, start, end), value)
        if end > max(self._stream_time(), end) - RETENTION:
            self.pending[(key, start, end)] = value

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        live = sorted(self._visible())
        if not live:
            return
        key, start, end = data.draw(st.sampled_from(live))
        self.store.remove(Windowed(key, start, end))
        self.pending[(key, start, end)] = None

    @rule(key=WKEYS, ahead=st.integers(-40, 40), gap=st.integers(0, 30))
    def merge(self, key: str, ahead: int, gap: int) -> None:
        stamp = max(0, self._stream_time() + ahead)
        overlapping = sorted(
            (
                s
                for s in self._visible()
                if s[0] == key and s[2] >= stamp - gap and s[1] <= stamp + gap
            ),
            key=lambda s: (s[2], s[1]),
        )
        start = min([stamp, *(s[1] for s in overlapping)])
        end = max([stamp, *(s[2] for s in overlapping)])
        total = sum(self._visible()[s] for s in overlapping) + 1
        result = self.store.merge(
            key,
            stamp,
            inactivity_gap_ms=gap,
            aggregate=lambda agg: (agg or 0) + 1,
            merger=lambda a, b: a + b,
        )
        if end <= max(self._stream_time(), end) - RETENTION:
            return  # the merged session has expired: dropped
        assert result == (Windowed(key, start, end), total)
        for session in overlapping:
            if session != (key, start, end):
                self.pending[session] = None
        self.pending[(key, start, end)] = total

    @rule()
    def commit(self) -> None:
        self.store.commit()
        self.committed_stream_time = self._stream_time()
        self.committed = self._merged()
        self.pending = {}

    @rule()
    def abort(self) -> None:
        self.store.abort()
        self.pending = {}

    @invariant()
    def matches_model(self) -> None:
        visible = self._visible()
        assert self.store.stream_time_ms == self._stream_time()
        ordered = sorted(
            visible, key=lambda s: s[0].encode() + s[2].to_bytes(8, "big") + s[1].to_bytes(8, "big")
        )
        assert [(w.key, w.start_ms, w.end_ms) for w, _ in self.store.all()] == ordered
        now = max(0, self._stream_time())
        for key in ("a", "ab", ""):
            low, high = max(0, now - 50), now
            expected = [s for s in ordered if s[0] == key and s[2] >= low and s[1] <= high]
            found = self.store.find_sessions(key, low, high)
            assert [(w.key, w.start_ms, w.end_ms) for w, _ in found] == expected
            assert [v for _, v in self.store.find_sessions(key, low, high)] == [
                visible[s] for s in expected
            ]


class VersionedMachine(RestartingMachine):
    """A versioned store against ``{(key, timestamp): value or None}`` plus the stream time.

    The clock stands at 0, so the changelog's ``min_compaction_lag_ms`` keeps
    every version from the cleaner (the history a restore needs).
    """

    name = "ver"
    clock_ms = 0

    def __init__(self) -> None:
        self.committed: dict[tuple[str, int], int | None] = {}
        self.committed_stream_time = -1
        super().__init__()

    def _open_store(self, config: StoreConfig) -> Any:
        return self.manager.versioned_store(
            self.name, history_retention_ms=RETENTION, value_serde=LongSerde(), config=config
        )

    def _stream_time(self) -> int:
        return max([self.committed_stream_time, *(stamp for _k, stamp in self.pending)])

    def _merged(self) -> dict[tuple[str, int], int | None]:
        return {**self.committed, **self.pending}

    def _expected(self, key: str, as_of: int | None) -> VersionedRecord[int] | None:
        versions = sorted((t, v) for (k, t), v in self._merged().items() if k == key)
        if as_of is not None and as_of < self._stream_time() - RETENTION:
            return None
        older = [(t, v) for t, v in versions if as_of is None or t <= as_of]
        if not older or older[-1][1] is None:
            return None
        stamp, value = older[-1]
        later = [t for t, _v in versions if t > stamp]
        return VersionedRecord(value, stamp, later[0] if later else None)

    def _check_committed(self) -> None:
        assert self.store.stream_time_ms == self.committed_stream_time
        self.matches_model()

    @rule(key=WKEYS, ahead=st.integers(-150, 60), value=st.integers(0, 1000))
    def put(self, key: str, ahead: int, value: int) -> None:
        stamp = max(0, self._stream_time() + ahead)
        kept = self.store.put(key, value, stamp)
        assert kept == (stamp >= max(self._stream_time(), stamp) - RETENTION)
        if kept:
            self.pending[(key, stamp)] = value

    @rule(key=WKEYS, ahead=st.integers(60, 200), value=st.integers(0, 1000))
    def put_far_ahead(self, key: str, ahead: int, value: int) -> None:
        """Time moving forward fast, committed: the cutoff passes prune points."""
        self.put(key, ahead, value)
        self.commit()

    @rule(key=WKEYS, ahead=st.integers(-100, 0))
    def delete_recent(self, key: str, ahead: int) -> None:
        """A delete within the history retention (kept), committed, to be pruned later."""
        self.delete(key, ahead)
        self.commit()

    @rule(key=WKEYS, ahead=st.integers(-150, 20))
    def delete(self, key: str, ahead: int) -> None:
        stamp = max(0, self._stream_time() + ahead)
        previous = self.store.delete(key, stamp)
        assert previous == self._expected(key, stamp)
        if stamp >= self._stream_time() - RETENTION:
            self.pending[(key, stamp)] = None

    @rule()
    def commit(self) -> None:
        self.store.commit()
        self.committed_stream_time = self._stream_time()
        self.committed = self._merged()
        self.pending = {}

    @rule()
    def abort(self) -> None:
        self.store.abort()
        self.pending = {}

    @rule()
    def prune(self) -> None:
        """A prune point reached now (commits reach one when enough was written since the last)."""
        engine = engine_of(self.store.inner)
        point = engine.prune_point(engine.stream_time_ms)
        applied = engine.applied_offset()
        if point > engine.history_pruned_to_ms and applied is not None:
            engine.prune_history(point, applied)

    def _kept_by_prune(self, point: int) -> dict[tuple[str, int], int | None]:
        """The committed versions a prune at ``point`` keeps, by the rule of docs/time.md."""
        kept: dict[tuple[str, int], int | None] = {}
        for key in {k for k, _t in self.committed}:
            versions = sorted((t, v) for (k, t), v in self.committed.items() if k == key)
            before = [(t, v) for t, v in versions if t < point]
            if before and before[-1][1] is not None:
                kept[(key, before[-1][0])] = before[-1][1]
            kept.update({(key, t): v for t, v in versions if t >= point})
        return kept

    @invariant()
    def rocksdb_holds_no_version_past_the_prune_point(self) -> None:
        """RocksDB holds exactly the committed versions a prune at its recorded point keeps.

        Nothing a read at or after the cutoff needs is missing (the reads are
        checked against the model by :meth:`matches_model`), nothing older is
        left, across crashes, reopens (full and incremental) and cleaning.
        """
        engine = engine_of(self.store.inner)
        point = engine.history_pruned_to_ms
        assert point < 0 or (
            point % (RETENTION // 2) == 0 and point <= self.committed_stream_time - RETENTION
        )
        key_serde, value_serde = self.store.key_serde, self.store.value_serde
        held = {
            (key_serde.deserialize(stored[:-8]), int.from_bytes(stored[-8:], "big")): (
                None if data == b"\x00" else value_serde.deserialize(data[1:])
            )
            for stored, data in engine.items()
        }
        assert held == self._kept_by_prune(point)

    @invariant()
    def matches_model(self) -> None:
        assert self.store.stream_time_ms == self._stream_time()
        now = max(0, self._stream_time())
        for key in ("a", "ab", ""):
            assert self.store.get(key) == self._expected(key, None)
            for as_of in range(max(0, now - 160), now + 20, 7):
                assert self.store.get(key, as_of) == self._expected(key, as_of)


TestTimestamped = TimestampedMachine.TestCase
TestTimestamped.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
TestWindow = WindowMachine.TestCase
TestWindow.settings = settings(max_examples=40, stateful_step_count=35, deadline=None)
TestWindow.pytestmark = [pytest.mark.slow]  # over a minute under load: the slow tier
TestSession = SessionMachine.TestCase
TestSession.settings = settings(max_examples=40, stateful_step_count=35, deadline=None)
TestSession.pytestmark = [pytest.mark.slow]  # over a minute under load: the slow tier
TestVersioned = VersionedMachine.TestCase
TestVersioned.settings = settings(max_examples=40, stateful_step_count=35, deadline=None)
