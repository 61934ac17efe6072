"""The RocksDB engine: raw bytes, one WriteBatch with the applied offset, ranges, close/reopen."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statestore.config import Compression, RocksDBConfig
from statestore.errors import InvalidStateStoreError, StoreEngineError
from statestore.stores.engine import RocksDBEngine, new_block_cache


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[RocksDBEngine]:
    engine = RocksDBEngine.open(
        tmp_path / "db", config=RocksDBConfig(), cache=new_block_cache(1 << 20)
    )
    yield engine
    engine.close()


def test_write_applies_data_and_offset_together(engine: RocksDBEngine) -> None:
    assert engine.applied_offset() is None
    engine.write([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], 3)
    engine.write([(b"b", None)], 4)
    assert engine.applied_offset() == 4
    assert engine.get(b"a") == b"1"
    assert engine.get(b"b") is None
    assert list(engine.items()) == [(b"a", b"1"), (b"c", b"3")]


def test_metadata_is_not_in_the_data_key_space(engine: RocksDBEngine) -> None:
    engine.write([], 7)
    assert list(engine.items()) == []
    assert engine.get(b"changelog-offset") is None


def test_ranges_are_half_open_both_directions(engine: RocksDBEngine) -> None:
    engine.write([(bytes([c]), bytes([c])) for c in b"abcdef"], 6)

    def keys(entries: Iterator[tuple[bytes, bytes]]) -> bytes:
        return b"".join(k for k, _ in entries)

    assert keys(engine.items(b"b", b"e")) == b"bcd"
    assert keys(engine.items(b"b", b"e", reverse=True)) == b"dcb"
    assert keys(engine.items(None, b"c", reverse=True)) == b"ba"
    assert keys(engine.items(b"d", None, reverse=True)) == b"fed"
    assert keys(engine.items(b"bb", b"dd")) == b"cd"
    assert keys(engine.items(b"x", None)) == b""


def test_close_releases_the_lock_at_once_and_data_survives(tmp_path: Path) -> None:
    config = RocksDBConfig()
    first = RocksDBEngine.open(tmp_path / "db", config=config, cache=None)
    first.write([(b"k", b"v")], 1)
    with pytest.raises(StoreEngineError) as info:
        RocksDBEngine.open(tmp_path / "db", config=config, cache=None)
    assert info.value.operation == "open"
    first.close()
    first.close()  # idempotent
    second = RocksDBEngine.open(tmp_path / "db", config=config, cache=None)
    assert second.get(b"k") == b"v"
    assert second.applied_offset() == 1
    second.close()


def test_destroy_removes_the_directory(tmp_path: Path) -> None:
    engine = RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None)
    engine.write([(b"k", b"v")], 1)
    engine.close()
    RocksDBEngine.destroy(tmp_path / "db")
    assert not (tmp_path / "db").exists()
    fresh = RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None)
    assert fresh.get(b"k") is None
    assert fresh.applied_offset() is None
    fresh.close()


def test_approximate_num_entries_after_flush(engine: RocksDBEngine) -> None:
    engine.write([(str(i).encode(), b"v") for i in range(1000)], 1000)
    engine.flush()
    assert 500 <= engine.approximate_num_entries() <= 2000


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd", "snappy"])
def test_every_compression_writes_its_codec(tmp_path: Path, compression: Compression) -> None:
    """The SST file names the codec asked for, a compressed block does not hold the raw value,
    and the value reads back after a reopen."""
    value = b"v" * 100
    engine = RocksDBEngine.open(
        tmp_path / "db",
        config=RocksDBConfig(compression=compression),
        cache=None,
    )
    engine.write([(b"k", value)], 1)
    engine.flush()
    engine.close()
    ssts = [path.read_bytes() for path in sorted((tmp_path / "db").rglob("*.sst"))]
    codec = _SST_CODEC_NAMES[compression]
    assert any(codec in sst for sst in ssts), (codec, len(ssts))
    assert any(value in sst for sst in ssts) == (compression == "none")
    reopened = RocksDBEngine.open(
        tmp_path / "db", config=RocksDBConfig(compression=compression), cache=None
    )
    assert reopened.get(b"k") == value
    reopened.close()


def _default_cf_options(db_dir: Path) -> dict[str, str]:
    """The ``[CFOptions "default"]`` section of the newest OPTIONS file RocksDB wrote."""
    newest = max(db_dir.glob("OPTIONS-*"), key=lambda path: int(path.name.split("-")[1]))
    section = newest.read_text().split('[CFOptions "default"]')[1].split("[")[0]
    pairs = (line.strip().partition("=") for line in section.splitlines() if "=" in line)
    return {name: value for name, _, value in pairs}


@pytest.mark.parametrize(("ratio", "filtering"), [(0.02, "true"), (0.1, "true"), (0.0, "false")])
def test_memtable_bloom_filter_follows_the_config(
    tmp_path: Path, ratio: float, filtering: str
) -> None:
    """RocksDB records the memtable bloom options it runs with (OPTIONS file): whole-key
    filtering on with the configured size ratio, or both off at 0; reads are unchanged."""
    config = RocksDBConfig() if ratio == 0.02 else RocksDBConfig(memtable_bloom_size_ratio=ratio)
    engine = RocksDBEngine.open(tmp_path / "db", config=config, cache=None)
    engine.write([(b"k%d" % i, b"v%d" % i) for i in range(1000)], 1000)
    assert engine.get(b"k7") == b"v7"
    assert engine.get(b"absent") is None
    engine.close()
    options = _default_cf_options(tmp_path / "db")
    assert float(options["memtable_prefix_bloom_size_ratio"]) == pytest.approx(ratio)
    assert options["memtable_whole_key_filtering"] == filtering


_SST_CODEC_NAMES: dict[str, bytes] = {
    "none": b"NoCompression",
    "lz4": b"LZ4",
    "zstd": b"ZSTD",
    "snappy": b"Snappy",
}
"""The ``rocksdb.compression`` table property RocksDB writes into each SST (its codec names)."""


def test_checkpoint_is_an_openable_copy(tmp_path: Path) -> None:
    engine = RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None)
    engine.write([(b"k", b"v")], 1)
    engine.checkpoint(tmp_path / "copy")
    engine.write([(b"k", b"w")], 2)
    engine.close()
    copy = RocksDBEngine.open(tmp_path / "copy", config=RocksDBConfig(), cache=None)
    assert copy.get(b"k") == b"v"
    assert copy.applied_offset() == 1
    copy.close()


def test_bounds_outlive_the_callers_bytes(engine: RocksDBEngine) -> None:
    """The bound's bytes may be freed before iteration starts (rocksdict does not keep them)."""
    engine.write([(b"k%03d" % i, b"v") for i in range(100)], 100)
    forward = engine.items(b"k010", b"k%03d" % 13)
    backward = engine.items(b"k%03d" % 10, b"k%03d" % 13, reverse=True)
    gc.collect()
    _ = [bytes(64) for _ in range(1000)]  # reuse the freed memory
    assert [k for k, _ in forward] == [b"k010", b"k011", b"k012"]
    assert [k for k, _ in backward] == [b"k012", b"k011", b"k010"]


