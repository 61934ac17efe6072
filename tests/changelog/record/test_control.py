"""Control batches: golden bytes of a transaction marker, and reading markers back."""

from __future__ import annotations

import struct

import pytest

from changelog.errors import CorruptRecordError, InvalidRecordError
from changelog.record.batch import decode_header, decode_records, encode_records
from changelog.record.control import (
    CONTROL_KEY,
    MARKER_VALUE,
    ControlRecordType,
    encode_marker_batch,
    read_marker,
)

# A COMMIT marker of producer 7 epoch 2, coordinator epoch 3, at offset 5, laid out as
# Kafka's MemoryRecords.withEndTransactionMarker lays it out (checked field by field below).
GOLDEN_COMMIT = bytes.fromhex(
    "0000000000000005"  # base offset 5
    "00000042"  # batch length 66 (78 - 12)
    "00000000"  # partition leader epoch 0
    "02"  # magic
    "826c2320"  # CRC-32C of attributes..end
    "0030"  # attributes: transactional (0x10) | control (0x20)
    "00000000"  # last offset delta 0
    "0000018bcfe56800"  # base timestamp
    "0000018bcfe56800"  # max timestamp
    "0000000000000007"  # producer id 7
    "0002"  # producer epoch 2
    "ffffffff"  # base sequence -1
    "00000001"  # one record
    "20"  # record length 16 (zig-zag varint)
    "00"  # record attributes
    "00"  # timestamp delta 0
    "00"  # offset delta 0
    "08"
    "00000001"  # key: 4 bytes, version 0, type 1 (COMMIT)
    "0c"
    "000000000003"  # value: 6 bytes, version 0, coordinator epoch 3
    "00"  # no headers
)


def test_commit_marker_golden_bytes() -> None:
    data = encode_marker_batch(
        ControlRecordType.COMMIT,
        base_offset=5,
        producer_id=7,
        producer_epoch=2,
        coordinator_epoch=3,
        timestamp_ms=1_700_000_000_000,
    )
    assert data == GOLDEN_COMMIT
    header = decode_header(data, 0, path="x", validate=True)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, -1)
    assert CONTROL_KEY.size == 4 and MARKER_VALUE.size == 6


def test_abort_marker_differs_only_in_type_and_crc() -> None:
    commit = encode_marker_batch(
        ControlRecordType.COMMIT,
        base_offset=0,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp_ms=10,
    )
    abort = encode_marker_batch(
        ControlRecordType.ABORT,
        base_offset=0,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp_ms=10,
    )
    differing = [i for i, (a, b) in enumerate(zip(commit, abort, strict=True)) if a != b]
    assert all(17 <= i < 21 for i in differing[:-1])  # the CRC
    assert differing[-1] == len(commit) - 1 - 1 - 6 - 1  # the type byte of the key


@pytest.mark.parametrize("kind", list(ControlRecordType))
def test_read_marker_round_trip(kind: ControlRecordType) -> None:
    data = encode_marker_batch(
        kind,
        base_offset=42,
        producer_id=9,
        producer_epoch=4,
        coordinator_epoch=11,
        timestamp_ms=123,
    )
    header = decode_header(data, 0, path="p", validate=True)
    marker = read_marker(header, data, path="p", position=0)
    assert marker is not None
    assert (marker.type, marker.producer_id, marker.producer_epoch) == (kind, 9, 4)
    assert (marker.coordinator_epoch, marker.offset, marker.timestamp_ms) == (11, 42, 123)
    assert marker.is_commit == (kind is ControlRecordType.COMMIT)


def test_an_emptied_control_batch_has_no_marker() -> None:
    data = encode_records(
        [],
        base_offset=3,
        last_offset_delta=0,
        producer_id=1,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
        max_timestamp_ms=5,
    )
    header = decode_header(data, 0, path="p", validate=True)
    assert header.is_control and header.records_count == 0
    assert read_marker(header, data, path="p", position=0) is None


def test_a_short_control_key_is_corrupt() -> None:
    marker = encode_marker_batch(
        ControlRecordType.ABORT,
        base_offset=0,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp_ms=0,
    )
    header = decode_header(marker, 0, path="p", validate=True)
    (record,) = decode_records(marker, path="p", position=0)
    bad = encode_records(
        [attr_evolve(record, key=b"\x00")],
        base_offset=0,
        last_offset_delta=0,
        producer_id=1,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    with pytest.raises(CorruptRecordError, match="shorter than 4 bytes") as info:
        read_marker(decode_header(bad, 0, path="seg.log"), bad, path="seg.log", position=99)
    assert info.value.position == 99
    del header


def test_kraft_control_types_are_not_markers() -> None:
    marker = encode_marker_batch(
        ControlRecordType.ABORT,
        base_offset=0,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp_ms=0,
    )
    (record,) = decode_records(marker, path="p", position=0)
    leader_change = encode_records(
        [attr_evolve(record, key=struct.pack(">hh", 0, 2))],
        base_offset=0,
        last_offset_delta=0,
        producer_id=1,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    header = decode_header(leader_change, 0, path="p")
    assert read_marker(header, leader_change, path="p", position=0) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("producer_id", -1), ("producer_epoch", -1), ("coordinator_epoch", -1), ("timestamp_ms", -2)],
)
def test_bad_marker_arguments_are_refused(field: str, value: int) -> None:
    args = {
        "base_offset": 0,
        "producer_id": 1,
        "producer_epoch": 0,
        "coordinator_epoch": 0,
        "timestamp_ms": 0,
    }
    args[field] = value
    with pytest.raises(InvalidRecordError):
        encode_marker_batch(ControlRecordType.COMMIT, **args)


def test_transactional_data_batch_carries_producer_fields() -> None:
    from changelog.record.batch import encode_batch, encode_batch_py  # noqa: PLC0415

    args = {
        "timestamp_ms": 5,
        "producer_id": 3,
        "producer_epoch": 1,
        "base_sequence": 10,
        "is_transactional": True,
    }
    fast = encode_batch(0, [(b"k", b"v"), (b"k2", None)], **args)  # type: ignore[arg-type]
    slow = encode_batch_py(0, [(b"k", b"v"), (b"k2", None)], **args)  # type: ignore[arg-type]
    assert fast == slow
    header = decode_header(fast, 0, path="p", validate=True)
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (3, 1, 10)
    with pytest.raises(InvalidRecordError, match="needs a producer id"):
        encode_batch(0, [(b"k", b"v")], timestamp_ms=0, is_transactional=True)


def attr_evolve(record: object, **changes: object) -> object:
    import attrs  # noqa: PLC0415

    return attrs.evolve(record, **changes)  # type: ignore[misc]
