"""The cleaner keeps exactly Kafka's set on transactional logs, markers included.

Hypothesis writes logs of plain batches, transactional batches of two producers
(interleaved, committed or aborted, empty transactions too) and rolls; then
passes run with the clock moving past every delete horizon until the log is no
longer due.  A model computes, independently of the cleaner, what Kafka's rules
leave once nothing more can go:

* a data record stays iff it is committed (plain, or in a committed
  transaction), the latest committed record of its key, and not a tombstone
  (every tombstone's horizon has passed); aborted records never shadow;
* a COMMIT marker stays iff a record of its transaction stays; ABORT markers
  and markers of empty transactions go (Kafka's ``CleanedTransactionMetadata``:
  a marker goes once no batch of its transaction is left and its delete
  horizon passed).

The loop also proves that markers alone keep the log due until they are gone.
"""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

import attrs
from hypothesis import given
from hypothesis import strategies as st

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from changelog.log.log import Log
from changelog.record.control import ControlRecordType, read_marker
from tests.changelog.conftest import FakeClock

RETENTION_MS = 1000
PRODUCERS = (7, 8)
KEYS = [b"a", b"b", b"c", b"d"]

values = st.one_of(st.none(), st.sampled_from([b"1", b"2", b"3"]))
records = st.lists(st.tuples(st.sampled_from(KEYS), values), min_size=1, max_size=3)
events = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.none(), records),
        st.tuples(st.just("data"), st.sampled_from(PRODUCERS), records),
        st.tuples(st.just("end"), st.sampled_from(PRODUCERS), st.booleans()),
        st.tuples(st.just("roll"), st.none(), st.none()),
    ),
    min_size=1,
    max_size=30,
)


@attrs.define
class Model:
    """Kafka's fixed point, computed from what was written (see the module docstring)."""

    records: list[tuple[int, bytes, bytes | None, int | None]] = attrs.Factory(list)
    """``(offset, key, value, transaction id)`` of every committed record (``None``: plain)."""
    markers: dict[int, int] = attrs.Factory(dict)
    """COMMIT marker offset -> its transaction id."""

    def kept(self) -> tuple[set[tuple[int, bytes, bytes | None]], set[int]]:
        latest: dict[bytes, int] = {}
        for offset, key, _value, _txn in self.records:
            latest[key] = offset
        data = {
            (offset, key, value)
            for offset, key, value, _txn in self.records
            if latest[key] == offset and value is not None
        }
        alive = {txn for offset, key, value, txn in self.records if (offset, key, value) in data}
        markers = {offset for offset, txn in self.markers.items() if txn in alive}
        return data, markers


def write(log: Log, script: list[tuple[str, int | None, object]]) -> Model:
    model = Model()
    open_txns: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
    txn_ids = 0
    for kind, pid, arg in script:
        if kind == "plain":
            pairs = list(arg)  # type: ignore[call-overload]
            info = log.append(pairs)
            for n, (key, value) in enumerate(pairs):
                model.records.append((info.first_offset + n, key, value, None))
        elif kind == "data":
            assert pid is not None
            pairs = list(arg)  # type: ignore[call-overload]
            info = log.append_transactional(pairs, producer_id=pid, producer_epoch=0)
            open_txns.setdefault(pid, []).extend(
                (info.first_offset + n, key, value) for n, (key, value) in enumerate(pairs)
            )
        elif kind == "end":
            assert pid is not None
            _end(log, model, open_txns, pid, commit=bool(arg), txn_id=txn_ids)
            txn_ids += 1
        else:
            log.roll()
    for pid in sorted(open_txns):
        _end(log, model, open_txns, pid, commit=True, txn_id=txn_ids)
        txn_ids += 1
    log.roll()
    model.records.sort()
    return model


def _end(
    log: Log,
    model: Model,
    open_txns: dict[int, list[tuple[int, bytes, bytes | None]]],
    pid: int,
    *,
    commit: bool,
    txn_id: int,
) -> None:
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    info = log.append_marker(kind, producer_id=pid, producer_epoch=0)
    data = open_txns.pop(pid, [])
    if commit:
        model.records.extend((offset, key, value, txn_id) for offset, key, value in data)
        model.markers[info.first_offset] = txn_id


def on_disk(log: Log) -> tuple[set[tuple[int, bytes, bytes | None]], set[int]]:
    data: set[tuple[int, bytes, bytes | None]] = set()
    markers: set[int] = set()
    for segment in log.segments:
        for position, header, raw in segment.batches():
            if header.is_control:
                if read_marker(header, raw, path=segment.log_path, position=position):
                    markers.add(header.base_offset)
                continue
    for record in log.read(0, isolation="read_uncommitted"):
        assert record.key is not None
        data.add((record.offset, record.key, record.value))
    return data, markers


@given(script=events, segment_bytes=st.sampled_from([200, 400, 100_000]))
def test_the_cleaner_keeps_exactly_kafkas_set(
    script: list[tuple[str, int | None, object]], segment_bytes: int
) -> None:
    clock = FakeClock()
    config = LogConfig(
        segment_bytes=segment_bytes,
        min_cleanable_dirty_ratio=0.01,
        delete_retention_ms=RETENTION_MS,
        file_delete_delay_ms=0,
        flush_messages=10**9,
    )
    with TemporaryDirectory() as tmp, Log.open(Path(tmp) / "t-0", config, clock) as log:
        model = write(log, script)
        passes = 0
        while clean_log(log) is not None:  # due by dirty ratio, then by horizons alone
            passes += 1
            assert passes < 12, "the log stays due for ever"
            clock.advance(RETENTION_MS + 1)
        clock.advance(RETENTION_MS + 1)
        while clean_log(log) is not None:
            passes += 1
            assert passes < 12, "the log stays due for ever"
            clock.advance(RETENTION_MS + 1)
        assert on_disk(log) == model.kept()
        assert log.last_stable_offset == log.log_end_offset
