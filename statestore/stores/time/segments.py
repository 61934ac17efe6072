"""RocksDB segmented by time: the engine under window and session stores (Kafka Streams' segmented bytes store).

The layer above hands this engine its changelog keys: windowed keys (``key |
window start | seqnum``) or session keys (``key | end | start``),
:mod:`statestore.stores.time.layout`.  The *segment time* of a key is the
first 8 bytes of its fixed suffix (a window's start, a session's end); the
engine stores each key under ``segment id | key`` in the data column family,
with ``segment id = segment time // segment_interval_ms``.  Reads take and
return changelog keys: a point get finds the segment from the key, a scan runs
over every live segment and merges them back into key order, and a scan of one
key's windows (a *time-bounded scan*, :meth:`SegmentedEngine.items`) reads only
the segments of its time range, one after the other.  Below, "window
start" reads "session end" for a session store.

Retention, as Kafka Streams' ``AbstractRocksDBSegmentedBytesStore``:

* the *observed stream time* is the largest window start ever written
  (commits and restore alike; ``-1`` before the first);
* the *oldest live segment* is ``(stream time - retention_ms) // segment_interval_ms``
  (not below 0); a write to an older segment is dropped (and counted in
  :attr:`SegmentedEngine.expired_records_dropped`), which is how a restore
  skips records whose segment has expired;
* when the oldest live segment moves, every older one is removed with ONE
  ``delete_range`` in the same ``WriteBatch`` as the data that moved it: no
  per-key delete; RocksDB drops the covered files at compaction.

A window inside a live segment may still be older than the retention: the
store above hides it (``start <= stream time - retention_ms``), as Kafka
Streams' fetch does.

History pruning (a versioned store: one segment, no expiry by segment).  A
read at or after ``stream time - history retention`` (the *cutoff*) needs, per
key, every version after the cutoff and the newest one at or before it; older
versions, and a delete version at or before the cutoff (with everything older
than it), can no longer be read (:mod:`statestore.stores.time.versioned`).
:meth:`SegmentedEngine.prune_history` removes exactly those before a *prune
point* (a multiple of :attr:`TimeSettings.history_prune_interval_ms
<statestore.stores.time.settings.TimeSettings.history_prune_interval_ms>` at or
below the cutoff) in one pass over RocksDB, and records the point in the
metadata (``history-pruned-to``, int64 BE) with the last deletes.  A write runs
it when the prune point has passed the recorded one and at least half as many
versions were written since the last pass as it kept, so a pass costs a few
reads per version written; restores write through the same rule.  The deletes
go out in chunks, each version before the delete version that shadows it, so a
reader's snapshot between two chunks reads what it would read before or after;
a crash between them leaves the recorded point behind, and a later pass
finishes the job.

Metadata column family, besides the applied offset: key ``stream-time`` ->
8-byte big-endian signed int, the observed stream time, written in every
``WriteBatch`` with the data that reached it (so an incremental restore reads
the stream time that matches the data).  :meth:`SegmentedEngine.get` of the
empty key returns those 8 bytes (no data key is shorter than its suffix): the
store above reads the stream time through the layers' ordinary ``get``.

Invariants (besides :class:`~statestore.stores.engine.RocksDBEngine`'s):
``_segments`` is the set of segment ids that may hold data, none below
``_live_from``; ``_live_from`` is the oldest live segment of ``_stream_time``;
all three change only after a successful write.  With history pruning, RocksDB
holds no version that :meth:`SegmentedEngine.prune_history` would remove at
``_pruned_to`` (the recorded prune point, ``-1``: none).

Thread-safety: as :class:`~statestore.stores.engine.RocksDBEngine` for reads;
:meth:`~SegmentedEngine.write` is called by the owning change-logging layer's
single committing thread.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping
from operator import itemgetter
from pathlib import Path
from typing import Any, Final

import rocksdict

from statestore.config import RocksDBConfig
from statestore.errors import StoreEngineError
from statestore.stores.engine import RocksDBEngine
from statestore.stores.time.layout import (
    SEGMENT_ID,
    SEGMENT_PREFIX_BYTES,
    TIMESTAMP,
    TIMESTAMP_BYTES,
    TOMBSTONE_VERSION,
)
from statestore.stores.time.settings import TimeSettings

__all__ = ["STREAM_TIME_KEY", "SegmentedEngine"]

STREAM_TIME_KEY: Final = b""
"""The key whose :meth:`SegmentedEngine.get` is the observed stream time (8 bytes, int64 BE)."""
_STREAM_TIME_META: Final = b"stream-time"
_PRUNED_TO_META: Final = b"history-pruned-to"
_TIME_MAX_SUFFIX: Final = TIMESTAMP.pack(2**63 - 1)
_PRUNE_CHUNK: Final = 10_000
"""Deletes per ``WriteBatch`` of a history prune (bounds its memory)."""
_KEY: Final = itemgetter(0)
_NO_STREAM_TIME: Final = -1


class SegmentedEngine(RocksDBEngine):
    """A :class:`RocksDBEngine` whose data is segmented by window start (see the module docstring).

    Thread-safety and invariants: see the module docstring.
    """

    def __init__(
        self,
        path: Path,
        db: Any,
        config: RocksDBConfig,
        label: str,
        *,
        settings: TimeSettings,
    ) -> None:
        """Use :meth:`open_segmented`."""
        super().__init__(path, db, config, label)
        self._interval = settings.engine_segment_interval_ms
        self._retention = settings.engine_retention_ms
        self._suffix = settings.key_suffix_bytes
        raw = self.meta(_STREAM_TIME_META)
        self._stream_time = _NO_STREAM_TIME if raw is None else int(TIMESTAMP.unpack(raw)[0])
        self._live_from = self._oldest_live(self._stream_time)
        self._segments = self._find_segments()
        self.expired_records_dropped = 0
        """Writes dropped because their segment had expired (commits and restores)."""
        self.segment_scans = 0
        """Segment iterators opened by :meth:`items` since the open (what a time-bounded scan saves)."""
        self._history = settings.retention_ms
        self._prune_interval = settings.history_prune_interval_ms
        raw = self.meta(_PRUNED_TO_META)
        self._pruned_to = -1 if raw is None else int(TIMESTAMP.unpack(raw)[0])
        self._kept_at_prune = 0
        self._written_since_prune = 0
        self.versions_pruned = 0
        """Versions removed by history pruning since the open (commits and restores)."""
        self.lookup = self.get

    @classmethod
    def open_segmented(
        cls,
        path: Path,
        *,
        config: RocksDBConfig,
        cache: rocksdict.Cache | None,
        settings: TimeSettings,
        label: str = "",
    ) -> SegmentedEngine:
        """Open (creating if missing) the segmented RocksDB directory ``path``."""
        return cls.open(path, config=config, cache=cache, label=label, settings=settings)

    # ------------------------------------------------------------ segments

    def _oldest_live(self, stream_time: int) -> int:
        return max(0, (stream_time - self._retention) // self._interval)

    def _find_segments(self) -> set[int]:
        """The segment ids present in RocksDB (one seek per segment)."""
        found: set[int] = set()
        seek = SEGMENT_ID.pack(0)
        while True:
            first = next(RocksDBEngine.items(self, seek), None)
            if first is None:
                return found
            segment = int(SEGMENT_ID.unpack_from(first[0])[0])
            found.add(segment)
            if segment == 2**64 - 1:
                return found
            seek = SEGMENT_ID.pack(segment + 1)

    @property
    def stream_time_ms(self) -> int:
        """The observed stream time (``-1``: nothing written yet)."""
        return self._stream_time

    @property
    def live_segments(self) -> tuple[int, ...]:
        """The ids of the segments that may hold data, ascending."""
        return tuple(sorted(self._segments))

    def _time_of(self, key: bytes) -> int:
        """The segment time of changelog ``key`` (a window's start, a session's end)."""
        if len(key) < self._suffix:
            raise StoreEngineError(
                self.path,
                "write",
                f"key {key!r:.60} is shorter than the {self._suffix}-byte suffix",
            )
        return int(TIMESTAMP.unpack_from(key, len(key) - self._suffix)[0])

    def _segment_of(self, key: bytes) -> int:
        return max(0, self._time_of(key)) // self._interval

    # --------------------------------------------------------------- reads

    def get(self, key: bytes) -> bytes | None:
        """The value of windowed ``key`` (the empty key: the stream time, 8 bytes)."""
        if len(key) < self._suffix:
            return TIMESTAMP.pack(self._stream_time) if key == STREAM_TIME_KEY else None
        return super().get(SEGMENT_ID.pack(self._segment_of(key)) + key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The values of windowed ``keys``, in order."""
        return [self.get(key) for key in keys]

    def items(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= windowed key < hi`` of the live segments, in windowed-key order.

        With ``key_size_bytes``, only the keys of exactly that length.  The
        *time-bounded scan*: when ``lo`` and ``hi`` then also share the plain
        key of that length (one key's windows: ``key | time | ...`` at both
        ends), every key in range has that plain key and a segment time
        between ``lo``'s and ``hi``'s, so only the live segments of those
        times are read, one after the other (for one plain key, segment
        order is key order: no merge).  Otherwise every live segment is
        read and the scans merged.  Every segment's RocksDB iterator is
        opened by this call (:meth:`RocksDBEngine.items`'s consistency).
        """
        segments = sorted(self._segments, reverse=reverse)
        span = None if key_size_bytes is None else self._time_span(lo, hi, key_size_bytes)
        if span is not None:
            first, last = span
            segments = [segment for segment in segments if first <= segment <= last]
        self.segment_scans += len(segments)
        scans = [
            self._segment_items(segment, lo, hi, reverse=reverse, key_size_bytes=key_size_bytes)
            for segment in segments
        ]
        if not scans:
            return iter(())
        if len(scans) == 1:
            return scans[0]
        if span is not None:
            return itertools.chain.from_iterable(scans)
        return heapq.merge(*scans, key=_KEY, reverse=reverse)

    def _time_span(self, lo: bytes | None, hi: bytes | None, size: int) -> tuple[int, int] | None:
        """The segments ``(first, last)`` that can hold a key of ``size`` bytes in ``[lo, hi)``.

        ``None`` unless ``lo`` and ``hi`` share the plain key of such a key
        and both carry a non-negative time after it (big-endian, so byte
        order is time order there).
        """
        plain = size - self._suffix
        if (
            lo is None
            or hi is None
            or plain < 0
            or len(lo) < plain + TIMESTAMP_BYTES
            or len(hi) < plain + TIMESTAMP_BYTES
            or lo[:plain] != hi[:plain]
        ):
            return None
        low = int(TIMESTAMP.unpack_from(lo, plain)[0])
        high = int(TIMESTAMP.unpack_from(hi, plain)[0])
        if low < 0 or high < 0:
            return None
        return low // self._interval, high // self._interval

    def _segment_items(
        self,
        segment: int,
        lo: bytes | None,
        hi: bytes | None,
        *,
        reverse: bool,
        key_size_bytes: int | None,
    ) -> Iterator[tuple[bytes, bytes]]:
        prefix = SEGMENT_ID.pack(segment)
        low = prefix if lo is None else prefix + lo
        high = SEGMENT_ID.pack(segment + 1) if hi is None else prefix + hi
        entries = RocksDBEngine.items(self, low, high, reverse=reverse)
        if key_size_bytes is None:
            return ((key[SEGMENT_PREFIX_BYTES:], value) for key, value in entries)
        size = SEGMENT_PREFIX_BYTES + key_size_bytes
        return ((key[SEGMENT_PREFIX_BYTES:], value) for key, value in entries if len(key) == size)

    # --------------------------------------------------------------- writes

    def write(
        self,
        records: Iterable[tuple[bytes, bytes | None]] | Mapping[bytes, bytes | None],
        applied_offset: int,
        *,
        meta: Mapping[bytes, bytes] | None = None,
    ) -> None:
        """Apply windowed ``records``, the stream time, expiry and ``applied_offset`` in one WriteBatch.

        The stream time first advances over every record (so a record that
        this very batch expires is not written), then each record goes to
        its segment or, if that segment has expired, is dropped; segments
        that expired are removed with one ``delete_range``.
        """
        self._check_open("write")
        entries = list(records.items() if isinstance(records, Mapping) else records)
        suffix = self._suffix
        if entries and min(map(len, map(_KEY, entries))) < suffix:
            for key, _ in entries:
                self._time_of(key)  # raises for the short key
        # per record: one unpack, one division, one prefix; the batch filled in key order
        unpack = TIMESTAMP.unpack_from
        times = [unpack(key, -suffix)[0] for key, _ in entries]  # from the key's end
        stream_time = max(self._stream_time, max(times, default=_NO_STREAM_TIME))
        live_from = self._oldest_live(stream_time)
        interval = self._interval
        ids = [(time_ms if time_ms > 0 else 0) // interval for time_ms in times]
        present = set(ids)
        pack = SEGMENT_ID.pack
        if min(present, default=live_from) >= live_from:
            prefixed = [
                (pack(segment) + key, value)
                for segment, (key, value) in zip(ids, entries, strict=True)
            ]
        else:
            prefixed = [
                (pack(segment) + key, value)
                for segment, (key, value) in zip(ids, entries, strict=True)
                if segment >= live_from
            ]
            present = {segment for segment in present if segment >= live_from}
        dropped = len(entries) - len(prefixed)
        batch = rocksdict.WriteBatch(raw_mode=True)
        self.fill_batch(batch, prefixed)
        if live_from > self._live_from:
            batch.delete_range(SEGMENT_ID.pack(0), SEGMENT_ID.pack(live_from))
        self.write_batch(
            batch,
            applied_offset,
            meta={**(meta or {}), _STREAM_TIME_META: TIMESTAMP.pack(stream_time)},
        )
        self._stream_time = stream_time
        if live_from > self._live_from:
            self._segments = {segment for segment in self._segments if segment >= live_from}
            self._live_from = live_from
        self._segments.update(present)
        self.expired_records_dropped += dropped
        if self._prune_interval is not None:
            self._written_since_prune += len(entries) - dropped
            point = self.prune_point(stream_time)
            if point > self._pruned_to and 2 * self._written_since_prune >= self._kept_at_prune:
                self.prune_history(point, applied_offset)

    # ------------------------------------------------------- history pruning

    @property
    def history_pruned_to_ms(self) -> int:
        """The last prune point recorded (``-1``: never pruned, or not a versioned store)."""
        return self._pruned_to

    def prune_point(self, stream_time_ms: int) -> int:
        """The prune point for ``stream_time_ms`` (``-1``: nothing to prune, or not a versioned store)."""
        if self._prune_interval is None:
            return -1
        cutoff = stream_time_ms - self._history
        if cutoff < 0:
            return -1
        return cutoff - cutoff % self._prune_interval

    def prune_history(self, point_ms: int, applied_offset: int) -> int:
        """Remove the versions no read at or after ``point_ms`` returns; returns how many.

        Per key: every version older than its newest one before ``point_ms``,
        and that one too if it is a delete version (module docstring).
        ``point_ms`` must be at or below the cutoff of the stream time, so a
        later put (never before the cutoff) leaves the result pruned at
        ``point_ms``; it is recorded with the last chunk.  The owning layer's
        committing thread only.
        """
        self._check_open("prune")
        prefix = SEGMENT_ID.pack(0)
        unpack = TIMESTAMP.unpack_from
        batch = rocksdict.WriteBatch(raw_mode=True)
        in_batch = pruned = scanned = 0
        # plain key -> (RocksDB key, is a delete) of its newest version < point_ms so far;
        # a key stays open until the scan passes its largest possible version (a key that
        # extends another may sort between that one's versions)
        runs: dict[bytes, tuple[bytes, bool]] = {}
        last: bytes | None = None
        for stored, value in RocksDBEngine.items(self, prefix, SEGMENT_ID.pack(1)):
            scanned += 1
            plain = stored[SEGMENT_PREFIX_BYTES:-TIMESTAMP_BYTES]
            if plain != last:
                last = plain
                for done in [key for key in runs if prefix + key + _TIME_MAX_SUFFIX < stored]:
                    newest, is_delete = runs.pop(done)
                    if is_delete:
                        batch.delete(newest)
                        in_batch += 1
            if unpack(stored, len(stored) - TIMESTAMP_BYTES)[0] >= point_ms:
                continue
            previous = runs.get(plain)
            if previous is not None:
                batch.delete(previous[0])
                in_batch += 1
            runs[plain] = (stored, value[:1] == TOMBSTONE_VERSION)
            if in_batch >= _PRUNE_CHUNK:
                self.write_batch(batch, applied_offset)
                pruned += in_batch
                batch = rocksdict.WriteBatch(raw_mode=True)
                in_batch = 0
        for newest, is_delete in runs.values():
            if is_delete:
                batch.delete(newest)
                in_batch += 1
        self.write_batch(batch, applied_offset, meta={_PRUNED_TO_META: TIMESTAMP.pack(point_ms)})
        pruned += in_batch
        self._pruned_to = point_ms
        self._kept_at_prune = scanned - pruned
        self._written_since_prune = 0
        self.versions_pruned += pruned
        return pruned
