"""A Hypothesis state machine: appends, deletes, rolls, cleans, clock steps and reopens vs a dict.

Crashes are injected at every file-system step of a pass (then the log is
reopened, as after ``kill -9``).  After every clean: reading the log replays to the model; every surviving
record is byte-identical to the one that had its offset before; offsets
strictly increase; the log end offset did not move; a tombstone disappeared
only if a later record of its key superseded it or its delete horizon had
passed (and it was below the cleaning barrier); and no expired, removable
tombstone survived in the cleaned range.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import attrs
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from changelog.cleaner.clean import clean_log
from changelog.cleaner.offset_map import SLOT_BYTES, OffsetMap
from changelog.config import LogConfig
from changelog.fs import files
from changelog.log.log import Log

T0 = 1_700_000_000_000
RETENTION_MS = 1000
KEYS = st.sampled_from([b"k%d" % i for i in range(8)])
VALUES = st.binary(max_size=24)

Entry = tuple[bytes | None, bytes | None]


@attrs.define
class Clock:
    now: int = T0

    def __call__(self) -> int:
        return self.now


class CleanerMachine(RuleBasedStateMachine):
    """The model: ``state`` (key -> latest value) is what replaying the log must give."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="cleaner-machine-"))
        self.clock = Clock()
        self.config = LogConfig(
            segment_bytes=300,
            delete_retention_ms=RETENTION_MS,
            file_delete_delay_ms=0,
            flush_messages=10**9,
        )
        self.log = self._open()
        self.state: dict[bytes, bytes] = {}
        self.barrier: int | None = None

    def _open(self) -> Log:
        return Log.open(self.root / "store-0", self.config, clock=self.clock)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ----------------------------------------------------------------- reading

    def records(self) -> dict[int, Entry]:
        return {r.offset: (r.key, r.value) for r in self.log.read(self.log.log_start_offset)}

    def horizons(self) -> dict[int, int | None]:
        """Record offset -> its batch's delete horizon."""
        out: dict[int, int | None] = {}
        for segment in self.log.segments:
            for _position, header, _raw in segment.batches():
                for offset in range(header.base_offset, header.next_offset):
                    out[offset] = header.delete_horizon_ms
        return out

    # ----------------------------------------------------------------- rules

    @rule(pairs=st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=6))
    def append(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self.log.append(list(pairs))
        for key, value in pairs:
            self.state[key] = value

    @rule(keys=st.lists(KEYS, min_size=1, max_size=3))
    def delete(self, keys: list[bytes]) -> None:
        self.log.append([(key, None) for key in keys])
        for key in keys:
            self.state.pop(key, None)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(ms=st.integers(0, 2 * RETENTION_MS))
    def advance_clock(self, ms: int) -> None:
        self.clock.now += ms

    @rule(offset=st.one_of(st.none(), st.integers(0, 200)))
    def set_barrier(self, offset: int | None) -> None:
        self.barrier = offset
        self.log.cleaning_barrier_offset = offset

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = self._open()
        self.log.cleaning_barrier_offset = self.barrier

    @rule()
    def crash_and_reopen(self) -> None:
        self.log.abandon()
        self.log = self._open()
        self.log.cleaning_barrier_offset = self.barrier

    @precondition(lambda self: len(self.log.segments) > 1)
    @rule(force=st.booleans(), tiny_map=st.booleans())
    def clean(self, force: bool, tiny_map: bool) -> None:
        end_before = self.log.log_end_offset
        before = self.records()
        horizons_before = self.horizons()
        offset_map = OffsetMap(SLOT_BYTES * 11, load_factor=0.5) if tiny_map else None
        now = self.clock.now
        stats = clean_log(self.log, force=force, offset_map=offset_map)
        assert self.log.log_end_offset == end_before
        after = self.records()
        for offset, entry in after.items():
            assert before[offset] == entry, f"record at {offset} changed"
        if stats is None:
            assert after == before
            return
        # removals are justified
        last_offset_of: dict[bytes | None, int] = {}  # latest offset per key in the mapped range
        for offset, (key, _value) in sorted(before.items()):
            if offset < stats.end_offset:
                last_offset_of[key] = offset
        for offset, (key, value) in before.items():
            if offset in after:
                continue
            assert offset < stats.end_offset, f"record {offset} beyond the mapped range removed"
            if last_offset_of[key] > offset:
                continue  # superseded
            assert value is None, f"the latest value of {key!r} at {offset} was removed"
            horizon = horizons_before.get(offset)
            assert horizon is not None and now >= horizon, f"tombstone {offset} removed early"
            assert self.barrier is None or offset < self.barrier
        # nothing removable was left behind in the cleaned range
        horizons_after = self.horizons()
        for offset, (key, value) in after.items():
            if offset >= stats.end_offset or (self.barrier is not None and offset >= self.barrier):
                continue
            if value is None:
                horizon = horizons_after.get(offset)
                assert horizon is not None, f"tombstone {offset} kept without a horizon"
                earlier = horizons_before.get(offset)
                if earlier is not None:
                    assert now < earlier, f"expired tombstone {offset} kept"
            else:
                assert last_offset_of[key] == offset, f"superseded {key!r} at {offset} kept"

    @precondition(lambda self: len(self.log.segments) > 1)
    @rule(k=st.integers(0, 80))
    def crash_during_clean(self, k: int) -> None:
        """Crash at the k-th file-system step of a forced pass, then recover."""
        end_before = self.log.log_end_offset
        steps = [0]

        def crash(step: str, path: Path) -> None:
            if steps[0] == k:
                raise files.SimulatedCrash(f"{step} {path}")
            steps[0] += 1

        try:
            with files.inject_faults(crash):
                clean_log(self.log, force=True)
            event("pass completed before the crash step")
        except files.SimulatedCrash:
            event("crashed mid-pass")
        self.log.abandon()
        self.log = self._open()
        self.log.cleaning_barrier_offset = self.barrier
        assert self.log.log_end_offset == end_before
        assert not list(self.log.dir.glob("*.cleaned"))
        assert not list(self.log.dir.glob("*.swap"))

    # ----------------------------------------------------------------- invariants

    @invariant()
    def replay_gives_the_model(self) -> None:
        records = self.records()
        offsets = list(records)
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        state: dict[bytes, bytes] = {}
        for _offset, (key, value) in sorted(records.items()):
            assert key is not None
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        assert state == self.state


CleanerMachine.TestCase.settings = settings(stateful_step_count=40, deadline=None)
TestCleanerMachine = CleanerMachine.TestCase
