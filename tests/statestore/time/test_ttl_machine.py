"""A Hypothesis state machine over the key-value store with a TTL against a plain model, time moving forward.

The model is ``{key: (value, timestamp)}`` of committed writes plus the
pending ones, and a clock.  What the store must show is the model's entries
whose timestamp is after ``clock - TTL``: an expired value is never read, and
once expired it stays so (the clock only moves forward), whatever the steps:
puts stamped before and after the newest one (record timestamps), deletes,
commit (sweeping expired keys into tombstones when due), abort, time moving,
compact (roll + forced cleaning passes that remove expired records and, with
a short ``delete_retention_ms``, tombstones), reopen, crash, and for
incremental restores a crash where RocksDB falls back to its flush at open.

Two machines: one sweeps at every commit, one never (so only the cleaner,
the reads and restore enforce expiry).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from changelog.config import LogConfig
from statestore.config import StoreConfig
from statestore.serdes import LongSerde
from statestore.stores.time.settings import TtlSettings
from statestore.stores.time.timestamped import ValueAndTimestamp
from tests.statestore.machines import RestartingMachine

KEYS = st.sampled_from(["a", "b", "c", "d"])
TTL = 100
LOG = LogConfig(segment_bytes=400, index_interval_bytes=64, delete_retention_ms=30)
START = 10**9


class TtlMachine(RestartingMachine):
    """A TTL store (record timestamps) against ``{key: (value, timestamp)}`` and a clock."""

    name = "t"
    log_config = LOG
    tmp_prefix = "statestore-ttl-"
    sweep_interval_ms = 0

    def __init__(self) -> None:
        self.clock_ms = START
        self.committed: dict[str, tuple[int, int]] = {}
        super().__init__()

    def _open_store(self, config: StoreConfig) -> Any:
        return self.manager.ttl_store(
            self.name,
            ttl=TtlSettings(
                ttl_ms=TTL, timestamp="record", sweep_interval_ms=self.sweep_interval_ms
            ),
            value_serde=LongSerde(),
            config=config,
        )

    def _check_committed(self) -> None:
        assert self._actual() == self._live(self.committed)

    # ----------------------------------------------------------- the model

    def _live(self, view: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        cutoff = self.clock_ms - TTL
        return {key: entry for key, entry in view.items() if entry[1] > cutoff}

    def _expected(self) -> dict[str, tuple[int, int]]:
        return self._live(self._with_pending(self.committed))

    def _actual(self) -> dict[str, tuple[int, int]]:
        return {
            key: (found.value, found.timestamp_ms)
            for key in ("a", "b", "c", "d")
            if (found := self.store.get_with_timestamp(key)) is not None
        }

    # ----------------------------------------------------------- steps

    @rule(key=KEYS, value=st.integers(-(2**40), 2**40), age=st.integers(-20, TTL + 20))
    def put(self, key: str, value: int, age: int) -> None:
        stamp = self.clock_ms - age
        self.store.put(key, value, timestamp_ms=stamp)
        self.pending[key] = (value, stamp)

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        expected = self._expected().get(key)
        old = self.store.delete(key)
        assert old == (None if expected is None else expected[0])
        self.pending[key] = None

    @rule()
    def commit(self) -> None:
        view = self._with_pending(self.committed)
        self.manager.commit()
        self.committed = view
        self.pending = {}

    @rule()
    def abort(self) -> None:
        self.manager.abort()
        self.pending = {}

    @rule(step=st.integers(1, TTL * 2))
    def advance(self, step: int) -> None:
        self.clock_ms += step

    # ----------------------------------------------------------- checks

    @invariant()
    def reads_match_model(self) -> None:
        expected = self._expected()
        assert self._actual() == expected
        assert {k: (v, expected[k][1]) for k, v in self.store.items()} == expected
        assert len(self.store) == len(expected)
        assert self.store.get_many(["a", "b", "c", "d"]) == [
            expected[k][0] if k in expected else None for k in ("a", "b", "c", "d")
        ]
        committed = self._live(self.committed)
        reader = self.store.reader()
        assert dict(reader.items()) == {k: v for k, (v, _t) in committed.items()}
        for key in ("a", "b", "c", "d"):
            found = self.store.get_with_timestamp(key)
            entry = expected.get(key)
            assert found == (None if entry is None else ValueAndTimestamp(*entry))


class NeverSweptTtlMachine(TtlMachine):
    """The same without the sweep: only reads, the cleaner and restore enforce expiry."""

    sweep_interval_ms = 10**12


@pytest.mark.timeout(600)
@pytest.mark.parametrize("machine", [TtlMachine, NeverSweptTtlMachine])
def test_ttl_store_matches_model(machine: type[TtlMachine]) -> None:
    """The store equals the model's live entries after every step."""
    test = machine.TestCase
    test.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
    test().runTest()