def test_a_closed_engine_refuses_every_operation_with_a_typed_error(tmp_path: Path) -> None:
    engine = RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None)
    engine.close()
    engine.close()  # idempotent
    assert engine.closed
    operations = {
        "get": lambda: engine.get(b"k"),
        "write": lambda: engine.write([(b"k", b"v")], 1),
        "iterate": engine.items,
        "read applied offset": engine.applied_offset,
        "flush": engine.flush,
        "property": engine.approximate_num_entries,
        "checkpoint": lambda: engine.checkpoint(tmp_path / "copy"),
        "compact": engine.compact_level0,
    }
    for operation, call in operations.items():
        with pytest.raises(InvalidStateStoreError) as info:
            call()
        assert (info.value.state, info.value.operation) == ("closed", operation)
        assert str(tmp_path / "db") in str(info.value)


class _Broken:
    """Stands in for rocksdict's handle: every call fails as rocksdict does (an ``Exception``)."""

    def __getattr__(self, name: str) -> object:
        def fail(*_args: object, **_kwargs: object) -> None:
            raise RuntimeError(f"IO error: {name} on fire")

        return fail


@pytest.mark.parametrize(
    ("operation", "call"),
    [
        ("write", lambda e: e.write([(b"k", b"v")], 1)),
        ("flush", lambda e: e.flush()),
        ("flush", lambda e: e.request_data_flush()),
        ("property", lambda e: e.data_flush_pending()),
        ("property", lambda e: e.approximate_num_entries()),
        ("iterate", lambda e: e.items()),
        ("flush applied offset", lambda e: e.persist_applied_offset(1, current=2)),
        ("read applied offset", lambda e: e.applied_offset()),
        ("compact", lambda e: e.compact_level0()),
    ],
)
def test_every_rocksdb_error_becomes_a_store_engine_error_naming_path_and_operation(
    engine: RocksDBEngine, operation: str, call: Callable[[RocksDBEngine], object]
) -> None:
    real_db, real_meta = engine._db, engine._meta_db
    engine._db, engine._meta_db = _Broken(), _Broken()
    try:
        with pytest.raises(StoreEngineError) as info:
            call(engine)
        assert info.value.path == engine.path
        assert info.value.operation == operation
        assert isinstance(info.value.__cause__, RuntimeError)
        assert "on fire" in str(info.value)
    finally:
        engine._db, engine._meta_db = real_db, real_meta


