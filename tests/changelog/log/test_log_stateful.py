"""A Hypothesis state machine: the Log against a list model, with reopen, crash and retention steps.

The model is the list of batches appended (offsets, keys, values).  Steps:
append, read from any offset, roll, flush, truncate, clean reopen, crash
(abandon the log; optionally cut the active segment at a random byte inside
the last batch if it was never fsynced, as a power loss may) and retention
by size.  After every step the log's offsets and contents equal the model's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from changelog.config import LogConfig
from changelog.log.log import Log
from tests.changelog.conftest import FakeClock

CONFIG = LogConfig(
    segment_bytes=600,
    index_interval_bytes=64,
    segment_index_bytes=96,  # the time index fills after 7 entries: rolls on a full index too
    flush_messages=1_000_000,  # appends stay unflushed until flush/roll/close: crashes can tear them
    cleanup_policy="delete",  # keyless records are generated: a compacted log refuses them
    retention_bytes=1500,
    retention_ms=-1,
    file_delete_delay_ms=0,
)

keys = st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"dd", b"e" * 20]))
values = st.one_of(st.none(), st.binary(max_size=60))
pairs = st.lists(st.tuples(keys, values), min_size=1, max_size=6)

Batch = tuple[int, list[tuple[bytes | None, bytes | None]]]  # (first offset, pairs)


class LogMachine(RuleBasedStateMachine):
    """Drives one Log through random operations and checks it against ``self.batches``."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="log-stateful-"))
        self.dir = self.root / "changelog-0"
        self.clock = FakeClock()
        self.log = Log.open(self.dir, CONFIG, self.clock)
        self.batches: list[Batch] = []
        self.log_start = 0
        self.log_end = 0
        # (segment base, start position, end position) of the last batch while it is unflushed
        # and still the tail of the active segment; None otherwise.
        self.torn_candidate: tuple[int, int, int] | None = None

    def teardown(self) -> None:
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def expected(self, start: int) -> list[tuple[int, bytes | None, bytes | None]]:
        out = []
        for first, batch in self.batches:
            for n, (key, value) in enumerate(batch):
                if first + n >= start:
                    out.append((first + n, key, value))
        return out

    # ----------------------------------------------------------------- steps

    @rule(batch=pairs, advance=st.integers(0, 5))
    def append(self, batch: list[tuple[bytes | None, bytes | None]], advance: int) -> None:
        self.clock.advance(advance)
        before = self.log.active_segment
        position = before.size_bytes
        info = self.log.append(batch)
        assert info.first_offset == self.log_end
        assert info.last_offset == self.log_end + len(batch) - 1
        active = self.log.active_segment
        start = position if active is before else 0
        self.torn_candidate = (
            None if info.flushed else (active.base_offset, start, active.size_bytes)
        )
        self.batches.append((info.first_offset, batch))
        self.log_end = info.last_offset + 1

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(self.log_start, self.log_end), label="start")
        got = [(r.offset, r.key, r.value) for r in self.log.read(start)]
        assert got == self.expected(start)

    @rule()
    def roll(self) -> None:
        self.log.roll()
        if self.log.active_segment.size_bytes == 0:
            self.torn_candidate = None

    @rule()
    def flush(self) -> None:
        self.log.flush()
        self.torn_candidate = None

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log_start, self.log_end), label="offset")
        new_end = self.log.truncate_to(offset)
        kept = [(first, batch) for first, batch in self.batches if first + len(batch) - 1 < offset]
        expected_end = self.log_end if offset == self.log_end else offset
        if offset != self.log_end:
            for first, batch in self.batches:
                if first <= offset <= first + len(batch) - 1:
                    expected_end = first
            self.batches = kept
        assert new_end == expected_end
        self.log_end = new_end
        self.torn_candidate = None

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = Log.open(self.dir, CONFIG, self.clock)
        self.torn_candidate = None

    @rule()
    def crash(self) -> None:
        """kill -9: nothing is lost (the page cache survives a process crash)."""
        self.log.abandon()
        self.log = Log.open(self.dir, CONFIG, self.clock)
        self.torn_candidate = None

    @precondition(lambda self: self.torn_candidate is not None)
    @rule(data=st.data())
    def crash_tearing_the_last_batch(self, data: st.DataObject) -> None:
        """Power loss: the never-fsynced last batch is cut at a random byte (possibly whole)."""
        assert self.torn_candidate is not None
        base, start, end = self.torn_candidate
        cut = data.draw(st.integers(start, end), label="cut")
        self.log.abandon()
        os.truncate(self.dir / f"{base:020d}.log", cut)
        self.log = Log.open(self.dir, CONFIG, self.clock)
        if cut < end:
            first, _ = self.batches.pop()
            self.log_end = first
        self.torn_candidate = None

    @rule()
    def retention(self) -> None:
        end_before = self.log.log_end_offset
        self.log.delete_old_segments()
        assert self.log.log_start_offset >= self.log_start
        assert self.log.log_end_offset == end_before
        self.log_start = self.log.log_start_offset
        self.batches = [(first, batch) for first, batch in self.batches if first >= self.log_start]
        if self.log.active_segment.size_bytes == 0:
            self.torn_candidate = None

    # ----------------------------------------------------------------- invariants

    @invariant()
    def offsets_match(self) -> None:
        assert self.log.log_end_offset == self.log_end
        assert self.log.log_start_offset == self.log_start
        assert self.log.recovery_point <= self.log_end
        bases = [segment.base_offset for segment in self.log.segments]
        assert bases == sorted(set(bases))
        assert bases[0] <= self.log_start

    @invariant()
    def contents_match(self) -> None:
        got = [(r.offset, r.key, r.value) for r in self.log.read(self.log_start)]
        assert got == self.expected(self.log_start)


TestLogMachine = LogMachine.TestCase  # settings: the Hypothesis profile from tests/conftest.py
