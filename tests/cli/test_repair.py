"""``statestore repair``: each remedy on a damaged state directory.

For every remedy: the dry run changes no byte of the state directory (hashed
before and after), ``--apply`` produces a directory that opens with exactly the
expected data and that ``verify`` passes, and ``--apply`` refuses while a
service holds the lock (nothing changed).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

import msgpack
import pytest

from changelog.config import LogConfig
from changelog.log.log import Log
from statestore import AppliedOffsetMismatchError, StateManager
from statestore.cli import main
from statestore.config import RocksDBConfig, StoreConfig
from statestore.errors import CorruptChangelogError
from statestore.stores.engine import RocksDBEngine
from tests.cli.helpers import QUIET, SMALL_LOG, live_users, run_cli, user

Rec = tuple[int, bytes | None, bytes | None]


def tree_hash(directory: Path) -> str:
    """One digest of every file's path and bytes under ``directory``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def changelog_records(partition: Path) -> list[Rec]:
    with Log.open(partition, config=SMALL_LOG) as log:
        return [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]


def state_of(records: list[Rec]) -> dict[str, object]:
    """What a store holds after replaying ``records`` (str keys, msgpack values)."""
    out: dict[str, object] = {}
    for _offset, key, value in records:
        assert key is not None
        if value is None:
            out.pop(key.decode(), None)
        else:
            out[key.decode()] = msgpack.unpackb(value)
    return out


def users_state(state: Path) -> dict[str, object]:
    with StateManager(state, config=QUIET) as manager:
        return dict(manager.store("users").items())


def rebuild_after_truncation(state: Path) -> None:
    """After a truncation RocksDB holds offsets the changelog no longer has: the open refuses
    it (the cross-check, docs/recovery.md) until the operator rebuilds it, the last step."""
    with pytest.raises(AppliedOffsetMismatchError):
        users_state(state)
    assert main(["repair", "rebuild-rocksdb", str(state), "--apply"], out=io.StringIO()) == 0


def cut_mid_batch(path: Path, batch_number: int, into: int = 20) -> int:
    """Truncate ``path`` inside its ``batch_number``-th batch; returns the position cut at."""
    data = path.read_bytes()
    position = 0
    for _ in range(batch_number):
        position += int.from_bytes(data[position + 8 : position + 12], "big") + 12
    path.write_bytes(data[: position + into])
    return position + into


@pytest.fixture
def users(state: Path) -> Path:
    return state / "users-changelog-0"


# --------------------------------------------------------------------------- truncate