def test_a_failed_get_is_a_store_engine_error(engine: RocksDBEngine) -> None:
    engine._get = _Broken().get
    with pytest.raises(StoreEngineError) as info:
        engine.get(b"k")
    assert (info.value.path, info.value.operation) == (engine.path, "get")


def test_bounds_compare_whole_keys_not_prefixes(engine: RocksDBEngine) -> None:
    """The C-level bound tests (``(hi,) > entry``): a key that extends a bound, or equals it."""
    keys = [b"", b"a", b"a\x00", b"ab", b"b", b"b\x00", b"b\xff", b"c"]
    engine.write([(key, b"v" + key) for key in keys if key], 1)
    stored = [key for key in keys if key]
    for lo in [None, *keys]:
        for hi in [None, *keys]:
            want = [k for k in stored if (lo is None or k >= lo) and (hi is None or k < hi)]
            assert [k for k, _ in engine.items(lo, hi)] == want, (lo, hi)
            assert [k for k, _ in engine.items(lo, hi, reverse=True)] == want[::-1], (lo, hi)


def _level0_files(engine: RocksDBEngine) -> int:
    return int(engine._db.property_int_value("rocksdb.num-files-at-level0") or 0)


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll ``condition``; fails the test if it does not hold within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s}s"
        time.sleep(0.02)


def _wait_compacted(engine: RocksDBEngine) -> None:
    _wait_until(lambda: not _level0_files(engine), "level 0 emptied")


def _compaction_pending(engine: RocksDBEngine) -> bool:
    """RocksDB's own flag: a compaction is needed by the current options (scheduled or not)."""
    return bool(engine._db.property_int_value("rocksdb.compaction-pending"))


def _compactions_running(engine: RocksDBEngine) -> int:
    return int(engine._db.property_int_value("rocksdb.num-running-compactions") or 0)


def test_compact_level0_compacts_in_the_background_then_a_write_puts_the_trigger_back(
    tmp_path: Path,
) -> None:
    """After a full restore (issue 18: a restored store's level-0 files cost a get ~6% at 1M keys)."""
    config = RocksDBConfig(write_buffer_size_bytes=64 * 1024)
    engine = RocksDBEngine.open(tmp_path / "db", config=config, cache=None)
    try:
        assert not engine.compact_level0()  # nothing in level 0: nothing asked
        for round_ in range(2):
            engine.write([(b"%05d-%d" % (i, round_), b"v" * 100) for i in range(500)], round_ + 1)
            engine.flush()
        assert _level0_files(engine) == 2  # below RocksDB's trigger of 4: left there
        assert engine.compact_level0()
        assert engine.level0_compaction_requested
        _wait_compacted(engine)
        assert _level0_files(engine) == 0
        engine.write([(b"after", b"v")], 3)  # the first write after it: the trigger is back
        assert not engine.level0_compaction_requested
        for round_ in range(2):  # so two new level-0 files stay, as RocksDB's default wants
            engine.write([(b"%05d-n%d" % (i, round_), b"v" * 100) for i in range(500)], 4)
            engine.flush()
        # Nothing needed and, once any job in flight has ended, nothing running: the two files
        # stay (RocksDB's own flags, not a wait for something that should not happen).
        _wait_until(lambda: _compactions_running(engine) == 0, "no compaction running")
        assert not _compaction_pending(engine)
        assert _level0_files(engine) == 2
        assert engine.get(b"00001-0") == b"v" * 100
    finally:
        engine.close()


def test_a_full_restore_asks_for_the_level0_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statestore.config import StoreConfig  # noqa: PLC0415
    from statestore.manager import StateManager  # noqa: PLC0415
    from statestore.serdes import BytesSerde  # noqa: PLC0415

    asked: list[bool] = []
    real = RocksDBEngine.compact_level0

    def spy(self: RocksDBEngine) -> bool:
        asked.append(real(self))
        return asked[-1]

    monkeypatch.setattr(RocksDBEngine, "compact_level0", spy)
    small = RocksDBConfig(write_buffer_size_bytes=64 * 1024)
    for mode in ("full", "incremental"):
        asked.clear()
        for _ in range(2):
            with StateManager(tmp_path / mode) as manager:
                store = manager.store(
                    "s",
                    key_serde=BytesSerde(),
                    value_serde=BytesSerde(),
                    rocksdb=small,
                    config=StoreConfig(restore_mode=mode),
                )
                for i in range(1500):
                    store.put(b"%05d" % (i * 7919 % 1500), b"v" * 100)
                store.commit()
        # a rebuild only (the first open restored nothing); incremental never asks
        assert asked == ([False, True] if mode == "full" else [])
