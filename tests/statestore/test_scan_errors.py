"""A scan that RocksDB cuts short (a corrupted block, an I/O error) raises; it never looks complete.

rocksdict's iterators end on an invalid RocksDB iterator without asking its
status, so without the engine's end-of-scan check every case below returned a
silent prefix of the data.  The faults are real: bytes overwritten inside a
data block of a flushed SST file (block cache off, so the read goes to disk
and its checksum is verified), and an SST file deleted under an open database
whose table cache holds no handle to it (RocksDB's open then fails with
``IO error: No such file or directory`` in the middle of the scan).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rocksdict

from statestore import StateManager, StateManagerConfig
from statestore.config import RocksDBConfig, StoreConfig
from statestore.errors import StoreEngineError
from statestore.stores.engine import META_COLUMN_FAMILY, RocksDBEngine, rocksdb_options
from tests.cli.helpers import run_cli
from tests.statestore.helpers import engine_of

KEYS = 20_000
LABEL = "[scan-0]"
INCREMENTAL = StoreConfig(restore_mode="incremental")  # reopen keeps RocksDB (full rebuilds it)


def _key(i: int) -> bytes:
    return b"k%06d" % i


def _write(path: Path, config: RocksDBConfig, *, rounds: int = 1) -> None:
    """``KEYS`` keys with 50 random bytes each, in ``rounds`` flushed SST files of interleaved keys."""
    rng = random.Random(7)
    engine = RocksDBEngine.open(path, config=config, cache=None)
    for r in range(rounds):
        engine.write([(_key(i), rng.randbytes(50)) for i in range(r, KEYS, rounds)], KEYS)
        engine.flush()
    engine.close()


def _data_sst(path: Path) -> Path:
    """The data column family's SST file (the metadata one holds a few bytes)."""
    return max(path.glob("*.sst"), key=lambda p: p.stat().st_size)


