"""Argument checks of the batch encoders (private to :mod:`changelog.record.batch`).

Everything handed to an encoder is checked here before a byte is built, so a
bad argument raises :class:`~changelog.errors.InvalidRecordError` and nothing
is written.  Ranges are the on-disk field widths (int16/int32/int64) and
Kafka's rules (``MemoryRecordsBuilder``): timestamps are >= 0 or -1
(``NO_TIMESTAMP``); offsets in a batch increase; a producer id needs an epoch
and a sequence; a transactional batch needs a producer id.

Thread-safety: pure functions, thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from changelog.errors import InvalidRecordError
from changelog.limits import INT32_MAX, INT64_MAX, NO_TIMESTAMP
from changelog.record.body import Headers, Record
from changelog.record.header import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE

__all__ = [
    "bad_pair",
    "check_encode_records_args",
    "check_headers",
    "check_int",
    "check_pairs",
    "check_producer_state",
    "check_timestamp",
]

INT16_MAX: Final = 2**15 - 1


def check_int(name: str, value: object, low: int, high: int) -> int:
    if type(value) is not int:
        raise InvalidRecordError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidRecordError(f"{name}={value} is outside [{low}, {high}]")
    return value


def check_timestamp(name: str, value: object) -> int:
    return check_int(name, value, NO_TIMESTAMP, INT64_MAX)


def check_pairs(pairs: object) -> Sequence[tuple[bytes | None, bytes | None]]:
    if not isinstance(pairs, Sequence) or isinstance(pairs, bytes | str):
        raise InvalidRecordError(f"records must be a sequence of (key, value), got {pairs!r:.80}")
    if not pairs:
        raise InvalidRecordError("a batch needs at least one record")
    if len(pairs) > INT32_MAX:
        raise InvalidRecordError(f"{len(pairs)} records do not fit in one batch")
    return pairs


def bad_pair(index: int, pair: object) -> InvalidRecordError:
    return InvalidRecordError(
        f"record {index} must be a (key, value) pair of bytes or None, got {pair!r:.80}"
    )


def check_headers(headers: object, count: int) -> Sequence[Headers] | None:
    """Per-record headers for ``count`` records: ``None``, or one tuple of ``(str, bytes | None)`` each."""
    if headers is None:
        return None
    if not isinstance(headers, Sequence) or isinstance(headers, bytes | str):
        raise InvalidRecordError(
            f"headers must be a sequence (one per record), got {headers!r:.80}"
        )
    if len(headers) != count:
        raise InvalidRecordError(f"{len(headers)} header tuples for {count} records")
    for index, record_headers in enumerate(headers):
        if record_headers.__class__ is not tuple or not _headers_ok(record_headers):
            raise InvalidRecordError(
                f"record {index}: headers must be a tuple of (str, bytes | None) pairs, "
                f"got {record_headers!r:.80}"
            )
    return headers


def _check_records(
    records: object,
    base_offset: int,
    last_offset_delta: int,
) -> Sequence[Record]:
    """Every record's types, offset (increasing, inside the batch) and timestamp.

    Written for speed (it runs once per record on the cleaner's path): plain
    class checks and comparisons inline, the slow explanation only on failure.
    """
    if not isinstance(records, Sequence):
        raise InvalidRecordError(f"records must be a sequence of Record, got {records!r:.80}")
    previous = base_offset - 1
    last = base_offset + last_offset_delta
    for index, record in enumerate(records):
        if record.__class__ is not Record:
            raise InvalidRecordError(f"record {index} is not a Record: {record!r:.80}")
        offset = record.offset
        timestamp = record.timestamp_ms
        key = record.key
        value = record.value
        headers = record.headers
        if (
            offset.__class__ is not int
            or not previous < offset <= last
            or timestamp.__class__ is not int
            or not NO_TIMESTAMP <= timestamp <= INT64_MAX
            or (key is not None and key.__class__ is not bytes)
            or (value is not None and value.__class__ is not bytes)
            or headers.__class__ is not tuple
            or (headers and not _headers_ok(headers))
        ):
            raise _bad_record(index, record, previous, last)
        previous = offset
    return records


def _headers_ok(headers: tuple[object, ...]) -> bool:
    return all(
        type(h) is tuple
        and len(h) == 2
        and type(h[0]) is str
        and (h[1] is None or h[1].__class__ is bytes)
        for h in headers
    )


def _bad_record(index: int, record: Record, previous: int, last: int) -> InvalidRecordError:
    """Say what is wrong with a record that failed :func:`_check_records`."""
    where = f"record {index}"
    if record.offset.__class__ is not int or not previous < record.offset <= last:
        return InvalidRecordError(
            f"{where} has offset {record.offset!r}: it must be an int in [{previous + 1}, {last}] "
            "(offsets increase and stay inside the batch)"
        )
    if record.timestamp_ms.__class__ is not int or not (
        NO_TIMESTAMP <= record.timestamp_ms <= INT64_MAX
    ):
        return InvalidRecordError(
            f"{where} has timestamp_ms {record.timestamp_ms!r}: must be an int >= 0, or -1"
        )
    if record.headers.__class__ is not tuple or not _headers_ok(record.headers):
        return InvalidRecordError(f"{where}: headers must be a tuple of (str, bytes | None) pairs")
    return InvalidRecordError(f"{where}: key and value must be bytes or None")


def check_producer_state(
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    *,
    is_transactional: bool,
    is_control: bool = False,
) -> None:
    """Kafka's ``MemoryRecordsBuilder.validateProducerState``: a batch with a producer id needs
    an epoch, and a sequence unless it is a control batch (a marker carries none)."""
    check_int("producer_id", producer_id, NO_PRODUCER_ID, INT64_MAX)
    check_int("producer_epoch", producer_epoch, NO_PRODUCER_EPOCH, INT16_MAX)
    check_int("base_sequence", base_sequence, NO_SEQUENCE, INT32_MAX)
    if is_transactional and producer_id == NO_PRODUCER_ID:
        raise InvalidRecordError("a transactional batch needs a producer id")
    if producer_id != NO_PRODUCER_ID and (
        producer_epoch == NO_PRODUCER_EPOCH or (base_sequence == NO_SEQUENCE and not is_control)
    ):
        raise InvalidRecordError("a producer id needs a producer epoch and a base sequence")


def check_encode_records_args(
    records: object,
    *,
    base_offset: int,
    last_offset_delta: int,
    delete_horizon_ms: int | None,
    max_timestamp_ms: int | None,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
    is_transactional: bool,
    is_control: bool = False,
) -> Sequence[Record]:
    check_int("base_offset", base_offset, 0, INT64_MAX)
    check_int("last_offset_delta", last_offset_delta, 0, min(INT32_MAX, INT64_MAX - base_offset))
    checked = _check_records(records, base_offset, last_offset_delta)
    check_int("partition_leader_epoch", partition_leader_epoch, -1, INT32_MAX)
    check_producer_state(
        producer_id,
        producer_epoch,
        base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
    )
    if delete_horizon_ms is not None:
        check_int("delete_horizon_ms", delete_horizon_ms, 0, INT64_MAX)
    if max_timestamp_ms is not None:
        if checked:
            raise InvalidRecordError("max_timestamp_ms is only for an empty batch")
        check_timestamp("max_timestamp_ms", max_timestamp_ms)
    return checked
