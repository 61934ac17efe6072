"""Pending delete horizons: when a tombstone or a transaction marker kept by an earlier pass
may go (beyond Kafka, where a quiet log keeps both for ever).

The earliest pending delete horizon of a log is remembered in memory after
each pass (:func:`record_pending_delete_horizon`); for a log not yet cleaned
by this process it is found once by scanning the batch headers of the clean
section (:func:`scan_pending_delete_horizon`).  :func:`changelog.cleaner.manager.log_to_clean`
makes a log due when that horizon has passed.

Thread-safety: the memo is guarded by a module lock; the scan takes the log's
lock only to open each segment's reader.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from changelog.record.batch import decode_key_values

if TYPE_CHECKING:
    from changelog.cleaner.views import CleanableLog

__all__ = [
    "forget_pending_delete_horizon",
    "pending_delete_horizon",
    "record_pending_delete_horizon",
    "scan_pending_delete_horizon",
]

_horizon_lock = threading.Lock()  # guards _horizons
_horizons: weakref.WeakKeyDictionary[Any, int | None] = weakref.WeakKeyDictionary()


def record_pending_delete_horizon(log: CleanableLog, horizon_ms: int | None) -> None:
    """Remember the earliest delete horizon of a tombstone the last pass kept (``None``: none)."""
    try:
        with _horizon_lock:
            _horizons[log] = horizon_ms
    except TypeError:  # an object without weak references: nothing remembered, scanned each time
        pass


def forget_pending_delete_horizon(log: CleanableLog) -> None:
    """Drop what is remembered about ``log`` (after truncation or an external change)."""
    with _horizon_lock:
        _horizons.pop(log, None)


def scan_pending_delete_horizon(log: CleanableLog, first_dirty_offset: int) -> int | None:
    """Earliest delete horizon of a batch in the clean section that still holds a tombstone
    or a transaction marker that may go.

    Reads batch headers; only batches with the KIP-534 horizon bit are decoded
    (a batch keeps the bit after its tombstones are gone when Kafka wrote it).  A
    marker (a control batch with its record) may go once no data batch of its
    transaction is left (Kafka's rule, :mod:`changelog.cleaner.transactions`): it
    counts with its stamped horizon, or, not stamped yet, as due now (``0``: the
    next pass stamps it).
    """
    earliest: int | None = None
    data_since_marker: set[int] = set()  # producers with a data batch since their last marker
    for segment in log.segments[:-1]:
        if segment.base_offset >= first_dirty_offset:
            break
        with log.lock:
            reader = segment.open_reader()
        try:
            for position, header in reader.headers():
                if header.base_offset >= first_dirty_offset:
                    break
                if header.is_transactional and not header.is_control:
                    data_since_marker.add(header.producer_id)  # and its tombstones, below
                if header.is_control:
                    had_data = header.producer_id in data_since_marker
                    data_since_marker.discard(header.producer_id)
                    if header.records_count and not had_data:
                        marker_horizon = header.delete_horizon_ms or 0
                        earliest = (
                            marker_horizon if earliest is None else min(earliest, marker_horizon)
                        )
                    continue
                horizon = header.delete_horizon_ms
                if horizon is None or (earliest is not None and horizon >= earliest):
                    continue
                _position, _header, raw = next(iter(reader.batches(position)))
                entries = decode_key_values(raw, path=reader.path, position=position)
                if any(value is None and key is not None for _offset, key, value in entries):
                    earliest = horizon
        finally:
            reader.close()
    return earliest


def pending_delete_horizon(log: CleanableLog, first_dirty_offset: int) -> int | None:
    """The remembered earliest pending delete horizon, scanning the clean section once if unknown."""
    with _horizon_lock:
        try:
            if log in _horizons:
                return _horizons[log]
        except TypeError:
            pass
    horizon = scan_pending_delete_horizon(log, first_dirty_offset)
    record_pending_delete_horizon(log, horizon)
    return horizon