def _corrupt_a_block(sst: Path) -> None:
    """Overwrite 64 bytes a third of the way into ``sst``: inside a data block, not its index."""
    with sst.open("r+b") as f:
        f.seek(sst.stat().st_size // 3)
        f.write(b"\xff" * 64)


@pytest.fixture
def corrupted(tmp_path: Path) -> Iterator[RocksDBEngine]:
    """An engine over ``KEYS`` keys whose one data SST has a corrupted block about a third in."""
    path = tmp_path / "db"
    _write(path, RocksDBConfig())
    _corrupt_a_block(_data_sst(path))
    engine = RocksDBEngine.open(path, config=RocksDBConfig(), cache=None, label=LABEL)
    yield engine
    engine.close(flush=False)


def _count(entries: Iterator[Any]) -> tuple[int, BaseException | None]:
    n = 0
    try:
        for _ in entries:
            n += 1
    except StoreEngineError as exc:
        return n, exc
    return n, None


@pytest.mark.parametrize(
    ("lo", "hi", "reverse"),
    [
        (None, None, False),
        (None, None, True),
        (_key(1_000), _key(19_000), False),
        (_key(1_000), _key(19_000), True),
        (_key(6_000), None, False),
        (None, _key(15_000), True),
    ],
)
def test_a_corrupted_block_mid_scan_raises_naming_partition_path_and_position(
    corrupted: RocksDBEngine, lo: bytes | None, hi: bytes | None, *, reverse: bool
) -> None:
    n, error = _count(corrupted.items(lo, hi, reverse=reverse))
    assert isinstance(error, StoreEngineError), f"the scan ended quietly after {n} entries"
    assert 0 < n < KEYS
    assert error.operation == "iterate"
    assert error.path == corrupted.path
    assert LABEL in str(error)
    assert "Corruption" in str(error)
    assert "after key b'k0" in str(error)
    assert error.__cause__ is not None


def test_a_scan_that_stops_before_the_corrupted_block_is_whole(corrupted: RocksDBEngine) -> None:
    """The check raises only for a real cut: a range that ends before the block completes."""
    assert [k for k, _ in corrupted.items(_key(0), _key(1_000))] == [_key(i) for i in range(1_000)]
    assert [k for k, _ in corrupted.items(None, _key(1_000), reverse=True)] == [
        _key(i) for i in reversed(range(1_000))
    ]
    assert not corrupted.is_empty()


def test_a_scan_that_starts_in_the_corrupted_block_raises_before_its_first_key(
    corrupted: RocksDBEngine,
) -> None:
    """Find the first key the corruption hides, then seek right onto it."""
    n, error = _count(corrupted.items())
    assert error is not None
    n, error = _count(corrupted.items(_key(n + 1), None))
    assert n == 0
    assert isinstance(error, StoreEngineError)
    assert "before its first key" in str(error)


def test_an_io_error_mid_scan_raises(tmp_path: Path) -> None:
    """An SST file of the middle of the key range is gone when the scan needs to open it."""
    path = tmp_path / "db"
    config = RocksDBConfig(max_open_files=20)  # a table cache of 10 handles: files open lazily
    _write(path, config, rounds=3)
    # Compact into many small files (one per ~64 KiB of data) so a scan opens them one by one.
    options = rocksdb_options(config, None)
    options.set_target_file_size_base(64 * 1024)
    db = rocksdict.Rdict(
        str(path), options, column_families={META_COLUMN_FAMILY: rocksdict.Options(raw_mode=True)}
    )
    db.compact_range(None, None)
    db.close()
    files = sorted(path.glob("*.sst"))
    assert len(files) > 10
    engine = RocksDBEngine.open(path, config=config, cache=None, label=LABEL)
    try:
        files[len(files) // 2].unlink()
        n, error = _count(engine.items())
        assert isinstance(error, StoreEngineError), f"the scan ended quietly after {n} entries"
        assert 0 < n < KEYS
        assert "IO error" in str(error)
        assert LABEL in str(error)
    finally:
        engine.close(flush=False)


def test_a_cut_without_an_error_status_still_raises(tmp_path: Path) -> None:
    """rocksdict's iterator ends early and the error is gone by the check: a key in range follows."""
    engine = RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None, label=LABEL)
    engine.write([(_key(i), b"v") for i in range(100)], 100)
    real = engine._db

    class _Db:
        """rocksdict's handle whose item iterators end after 40 entries, quietly."""

        def items(self, **kwargs: Any) -> Iterator[tuple[bytes, bytes]]:
            return itertools.islice(real.items(**kwargs), 40)

        def iter(self) -> Any:
            return real.iter()

        def latest_sequence_number(self) -> int:
            return int(real.latest_sequence_number())

    engine._db = _Db()
    try:
        for reverse in (False, True):
            n, error = _count(engine.items(reverse=reverse))
            assert n == 40
            assert isinstance(error, StoreEngineError)
            assert "follows in range" in str(error)
    finally:
        engine._db = real
        engine.close()


def test_writes_during_a_scan_are_not_mistaken_for_a_cut(tmp_path: Path) -> None:
    """Keys written while a scan runs (which its iterator does not see) do not look like a cut."""
    engine = RocksDBEngine.open(tmp_path / "db", config=RocksDBConfig(), cache=None)
    engine.write([(_key(i), b"v") for i in range(0, 100, 2)], 1)
    try:
        for reverse in (False, True):
            scan = engine.items(_key(0), _key(200), reverse=reverse)
            first = next(scan)
            engine.write([(_key(i), b"w") for i in range(1, 200, 2)], 2)  # around and past the end
            rest = list(scan)
            want = [_key(i) for i in range(0, 100, 2)]
            assert [first[0], *(k for k, _ in rest)] == (want[::-1] if reverse else want)
            engine.write([(_key(i), None) for i in range(1, 200, 2)], 3)
    finally:
        engine.close()


def _corrupted_store_dir(state: Path) -> None:
    """A store ``scan`` of ``KEYS`` keys, closed, whose RocksDB data SST then has a bad block."""
    config = StateManagerConfig(run_cleaner=False, block_cache_size_bytes=0)
    with StateManager(state, config=config) as manager:
        store = manager.store("scan", key_type=bytes, value_type=bytes, config=INCREMENTAL)
        rng = random.Random(3)
        for start in range(0, KEYS, 1_000):
            for i in range(start, start + 1_000):
                store.put(_key(i), rng.randbytes(50))
            manager.commit()
        engine_of(store).flush()
    _corrupt_a_block(_data_sst(state / "scan-rocksdb-0"))


def test_every_scan_of_a_store_raises_and_so_does_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    _corrupted_store_dir(state)
    config = StateManagerConfig(run_cleaner=False, block_cache_size_bytes=0)
    with StateManager(state, config=config) as manager:
        store = manager.store("scan", key_type=bytes, value_type=bytes, config=INCREMENTAL)
        scans: dict[str, Callable[[], object]] = {
            "items": lambda: list(store.items()),
            "keys": lambda: list(store.keys()),
            "values": lambda: list(store.values()),
            "range": lambda: list(store.range(_key(10), _key(19_990))),
            "reverse_range": lambda: list(store.reverse_range()),
            "prefix_scan": lambda: list(store.prefix_scan(b"k0")),
            "len": lambda: len(store),
        }
        for name, scan in scans.items():
            with pytest.raises(StoreEngineError, match="Corruption") as info:
                scan()
            assert info.value.operation == "iterate", name
            assert "scan-rocksdb-0" in str(info.value), name
            assert "[scan-0]" in str(info.value), name
        # a pending write in range takes the merge path of the write buffer: still raises
        store.put(_key(5), b"pending")
        with pytest.raises(StoreEngineError, match="Corruption"):
            list(store.items())
        store.put(_key(5), None)
        manager.abort()
    result = run_cli(["scan", str(state), "scan", "--keys-only", "--key-format", "hex"], capsys)
    assert result.status == 1
    assert "Corruption" in result.err
    assert "scan-rocksdb-0" in result.err