def test_truncate_a_partition_refused_at_open_back_to_a_consistent_log(
    state: Path, users: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = changelog_records(users)
    segment = users / "00000000000000000060.log"
    cut_mid_batch(segment, 1)  # the case: a closed segment cut mid-batch
    with pytest.raises(CorruptChangelogError):
        users_state(state)
    assert run_cli(["verify", str(state)], capsys).status == 1

    too_high = run_cli(["repair", "truncate", str(users), "--offset", "100"], capsys)
    assert too_high.status == 1
    assert "the highest offset a truncation can use here is 90" in too_high.err

    before = tree_hash(state)
    dry = run_cli(["repair", "truncate", str(users), "--offset", "90"], capsys)
    assert dry.status == 0, dry.err
    assert tree_hash(state) == before
    assert "log end offset 160 -> 90" in dry.out
    assert "00000000000000000120.log (whole" in dry.out
    assert "removes offsets 150..159" not in dry.out  # the unreadable batch is not listed...
    assert "unreadable bytes" in dry.out  # ...its bytes are
    assert "dry run: nothing was changed" in dry.out

    doc = json.loads(
        run_cli(["repair", "truncate", str(users), "--offset", "90", "--json"], capsys).out
    )
    assert tree_hash(state) == before
    lost = {k["key"]: k["effect"] for k in doc["plan"]["keys"]}
    assert lost[user(0)] == "comes back (its delete is removed)"  # the deletes were at 150..159
    assert lost[user(1)] == "reverts to an older value"
    assert doc["plan"]["removed_records"] == 40  # 120..149 and 150..159, readable in segment 120

    applied = run_cli(["repair", "truncate", str(users), "--offset", "90", "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert "applied: the log now ends at offset 90" in applied.out
    assert "verify: OK" in applied.out
    expected = state_of([r for r in original if r[0] < 90])
    rebuild_after_truncation(state)
    # after the rebuild, get (the store's recorded settings) reads the truncated state
    got = run_cli(["get", str(state), "users", user(1), "--json"], capsys)
    assert json.loads(got.out)["value"] == expected[user(1)]
    assert users_state(state) == expected
    assert changelog_records(users) == [r for r in original if r[0] < 90]
    assert run_cli(["verify", str(state)], capsys).status == 0


def test_truncate_apply_is_refused_while_a_service_holds_the_lock(
    state: Path, users: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StateManager(state, config=QUIET) as manager:
        manager.store("users")
        before = tree_hash(users)
        dry = run_cli(["repair", "truncate", str(users), "--offset", "60"], capsys)
        assert dry.status == 0
        assert "--apply will refuse until it stops" in dry.out
        refused = run_cli(["repair", "truncate", str(users), "--offset", "60", "--apply"], capsys)
        assert refused.status == 1
        assert "is locked by pid" in refused.err
        assert tree_hash(users) == before
    assert users_state(state) == live_users()


# --------------------------------------------------------------------------- drop-torn-tail


def test_drop_torn_tail_after_a_clean_shutdown(
    state: Path, users: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = changelog_records(users)
    active = users / "00000000000000000120.log"
    data = active.read_bytes()
    active.write_bytes(data + data[:40])  # half a batch after the clean close
    with pytest.raises(CorruptChangelogError):
        users_state(state)
    before = tree_hash(state)
    dry = run_cli(["repair", "drop-torn-tail", str(users)], capsys)
    assert dry.status == 0, dry.err
    assert tree_hash(state) == before
    assert "nothing acknowledged is lost" in dry.out
    assert f"{active.name} bytes [{len(data)}, {len(data) + 40})" in dry.out
    applied = run_cli(["repair", "drop-torn-tail", str(users), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert "verify: OK" in applied.out
    assert changelog_records(users) == original
    assert users_state(state) == live_users()


def test_drop_torn_tail_names_acknowledged_offsets_it_loses(
    state: Path, users: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = changelog_records(users)
    cut_mid_batch(users / "00000000000000000120.log", 1)  # the clean close said 160
    dry = run_cli(["repair", "drop-torn-tail", str(users)], capsys)
    assert dry.status == 0, dry.err
    assert "offsets [150, 160) were acknowledged and are lost" in dry.out
    assert run_cli(["repair", "drop-torn-tail", str(users), "--apply"], capsys).status == 0
    rebuild_after_truncation(state)
    assert users_state(state) == state_of([r for r in original if r[0] < 150])


def test_drop_torn_tail_is_refused_when_a_valid_batch_follows(
    users: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    active = users / "00000000000000000120.log"
    data = bytearray(active.read_bytes())
    data[30] ^= 0xFF  # inside the CRC of the first batch; the second one is whole
    active.write_bytes(bytes(data))
    before = tree_hash(users)
    result = run_cli(["repair", "drop-torn-tail", str(users), "--apply"], capsys)
    assert result.status == 1
    assert "not a torn tail; to give up everything from the damage on, truncate at offset 120" in (
        result.err
    )
    assert tree_hash(users) == before


# --------------------------------------------------------------------------- rebuild-indexes


def test_rebuild_indexes_restores_a_wrong_time_index_entry(
    state: Path, users: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The loader checks the offset of the last time index entry, not its timestamp: a
    # plausible wrong timestamp misleads offset-for-timestamp lookups until rebuilt.
    index = users / "00000000000000000000.timeindex"
    good = index.read_bytes()
    assert len(good) == 12
    damaged = (int.from_bytes(good[:8], "big") - 1000).to_bytes(8, "big") + good[8:]
    index.write_bytes(damaged)
    before = tree_hash(state)
    dry = run_cli(
        ["repair", "rebuild-indexes", str(users), "--index-interval-bytes", "128"], capsys
    )
    assert dry.status == 0, dry.err
    assert tree_hash(state) == before
    assert "00000000000000000000.timeindex" in dry.out
    assert "1 of 9 index files change" in dry.out
    applied = run_cli(
        ["repair", "rebuild-indexes", str(users), "--index-interval-bytes", "128", "--apply"],
        capsys,
    )
    assert applied.status == 0, applied.err
    assert "verify: OK" in applied.out
    assert index.read_bytes() == good
    assert users_state(state) == live_users()


def _index_entries(path: Path) -> list[tuple[int, int]]:
    """``(relative offset, position)`` of every entry of an ``.index`` file (zeros at the end: none)."""
    data = path.read_bytes()
    entries = [
        (int.from_bytes(data[i : i + 4], "big"), int.from_bytes(data[i + 4 : i + 8], "big"))
        for i in range(0, len(data) - 7, 8)
    ]
    while len(entries) > 1 and entries[-1] == (0, 0):
        entries.pop()
    return entries


DENSE_LOG = LogConfig(segment_bytes=8192, index_interval_bytes=128)
"""An index entry every ~2 of the small batches below; LogConfig's default 4096 makes ~2 a segment."""


@pytest.fixture
def dense(tmp_path: Path) -> Path:
    """A store ``dense`` of 300 one-record commits (several segments), its changelog partition."""
    state = tmp_path / "dense-state"
    with StateManager(state, config=QUIET, log_config=DENSE_LOG) as manager:
        store = manager.store("dense")
        for i in range(300):
            store.put(user(i % 50), {"i": i})
            manager.commit()
    partition = state / "dense-changelog-0"
    assert len(list(partition.glob("*.log"))) >= 3
    return partition


def test_rebuild_indexes_rebuilds_at_the_density_the_store_recorded(
    dense: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--index-interval-bytes`` the rebuilt indexes are byte for byte the log's own;
    with the default 4096 they had a few entries a segment instead of ~20."""
    written = {p.name: p.read_bytes() for p in sorted(dense.glob("*index"))}
    assert all(len(_index_entries(dense / n)) > 10 for n in written if n.endswith("0.index"))
    for name in written:
        (dense / name).unlink()
    dry = run_cli(["repair", "rebuild-indexes", str(dense)], capsys)
    assert dry.status == 0, dry.err
    assert f"index.interval.bytes 128 ({dense.parent / 'dense.metadata.json'})" in dry.out
    doc = json.loads(run_cli(["repair", "rebuild-indexes", str(dense), "--json"], capsys).out)
    assert doc["plan"]["index_interval_bytes"] == 128
    applied = run_cli(["repair", "rebuild-indexes", str(dense), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert {p.name: p.read_bytes() for p in sorted(dense.glob("*index"))} == written
    sparse = run_cli(
        ["repair", "rebuild-indexes", str(dense), "--index-interval-bytes", "4096", "--json"],
        capsys,
    )
    changed = [f for f in json.loads(sparse.out)["plan"]["files"] if f["changes"]]
    assert changed, "the override is taken too"


def test_truncate_rebuilds_the_cut_segments_index_at_the_recorded_density(
    dense: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """K5 deletes the cut segment's indexes and K7's open rebuilds them: with the log's
    ``index_interval_bytes`` they keep every entry below the cut."""
    first = sorted(dense.glob("*.log"))[1]
    index = first.with_suffix(".index")
    base = int(first.name[:20])
    before = _index_entries(index)
    assert len(before) > 10
    relative, cut_at = before[-3]  # cut at the batch of the third-last entry
    offset = base + relative
    applied = run_cli(
        ["repair", "truncate", str(dense), "--offset", str(offset), "--apply"], capsys
    )
    assert applied.status == 0, applied.err
    assert first.stat().st_size == cut_at
    assert _index_entries(index) == [entry for entry in before if entry[1] < cut_at]


def test_rebuild_indexes_refuses_a_damaged_log_and_a_locked_state(
    state: Path, users: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StateManager(state, config=QUIET):
        before = tree_hash(users)
        refused = run_cli(["repair", "rebuild-indexes", str(users), "--apply"], capsys)
        assert refused.status == 1
        assert "is locked by pid" in refused.err
        assert tree_hash(users) == before
    cut_mid_batch(users / "00000000000000000060.log", 1)
    before = tree_hash(users)
    damaged = run_cli(["repair", "rebuild-indexes", str(users), "--apply"], capsys)
    assert damaged.status == 1
    assert "the loader refuses this partition" in damaged.err
    assert tree_hash(users) == before


# --------------------------------------------------------------------------- rebuild-rocksdb


def _poison_rocksdb(state: Path) -> None:
    """A wrong value in RocksDB that the changelog never had (the applied offset kept)."""
    engine = RocksDBEngine.open(state / "users-rocksdb-0", config=RocksDBConfig(), cache=None)
    try:
        applied = engine.applied_offset()
        assert applied is not None
        engine.write([(user(1).encode(), msgpack.packb({"round": -1}))], applied)
    finally:
        engine.close()


def test_rebuild_rocksdb_replaces_a_wrong_rocksdb_with_the_changelog_s_state(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StateManager(state, config=QUIET) as manager:  # recorded incremental from here on
        manager.store("users", config=StoreConfig(restore_mode="incremental"))
    _poison_rocksdb(state)
    wrong = run_cli(["get", str(state), "users", user(1), "--json"], capsys)
    assert json.loads(wrong.out)["value"] == {"round": -1}  # an incremental open trusts RocksDB
    before = tree_hash(state)
    dry = run_cli(["repair", "rebuild-rocksdb", str(state), "--store", "users"], capsys)
    assert dry.status == 0, dry.err
    assert tree_hash(state) == before
    assert "B1 rename" in dry.out
    assert "0..160" in dry.out
    applied = run_cli(
        ["repair", "rebuild-rocksdb", str(state), "--store", "users", "--apply", "--json"], capsys
    )
    assert applied.status == 0, applied.err
    doc = json.loads(applied.out)
    assert doc["restored"][0]["end_offset"] == 160
    assert all(v["ok"] for v in doc["verify"])
    right = run_cli(["get", str(state), "users", user(1), "--json"], capsys)
    assert json.loads(right.out)["value"] == live_users()[user(1)]
    assert users_state(state) == live_users()
    assert not (state / "users-rocksdb-0.deleted").exists()


def test_rebuild_rocksdb_refuses_a_locked_state_and_a_refused_changelog(
    state: Path, users: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StateManager(state, config=QUIET):
        before = tree_hash(state / "users-rocksdb-0")
        refused = run_cli(["repair", "rebuild-rocksdb", str(state), "--apply"], capsys)
        assert refused.status == 1
        assert "is locked by pid" in refused.err
        assert tree_hash(state / "users-rocksdb-0") == before
    cut_mid_batch(users / "00000000000000000060.log", 1)
    before = tree_hash(state)
    damaged = run_cli(["repair", "rebuild-rocksdb", str(state), "--store", "users"], capsys)
    assert damaged.status == 1
    assert "repair it first" in damaged.err
    assert tree_hash(state) == before


# --------------------------------------------------------------------------- docs


def test_every_repair_remedy_and_flag_is_documented_in_cli_md() -> None:
    import argparse  # noqa: PLC0415

    from statestore.cli.app import build_parser  # noqa: PLC0415

    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = docs[docs.index("## `repair`") :]

    def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    remedies = subparsers(subparsers(build_parser())["repair"])
    assert sorted(remedies) == [
        "complete",
        "drop-torn-tail",
        "rebuild-checkpoints",
        "rebuild-indexes",
        "rebuild-rocksdb",
        "roll-back",
        "salvage",
        "truncate",
    ]
    for name, parser in remedies.items():
        heading = f"### `repair {name}"
        assert heading in section, f"no {heading} in docs/cli.md"
        part = section[section.index(heading) :]
        part = part[: part.index("\n### ", 1)] if "\n### " in part[1:] else part
        for action in parser._actions:
            for flag in action.option_strings:
                if flag in ("-h", "--help"):
                    continue
                word = re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")
                assert word.search(part) or word.search(section[: section.index("### ")]), (
                    f"repair {name} {flag} is not documented in docs/cli.md"
                )
