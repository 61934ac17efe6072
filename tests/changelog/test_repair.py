"""changelog.repair: what a truncation plan removes, what it refuses, and the index rebuild plan."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from changelog import LogConfig
from changelog.errors import LogLockedError, RepairRefusedError
from changelog.log.log import Log
from changelog.record.control import ControlRecordType
from changelog.repair.indexes import apply_index_rebuild, plan_index_rebuild
from changelog.repair.truncate import apply_truncation, plan_torn_tail_drop, plan_truncation

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128)


def tree_hash(directory: Path) -> str:
    """One digest of every file's name and bytes under ``directory``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    with Log.open(directory, config=CONFIG) as log:
        return [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    """20 commits of 5 records (keys k0..k9, a tombstone for k0 at the end), several segments."""
    directory = tmp_path / "plain-0"
    with Log.open(directory, config=CONFIG) as log:
        for i in range(20):
            log.append([(f"k{(i * 5 + j) % 10}".encode(), f"v{i}-{j}".encode()) for j in range(5)])
        log.append([(b"k0", None)])
    return directory


def test_a_truncation_plan_lists_what_goes_and_what_each_key_becomes(plain: Path) -> None:
    original = records(plain)
    before = tree_hash(plain)
    plan = plan_truncation(plain, 52)  # inside the batch 50..54: the whole batch goes
    assert tree_hash(plain) == before
    assert plan.log_end_offset_before == 101
    assert plan.log_end_offset_after == 50
    assert plan.first_removed_offset == 50
    assert plan.last_removed_offset == 100
    assert plan.removed_records == 51
    effects = {c.key: c.effect for c in plan.key_changes}
    assert effects[b"k0"] == "comes back (its delete is removed)"
    assert effects[b"k1"] == "reverts to an older value"
    assert len(effects) == 10
    assert apply_truncation(plan, config=CONFIG) == 50
    assert records(plain) == [r for r in original if r[0] < 50]


def test_offsets_outside_the_log_are_refused(plain: Path) -> None:
    with pytest.raises(RepairRefusedError, match="beyond the log end offset 101"):
        plan_truncation(plain, 102)
    assert plan_truncation(plain, 101).nothing_to_do


def test_a_key_that_only_lived_above_the_cut_disappears(tmp_path: Path) -> None:
    directory = tmp_path / "gone-0"
    with Log.open(directory, config=CONFIG) as log:
        log.append([(b"old", b"1")])
        log.append([(b"new", b"2")])
    plan = plan_truncation(directory, 1)
    assert [(c.key, c.effect) for c in plan.key_changes] == [(b"new", "disappears")]


def test_damage_before_the_offset_names_the_highest_offset_a_truncation_can_use(
    plain: Path,
) -> None:
    logs = sorted(plain.glob("*.log"))
    data = bytearray(logs[1].read_bytes())
    data[100] ^= 0x40  # inside the second segment's first batch
    logs[1].write_bytes(bytes(data))
    base = int(logs[1].name[:20])
    with pytest.raises(RepairRefusedError) as info:
        plan_truncation(plain, base + 10)
    with pytest.raises(RepairRefusedError) as above:
        plan_truncation(plain, 95)  # a cut above would keep the damage: refused too
    assert above.value.offset == base
    assert info.value.offset == base
    assert info.value.path == logs[1]
    plan = plan_truncation(plain, base)
    assert plan.damage and plan.damage[0].position == 0
    apply_truncation(plan, config=CONFIG)
    assert [r[0] for r in records(plain)][-1] == base - 1


def test_a_cut_through_a_transaction_is_refused_with_both_safe_offsets(tmp_path: Path) -> None:
    directory = tmp_path / "txn-0"
    with Log.open(directory, config=CONFIG) as log:
        log.append([(b"a", b"1")])
        log.append_transactional([(b"b", b"2")], producer_id=7, producer_epoch=0)
        log.append_transactional([(b"c", b"3")], producer_id=7, producer_epoch=0)
        log.append_marker(ControlRecordType.COMMIT, producer_id=7, producer_epoch=0)
        log.append_transactional([(b"d", b"4")], producer_id=7, producer_epoch=0)
        log.append_marker(ControlRecordType.ABORT, producer_id=7, producer_epoch=0)
    with pytest.raises(RepairRefusedError, match=r"truncate at 1 .* or at 4") as info:
        plan_truncation(directory, 2)
    assert info.value.offset == 1
    plan = plan_truncation(directory, 1)
    assert plan.removed_records == 2  # b and c, committed
    assert plan.aborted_records == 1  # d
    assert plan.control_batches == 2
    assert {c.key for c in plan.key_changes} == {b"b", b"c"}
    after_commit = plan_truncation(directory, 4)
    assert after_commit.removed_records == 0
    assert after_commit.aborted_records == 1


def test_a_transaction_without_a_marker_above_the_cut_is_undecided(tmp_path: Path) -> None:
    directory = tmp_path / "open-0"
    with Log.open(directory, config=CONFIG) as log:
        log.append([(b"a", b"1")])
        log.append_transactional([(b"b", b"2"), (b"c", b"3")], producer_id=3, producer_epoch=0)
    plan = plan_truncation(directory, 1)
    assert plan.undecided_records == 2
    assert plan.removed_records == 0
    assert plan.key_changes == ()


def test_torn_tail_drop_refuses_a_tail_followed_by_a_valid_batch(plain: Path) -> None:
    last = sorted(plain.glob("*.log"))[-1]
    data = bytearray(last.read_bytes())
    data[20] ^= 0x01  # the first batch's CRC fails; the rest of the segment is valid
    last.write_bytes(bytes(data))
    with pytest.raises(RepairRefusedError, match=r"not a torn tail; .* truncate at offset") as info:
        plan_torn_tail_drop(plain)
    assert info.value.offset == int(last.name[:20])


def test_torn_tail_drop_of_a_whole_log_is_refused(plain: Path) -> None:
    with pytest.raises(RepairRefusedError, match="no torn tail"):
        plan_torn_tail_drop(plain)


def test_apply_refuses_while_the_log_is_open(plain: Path) -> None:
    plan = plan_truncation(plain, 10)
    with Log.open(plain, config=CONFIG):
        logs = {p.name: p.read_bytes() for p in plain.iterdir() if p.name.endswith(".log")}
        with pytest.raises(LogLockedError):
            apply_truncation(plan, config=CONFIG)
        assert {p.name: p.read_bytes() for p in plain.iterdir() if p.name.endswith(".log")} == logs
    assert records(plain)[-1][0] == 100  # nothing truncated


def test_apply_refuses_a_plan_whose_files_changed(plain: Path) -> None:
    plan = plan_truncation(plain, 10)
    with Log.open(plain, config=CONFIG) as log:
        log.append([(b"late", b"x")])
    with pytest.raises(RepairRefusedError, match="changed since the plan"):
        apply_truncation(plan, config=CONFIG)


def test_index_rebuild_plan_finds_a_wrong_middle_entry_and_apply_restores_it(plain: Path) -> None:
    index = max(plain.glob("*.index"), key=lambda p: p.stat().st_size)
    good = index.read_bytes()
    assert len(good) >= 16, "the fixture needs two entries"
    plan = plan_index_rebuild(plain, config=CONFIG)
    assert not any(f.changes for f in plan.files)
    damaged = bytearray(good)
    damaged[4:8] = (int.from_bytes(good[4:8], "big") + 1).to_bytes(4, "big")  # entry 0's position
    index.write_bytes(bytes(damaged))
    before = tree_hash(plain)
    plan = plan_index_rebuild(plain, config=CONFIG)
    assert tree_hash(plain) == before
    changed = [f for f in plan.files if f.changes]
    assert [f.path for f in changed] == [index]
    assert changed[0].first_difference == 7
    apply_index_rebuild(plan, config=CONFIG)
    assert index.read_bytes() == good


def test_index_rebuild_refuses_a_damaged_log(plain: Path) -> None:
    first = sorted(plain.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[200] ^= 0x10
    first.write_bytes(bytes(data))
    with pytest.raises(RepairRefusedError, match="truncate first"):
        plan_index_rebuild(plain, config=CONFIG)


def test_truncation_lowers_the_cleaner_checkpoints_to_the_new_end(tmp_path: Path) -> None:
    from changelog import CleanerConfig  # noqa: PLC0415
    from changelog.cleaner.clean import clean_log  # noqa: PLC0415
    from changelog.fs.checkpoint import (  # noqa: PLC0415
        CLEANER_CHECKPOINT,
        CLEANER_SWAP_CHECKPOINT,
        read_checkpoint,
    )

    directory = tmp_path / "cleaned-0"
    with Log.open(directory, config=CONFIG) as log:
        for i in range(30):
            log.append([(f"k{i % 3}".encode(), f"v{i}".encode()) for _ in range(4)])
        log.roll()
        assert clean_log(log, force=True, config=CleanerConfig(dedupe_buffer_size_bytes=1 << 20))
    swap = max(read_checkpoint(directory / CLEANER_SWAP_CHECKPOINT).values())
    assert swap > 20
    plan = plan_truncation(directory, 20)
    assert plan.swap_checkpoint_before == swap
    assert plan.cleaner_checkpoint_after == plan.swap_checkpoint_after == plan.log_end_offset_after
    end = apply_truncation(plan, config=CONFIG)
    assert max(read_checkpoint(directory / CLEANER_SWAP_CHECKPOINT).values()) == end
    assert max(read_checkpoint(directory / CLEANER_CHECKPOINT).values()) == end
