"""The transaction state record: golden bytes, round trips, and typed errors for bad bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statestore.errors import TransactionLogCorruptError
from statestore.txn.record import (
    TransactionState,
    TransactionStateRecord,
    TxnPartition,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

RECORD = TransactionStateRecord(
    producer_id=0x0102030405060708,
    producer_epoch=3,
    state=TransactionState.PREPARE_COMMIT,
    last_update_timestamp_ms=1_700_000_000_000,
    partitions=(TxnPartition("b-changelog", 1, 7), TxnPartition("a-changelog", 0, 42)),
)

GOLDEN_KEY = bytes.fromhex("00000010" + b"statestore-local".hex())
GOLDEN_VALUE = bytes.fromhex(
    "0064"  # version 100
    "0102030405060708"  # producer id
    "0003"  # producer epoch
    "02"  # state: PrepareCommit
    "0000018bcfe56800"  # last update timestamp (ms)
    "00000002"  # two partitions, sorted by (topic, partition)
    "000b" + b"a-changelog".hex() + "00000000"
    "000000000000002a"
    "000b" + b"b-changelog".hex() + "00000001"
    "0000000000000007"
)


def test_golden_bytes() -> None:
    assert encode_key() == GOLDEN_KEY
    assert encode_value(RECORD) == GOLDEN_VALUE
    assert decode_key(GOLDEN_KEY, offset=0) == "statestore-local"
    decoded = decode_value(GOLDEN_VALUE, offset=0)
    assert decoded.partitions == tuple(sorted(RECORD.partitions))
    assert decoded.producer_id == RECORD.producer_id
    assert decoded.state is TransactionState.PREPARE_COMMIT


@given(
    pid=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**15 - 1),
    state=st.sampled_from(list(TransactionState)),
    parts=st.lists(
        st.builds(
            TxnPartition,
            st.text(min_size=1, max_size=40),
            st.integers(0, 2**31 - 1),
            st.integers(0, 2**63 - 1),
        ),
        max_size=20,
        unique_by=lambda p: (p.topic, p.partition),
    ),
)
def test_round_trip(
    pid: int, epoch: int, state: TransactionState, parts: list[TxnPartition]
) -> None:
    record = TransactionStateRecord(
        producer_id=pid,
        producer_epoch=epoch,
        state=state,
        last_update_timestamp_ms=5,
        partitions=tuple(sorted(parts)),
    )
    assert decode_value(encode_value(record), offset=9) == record


@pytest.mark.parametrize(
    "data",
    [
        b"",
        GOLDEN_VALUE[:-1],  # a partition cut short
        GOLDEN_VALUE + b"\x00",  # trailing bytes
        b"\x00\x00" + GOLDEN_VALUE[2:],  # Kafka's version 0 is not ours
        GOLDEN_VALUE[:12] + b"\x09" + GOLDEN_VALUE[13:],  # an unknown state
        GOLDEN_VALUE[:25] + b"\x7f\xff" + GOLDEN_VALUE[27:],  # a topic runs past the end
    ],
)
def test_a_bad_value_is_a_typed_error_naming_the_offset(data: bytes) -> None:
    with pytest.raises(TransactionLogCorruptError) as caught:
        decode_value(data, offset=17)
    assert caught.value.offset == 17


@pytest.mark.parametrize("data", [b"", b"\x00\x01\x00\x05ab", b"\x00\x00\x00\x02\xff\xfe"])
def test_a_bad_key_is_a_typed_error(data: bytes) -> None:
    with pytest.raises(TransactionLogCorruptError):
        decode_key(data, offset=3)
