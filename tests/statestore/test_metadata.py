"""The store metadata file (statestore.stores.metadata): the misuse cases of issue 13.

Each case ends in a typed error that changed nothing, or in correct data: partitions
forgotten or changed, serdes changed, the restore mode switched after the cleaner
removed tombstones, the changelog settings changed, the metadata file corrupted byte
by byte, truncated or deleted, and state directories from before the file existed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from changelog.cleaner.clean import clean_log
from changelog.fs import files
from statestore.config import STORE_LOG_CONFIG, RocksDBConfig, StoreConfig
from statestore.errors import (
    CorruptStoreMetadataError,
    InvalidStoreConfigError,
    StoreLayoutError,
    StoreMetadataError,
    StoreMetadataMismatchError,
)
from statestore.serdes import AttrsSerde, BytesSerde, IntSerde, MsgpackSerde, StringSerde
from statestore.stores.engine import RocksDBEngine
from statestore.stores.metadata import (
    StoreMetadata,
    decode_metadata,
    encode_metadata,
    metadata_path,
    read_metadata,
    serde_identity,
)
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import TINY_LOG, changelog_entries


def files_of(state: Path) -> dict[str, bytes]:
    """Every file and directory of the stores under ``state``, with its bytes.

    Not RocksDB's (a cache, rewritten by every open), the lock, or the transaction
    coordinator's log (every manager open bumps its epoch there, O1-O2).
    """
    found: dict[str, bytes] = {}
    for path in sorted(state.rglob("*")):
        relative = str(path.relative_to(state))
        if "rocksdb" in relative or path.name == ".lock" or "__transaction_state" in relative:
            continue
        found[str(path.relative_to(state))] = b"<dir>" if path.is_dir() else path.read_bytes()
    return found


def fill(store: Any, count: int) -> dict[str, int]:
    expected = {f"key-{i:05d}": i for i in range(count)}
    for key, value in expected.items():
        store[key] = value
    store.commit()
    return expected


# ----------------------------------------------------------------------------- the file


def sample() -> StoreMetadata:
    return StoreMetadata(
        store="users",
        partitions=4,
        key_serde="string",
        value_serde="msgpack",
        restore_mode="incremental",
        log_config=TINY_LOG,
    )


def test_the_file_is_canonical_json_with_a_crc32c_over_everything_else() -> None:
    data = encode_metadata(sample())
    doc = json.loads(data)
    assert doc["format"] == "statestore.store-metadata"
    assert doc["version"] == 1
    assert doc["partitions"] == 4
    assert doc["log_config"] == attrs.asdict(TINY_LOG)
    body = {key: value for key, value in doc.items() if key != "crc32c"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    import crc32c  # noqa: PLC0415

    assert doc["crc32c"] == crc32c.crc32c(canonical.encode())
    assert data.endswith(b"}\n")
    assert decode_metadata(data, path=Path("x"), store="users") == sample()


def test_golden_bytes() -> None:
    """The format pinned: a change here is a format change (bump METADATA_VERSION)."""
    meta = attrs.evolve(sample(), log_config=STORE_LOG_CONFIG)
    data = encode_metadata(meta)
    assert data.startswith(b'{\n  "crc32c": ')
    assert b'"format": "statestore.store-metadata"' in data
    assert b'"segment_bytes": 67108864' in data
    assert decode_metadata(data, path=Path("x"), store="users") == meta


@pytest.mark.parametrize("damage", ["xor01", "xor80", "zero", "space"])
def test_every_damaged_byte_is_a_typed_error_or_the_same_settings(damage: str) -> None:
    data = encode_metadata(sample())
    outcomes = {"refused": 0, "same": 0}
    for position in range(len(data)):
        damaged = bytearray(data)
        if damage == "xor01":
            damaged[position] ^= 0x01
        elif damage == "xor80":
            damaged[position] ^= 0x80
        elif damage == "zero":
            damaged[position] = 0
        else:
            damaged[position] = 0x20
        if bytes(damaged) == data:
            continue
        try:
            decoded = decode_metadata(bytes(damaged), path=Path("m"), store="users")
        except CorruptStoreMetadataError as exc:
            paths = {exc.path}
            assert paths == {Path("m")}
            outcomes["refused"] += 1
        else:
            assert decoded == sample(), (position, damage)  # white space only
            outcomes["same"] += 1
    assert outcomes["refused"] > len(data) * 0.7, outcomes


def test_every_truncation_is_a_typed_error() -> None:
    data = encode_metadata(sample())
    for size in range(len(data) - 1):  # all but the final newline is needed
        with pytest.raises(CorruptStoreMetadataError):
            decode_metadata(data[:size], path=Path("m"), store="users")
    assert decode_metadata(data[:-1], path=Path("m"), store="users") == sample()


def test_a_file_of_another_store_or_format_is_refused() -> None:
    data = encode_metadata(sample())
    with pytest.raises(CorruptStoreMetadataError, match="records store 'users'"):
        decode_metadata(data, path=Path("m"), store="orders")
    doc = json.loads(data)
    doc["version"] = 2
    with pytest.raises(CorruptStoreMetadataError, match="version 2"):
        decode_metadata(json.dumps(doc).encode(), path=Path("m"), store="users")


def test_serde_identities() -> None:
    @attrs.frozen
    class User:
        name: str

    class Custom:
        serde_id = "my-format-v2"

        def serialize(self, obj: Any) -> bytes:
            return bytes(obj)

        def deserialize(self, data: bytes) -> Any:
            return data

    class Anonymous(Custom):
        serde_id = None  # type: ignore[assignment]

    assert serde_identity(BytesSerde()) == "bytes"
    assert serde_identity(StringSerde()) == "string"
    assert serde_identity(IntSerde()) == "int64"
    assert serde_identity(MsgpackSerde()) == "msgpack"
    assert serde_identity(AttrsSerde(User)).startswith("attrs:tests.statestore.test_metadata.")
    assert serde_identity(Custom()) == "my-format-v2"
    assert serde_identity(Anonymous()).endswith("Anonymous")


# ----------------------------------------------------------------------------- partitions


def test_forgotten_partitions_use_the_recorded_count(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """The round-1 bug: 2,161 of 8,707 entries not found, extra partition directories."""
    state = tmp_path / "state"
    manager = open_manager()
    expected = fill(manager.store("users", partitions=4), 2000)
    manager.close()
    manager = open_manager()
    store = manager.store("users")  # partitions= forgotten
    assert store.partitions == 4 if hasattr(store, "partitions") else True
    assert {key: store[key] for key in expected} == expected
    assert dict(store.items()) == expected
    assert sorted(p.name for p in state.glob("users-changelog-*")) == [
        f"users-changelog-{p}" for p in range(4)
    ]


@pytest.mark.parametrize("asked", [1, 3, 8])
def test_other_partitions_are_a_typed_error_that_changes_nothing(
    open_manager: OpenManager, tmp_path: Path, asked: int
) -> None:
    state = tmp_path / "state"
    manager = open_manager()
    expected = fill(manager.store("users", partitions=4), 200)
    manager.close()
    before = files_of(state)
    manager = open_manager()
    with pytest.raises(StoreMetadataMismatchError) as info:
        manager.store("users", partitions=asked)
    error = info.value
    assert (error.setting, error.stored, error.requested) == ("partitions", 4, asked)
    assert error.path == metadata_path(state, "users")
    assert "migrat" in str(error)
    assert files_of(state) == before  # no extra partition directory, nothing rewritten
    assert dict(manager.store("users", partitions=4).items()) == expected


# ----------------------------------------------------------------------------- serdes, log config


def test_a_changed_serde_is_a_typed_error(open_manager: OpenManager, tmp_path: Path) -> None:
    manager = open_manager()
    fill(manager.store("users"), 10)
    manager.close()
    manager = open_manager()
    with pytest.raises(StoreMetadataMismatchError) as info:
        manager.store("users", value_type=bytes)
    assert (info.value.setting, info.value.stored, info.value.requested) == (
        "value_serde",
        "msgpack",
        "bytes",
    )
    with pytest.raises(StoreMetadataMismatchError) as info:
        manager.store("users", key_type=int, value_type=bytes)
    assert [m[0] for m in info.value.mismatches] == ["key_serde", "value_serde"]


def test_a_changed_log_config_is_a_typed_error_and_a_forgotten_one_is_the_recorded_one(
    tmp_path: Path,
) -> None:
    from statestore.manager import StateManager  # noqa: PLC0415
    from tests.statestore.helpers import NO_CLEANER  # noqa: PLC0415

    state = tmp_path / "state"
    with StateManager(state, config=NO_CLEANER) as manager:
        fill(manager.store("users", log_config=TINY_LOG), 10)
    other = attrs.evolve(TINY_LOG, segment_bytes=8192, cleanup_policy="compact,delete")
    before = files_of(state)
    with StateManager(state, config=NO_CLEANER) as manager:
        with pytest.raises(StoreMetadataMismatchError) as info:
            manager.store("users", log_config=other)
        assert info.value.mismatches == (
            ("log_config.segment_bytes", 4096, 8192),
            ("log_config.cleanup_policy", "compact", "compact,delete"),
        )
        assert files_of(state) == before
    with StateManager(state, config=NO_CLEANER, log_config=other) as manager:
        with pytest.raises(StoreMetadataMismatchError):  # the manager-wide default too
            manager.store("users")
    with StateManager(state, config=NO_CLEANER) as manager:  # no log_config: the recorded one
        store = manager.store("users")
        assert store.changelogs[0].config == TINY_LOG


# ----------------------------------------------------------------------------- restore mode


def test_switching_full_to_incremental_after_the_cleaner_removed_tombstones_resurrects_nothing(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """The round-1 bug: 20 of 20 deleted keys came back.

    Full restore holds no cleaning barrier, so the cleaner may remove tombstones
    past their delete horizon (``delete_retention_ms=0`` here) while RocksDB, which
    full restore never flushes on commit, still holds the keys on disk.  An
    incremental open that trusted that RocksDB would replay from its applied
    offset over a log that no longer has the tombstones.
    """
    state = tmp_path / "state"
    full = StoreConfig(restore_mode="full")
    manager = open_manager()
    store = manager.store("kv", key_type=str, value_type=int, config=full)
    for i in range(20):
        store[f"deleted-{i}"] = i
    store["kept"] = 1
    store.commit()
    manager.close()  # a clean close flushes RocksDB: the 21 keys are on disk
    # What RocksDB has on disk from here on, until it flushes again: under full restore
    # a commit does not flush it, so a kill -9 would leave exactly these files (an
    # in-process crash() cannot: RocksDB flushes its memtables when it is closed).
    shutil.copytree(state / "kv-rocksdb-0", tmp_path / "durable-rocksdb")
    manager = open_manager()
    store = manager.store("kv", key_type=str, value_type=int, config=full)
    for i in range(20):
        del store[f"deleted-{i}"]
    store.commit()
    log = store.changelogs[0]
    log.roll()
    clean_log(log, force=True)  # removes the puts; the tombstones are kept by this pass
    clean_log(log, force=True)  # past the delete horizon (0 ms): the tombstones go too
    assert changelog_entries(log) == [(b"kept", IntSerde().serialize(1))]
    manager.crash()
    shutil.rmtree(state / "kv-rocksdb-0")
    shutil.copytree(tmp_path / "durable-rocksdb", state / "kv-rocksdb-0")
    engine = RocksDBEngine.open(state / "kv-rocksdb-0", config=RocksDBConfig(), cache=None)
    try:
        assert len(dict(engine.items())) == 21  # what an incremental restore would start from
        assert engine.applied_offset() == 21  # inside the log: nothing looks wrong
    finally:
        engine.close(flush=False)
    manager = open_manager()
    store = manager.store(
        "kv", key_type=str, value_type=int, config=StoreConfig(restore_mode="incremental")
    )
    assert dict(store.items()) == {"kept": 1}
    assert manager.restore_results("kv")[0].rebuilt
    assert read_metadata(state, "kv").restore_mode == "incremental"  # type: ignore[union-attr]
    manager.close()
    manager = open_manager()  # incremental again: kept, nothing to replay
    store = manager.store(
        "kv", key_type=str, value_type=int, config=StoreConfig(restore_mode="incremental")
    )
    assert not manager.restore_results("kv")[0].rebuilt
    assert dict(store.items()) == {"kept": 1}


def test_a_switch_cut_short_by_a_crash_is_rebuilt_again(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """M2: the new mode is recorded only after the restore; a crash before that
    leaves the old mode, and the next incremental open rebuilds again."""
    state = tmp_path / "state"
    manager = open_manager()
    fill(manager.store("kv"), 30)
    manager.close()

    def crash_at_metadata(step: str, path: Path) -> None:
        if step.startswith("store_metadata"):
            raise files.SimulatedCrash(step)

    manager = open_manager()
    with files.inject_faults(crash_at_metadata), pytest.raises(files.SimulatedCrash):
        manager.store("kv", config=StoreConfig(restore_mode="incremental"))
    manager.crash()
    assert read_metadata(state, "kv").restore_mode == "full"  # type: ignore[union-attr]
    manager = open_manager()
    store = manager.store("kv", config=StoreConfig(restore_mode="incremental"))
    assert manager.restore_results("kv")[0].rebuilt
    assert len(dict(store.items())) == 30


def test_a_failed_metadata_write_closes_the_store_and_is_typed(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    import errno  # noqa: PLC0415

    def full_disk(step: str, path: Path) -> None:
        if step == "store_metadata.write":
            raise OSError(errno.ENOSPC, "No space left on device")

    manager = open_manager()
    with files.inject_faults(full_disk), pytest.raises(StoreMetadataError) as info:
        manager.store("kv")
    assert "No space left" in str(info.value)
    assert manager.stores == {}
    assert read_metadata(tmp_path / "state", "kv") is None
    store = manager.store("kv")  # space again: the new store opens and records itself
    store["a"] = 1
    store.commit()
    assert read_metadata(tmp_path / "state", "kv") is not None


# ----------------------------------------------------------------------------- damaged or missing file


@pytest.mark.parametrize("position", [0, 1, 5, 20, 60, 100, 200, 300, 400, -30, -3, -2])
def test_a_corrupt_metadata_file_is_refused_by_the_open_naming_it(
    open_manager: OpenManager, tmp_path: Path, position: int
) -> None:
    state = tmp_path / "state"
    manager = open_manager()
    expected = fill(manager.store("kv", partitions=2), 50)
    manager.close()
    path = metadata_path(state, "kv")
    data = bytearray(path.read_bytes())
    data[position] ^= 0x04
    path.write_bytes(bytes(data))
    before = files_of(state)
    manager = open_manager()
    try:
        store = manager.store("kv")
    except CorruptStoreMetadataError as exc:
        named = (exc.path, str(path) in str(exc))
        assert named == (path, True)
        assert files_of(state) == before  # never silently rewritten
    else:
        assert dict(store.items()) == expected
        assert json.loads(data) == json.loads(files_of(state)["kv.metadata.json"])


@pytest.mark.parametrize("keep", [0, 1, 40, 0.5, -2])
def test_a_truncated_metadata_file_is_refused(
    open_manager: OpenManager, tmp_path: Path, keep: float
) -> None:
    state = tmp_path / "state"
    manager = open_manager()
    fill(manager.store("kv"), 5)
    manager.close()
    path = metadata_path(state, "kv")
    data = path.read_bytes()
    size = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    path.write_bytes(data[:size])
    before = files_of(state)
    with pytest.raises(CorruptStoreMetadataError) as info:
        open_manager().store("kv")
    assert info.value.path == path
    assert files_of(state) == before


def test_a_deleted_metadata_file_is_adopted_from_the_directories(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """A state directory from round 1 (no file): the directories prove the count."""
    state = tmp_path / "state"
    manager = open_manager()
    expected = fill(manager.store("kv", partitions=3), 300)
    manager.close()
    metadata_path(state, "kv").unlink()
    manager = open_manager()
    store = manager.store("kv")  # forgotten partitions: 3, proven by kv-changelog-0..2
    assert dict(store.items()) == expected
    manager.close()
    assert read_metadata(state, "kv").partitions == 3  # type: ignore[union-attr]


def test_a_round_one_directory_with_a_wrong_partition_count_is_refused(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    manager = open_manager()
    fill(manager.store("kv", partitions=3), 30)
    manager.close()
    metadata_path(state, "kv").unlink()
    before = files_of(state)
    with pytest.raises(StoreMetadataMismatchError) as info:
        open_manager().store("kv", partitions=5)
    assert info.value.setting == "partitions"
    assert files_of(state) == before


def test_an_interrupted_creation_is_created_anew(open_manager: OpenManager, tmp_path: Path) -> None:
    """A cut after some partition directories were made, before the file: nothing was acked.

    The file is written once a new store has restored, so a crash or power cut in
    between leaves empty partition directories and no file.  With no byte in any
    ``.log`` nothing of the store was ever acknowledged: the open creates it anew
    with what it asks for (a power-loss image of store creation found this refused).
    """
    state = tmp_path / "state"
    manager = open_manager()
    manager.store("kv", partitions=3)
    manager.crash()
    metadata_path(state, "kv").unlink()
    shutil.rmtree(state / "kv-changelog-2")
    shutil.rmtree(state / "kv-changelog-1")
    manager = open_manager()
    store = manager.store("kv", partitions=3)
    assert dict(store.items()) == {}
    expected = fill(store, 60)
    manager.close()
    assert read_metadata(state, "kv").partitions == 3  # type: ignore[union-attr]
    store = open_manager().store("kv")
    assert dict(store.items()) == expected


def test_partition_directories_holding_records_are_never_created_anew(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """One byte in one ``.log`` and the directories are adopted (or refused), never reset."""
    state = tmp_path / "state"
    manager = open_manager()
    fill(manager.store("kv", partitions=1), 5)
    manager.close()
    metadata_path(state, "kv").unlink()
    before = files_of(state)
    with pytest.raises(StoreMetadataMismatchError):
        open_manager().store("kv", partitions=2)
    assert files_of(state) == before


def test_ambiguous_or_inconsistent_directories_are_refused(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    manager = open_manager()
    fill(manager.store("kv", partitions=3), 30)
    manager.close()
    # A deleted changelog directory with the metadata in place: not an empty partition.
    shutil.move(state / "kv-changelog-1", tmp_path / "saved")
    before = files_of(state)
    manager = open_manager()
    with pytest.raises(StoreLayoutError) as layout:
        manager.store("kv")
    assert (layout.value.expected, layout.value.found) == (3, (0, 2))
    assert files_of(state) == before
    # An extra partition directory: refused too.
    shutil.move(tmp_path / "saved", state / "kv-changelog-1")
    (state / "kv-changelog-3").mkdir()
    with pytest.raises(StoreLayoutError) as layout:
        manager.store("kv")
    assert layout.value.found == (0, 1, 2, 3)
    (state / "kv-changelog-3").rmdir()
    # Without metadata, partitions 0 and 2 prove nothing.
    metadata_path(state, "kv").unlink()
    shutil.rmtree(state / "kv-changelog-1")
    with pytest.raises(StoreLayoutError, match="ambiguous"):
        manager.store("kv")


def test_the_already_open_store_is_compared_with_what_it_was_opened_with(
    open_manager: OpenManager,
) -> None:
    manager = open_manager()
    store = manager.store("kv", partitions=2)
    assert manager.store("kv") is store
    assert manager.store("kv", partitions=2) is store
    with pytest.raises(InvalidStoreConfigError):
        manager.store("kv", partitions=3)


# ----------------------------------------------------------------------------- migration


def test_migrate_store_records_new_settings_and_the_next_open_uses_them(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    from statestore import StateDirLockedError, migrate_store  # noqa: PLC0415

    state = tmp_path / "state"
    manager = open_manager()
    expected = fill(manager.store("kv", partitions=2), 100)
    with pytest.raises(StateDirLockedError):  # never under a running manager
        migrate_store(state, "kv", log_config=STORE_LOG_CONFIG)
    manager.close()
    bigger = attrs.evolve(TINY_LOG, segment_bytes=1 << 20)
    before, after = migrate_store(state, "kv", log_config=bigger, value_serde="my-msgpack-v2")
    assert (before.log_config, after.log_config) == (TINY_LOG, bigger)
    assert after.value_serde == "my-msgpack-v2"
    assert read_metadata(state, "kv") == after
    manager = open_manager()
    with pytest.raises(StoreMetadataMismatchError):  # the old settings are now refused
        manager.store("kv")
    manager.close()

    class MyMsgpack(MsgpackSerde):
        serde_id = "my-msgpack-v2"

    manager = open_manager(log_config=bigger)
    store = manager.store("kv", value_serde=MyMsgpack())
    assert store.changelogs[0].config == bigger
    assert dict(store.items()) == expected


def test_migrate_store_refuses_a_store_without_metadata_and_a_corrupt_file(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    from statestore import migrate_store  # noqa: PLC0415

    state = tmp_path / "state"
    manager = open_manager()
    fill(manager.store("kv"), 3)
    manager.close()
    path = metadata_path(state, "kv")
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(CorruptStoreMetadataError):
        migrate_store(state, "kv", value_serde="x")
    path.unlink()
    with pytest.raises(StoreLayoutError, match="open the store once"):
        migrate_store(state, "kv", value_serde="x")


def test_the_documented_partition_change_procedure(tmp_path: Path) -> None:
    """docs/operations.md, 'Changing the partition count': copy, move, migrate the serdes."""
    from statestore import StateManager, migrate_store  # noqa: PLC0415
    from tests.statestore.helpers import NO_CLEANER  # noqa: PLC0415

    state, new_state = tmp_path / "state", tmp_path / "state-new"
    with StateManager(state, config=NO_CLEANER) as manager:
        expected = fill(manager.store("users", partitions=2), 500)
    with (
        StateManager(state, config=NO_CLEANER) as old,
        StateManager(new_state, config=NO_CLEANER) as new,
    ):
        source = old.raw_store("users")
        target = new.store("users", key_type=bytes, value_type=bytes, partitions=8)
        for i, (key, value) in enumerate(source.items(), 1):
            target[key] = value
            if i % 100 == 0:
                new.commit()
        new.commit()
    for path in list(state.glob("users*")):
        shutil.move(path, tmp_path / f"old-{path.name}")
    for path in list(new_state.glob("users*")):
        shutil.move(path, state / path.name)
    migrate_store(state, "users", key_serde=StringSerde(), value_serde=MsgpackSerde())
    with StateManager(state, config=NO_CLEANER) as manager:
        store = manager.store("users")
        assert len(store.changelogs) == 8
        assert dict(store.items()) == expected
