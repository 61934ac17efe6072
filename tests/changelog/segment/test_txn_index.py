"""The aborted transaction index (.txnindex): golden bytes, appends, truncation, checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from changelog.errors import CorruptIndexError, IndexOperationError
from changelog.segment.txn_index import ABORTED_TXN, AbortedTxn, TransactionIndex, collect_aborted

GOLDEN_ENTRY = bytes.fromhex(
    "0000"  # version 0
    "0000000000000007"  # producer id 7
    "0000000000000001"  # first offset 1
    "0000000000000005"  # last offset 5 (the ABORT marker)
    "0000000000000006"  # last stable offset 6
)


def test_entry_golden_bytes() -> None:
    assert ABORTED_TXN.size == 34
    assert AbortedTxn(7, 1, 5, 6).pack() == GOLDEN_ENTRY


def test_file_is_created_only_with_the_first_entry(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex.open(path, 0)
    assert len(index) == 0 and not path.exists()
    index.flush()
    assert not path.exists()
    index.append(AbortedTxn(7, 1, 5, 6))
    index.append(AbortedTxn(8, 2, 9, 10))
    index.close()
    assert path.read_bytes() == GOLDEN_ENTRY + AbortedTxn(8, 2, 9, 10).pack()
    again = TransactionIndex.open(path, 0)
    assert again.entries == (AbortedTxn(7, 1, 5, 6), AbortedTxn(8, 2, 9, 10))
    again.sanity_check()
    again.close()


def test_last_offset_must_increase(tmp_path: Path) -> None:
    index = TransactionIndex.open(tmp_path / "a.txnindex", 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(IndexOperationError):
        index.append(AbortedTxn(2, 0, 5, 6))
    index.close()


def test_truncate_to_drops_entries_at_or_above(tmp_path: Path) -> None:
    path = tmp_path / "a.txnindex"
    index = TransactionIndex.open(path, 0)
    for n in range(3):
        index.append(AbortedTxn(n, n * 10, n * 10 + 5, n * 10 + 6))
    index.truncate_to(16)
    assert [e.producer_id for e in index.entries] == [0, 1]
    assert path.stat().st_size == 2 * ABORTED_TXN.size
    index.append(AbortedTxn(9, 30, 35, 36))
    index.close()
    assert [e.producer_id for e in TransactionIndex.open(path, 0).entries] == [0, 1, 9]


def test_a_partial_entry_is_reported_and_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000010.txnindex"
    path.write_bytes(AbortedTxn(1, 10, 12, 13).pack() + b"\x00\x01")
    index = TransactionIndex.open(path, 10)
    with pytest.raises(CorruptIndexError, match="partial entry") as info:
        index.sanity_check()
    assert info.value.path == path
    assert index.replace_entries([AbortedTxn(1, 10, 12, 13)])
    assert path.read_bytes() == AbortedTxn(1, 10, 12, 13).pack()
    assert not index.replace_entries([AbortedTxn(1, 10, 12, 13)])  # unchanged: untouched
    assert index.replace_entries([])
    assert not path.exists()
    index.close()


def test_sanity_check_names_an_entry_below_the_base_offset(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(AbortedTxn(1, 10, 12, 13).pack())
    index = TransactionIndex.open(path, 100)
    with pytest.raises(CorruptIndexError, match="below the segment's base offset") as info:
        index.sanity_check()
    assert (info.value.expected, info.value.actual, info.value.position) == (">= 100", 12, 0)


def test_collect_aborted_overlap_and_early_stop() -> None:
    # Transaction 2 was open when 1 was aborted: 1's last stable offset is 2's first offset.
    first = [AbortedTxn(1, 0, 4, 3), AbortedTxn(2, 3, 8, 9)]
    second = [AbortedTxn(3, 10, 12, 13), AbortedTxn(4, 20, 22, 23)]
    assert collect_aborted([first, second], 5, 11) == [
        AbortedTxn(2, 3, 8, 9),
        AbortedTxn(3, 10, 12, 13),
    ]
    assert collect_aborted([first, second], 0, 4) == [
        AbortedTxn(1, 0, 4, 3),
        AbortedTxn(2, 3, 8, 9),
    ]
    # An entry whose last stable offset reaches the upper bound ends the walk.
    assert collect_aborted([first, second], 9, 10) == []
    assert collect_aborted([[AbortedTxn(1, 0, 4, 5)], second], 0, 5) == [AbortedTxn(1, 0, 4, 5)]
