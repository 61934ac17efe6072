"""The RocksDB engine under one store partition: bytes in, bytes out.

Layout of one RocksDB directory:

=================  ===============================================================
column family      contents
=================  ===============================================================
``default``        the store's data: serialized key -> serialized value
``statestore``     metadata; key ``changelog-offset`` -> 8-byte big-endian signed
                   int: the *next* changelog offset to apply (the applied offset);
                   other keys: written by the layer above in the same WriteBatch
                   (``write(..., meta=)``), e.g. by :mod:`statestore.kafka`
=================  ===============================================================

Invariants:

* Every write is one ``WriteBatch`` with RocksDB's WAL off (the changelog is
  the WAL) that carries the data *and* the applied offset it reaches, so any
  state RocksDB persists is a whole-batch prefix of the writes, offset included.
* ``atomic_flush`` is on, so RocksDB's own flushes (a full memtable) flush the
  two column families together; :meth:`RocksDBEngine.flush` flushes the data
  before the metadata, and :meth:`RocksDBEngine.persist_applied_offset` (the
  one write of an applied offset without data) persists only an offset whose
  data its caller has seen on disk.  After a crash, the stored applied offset
  is therefore never ahead of the data (it may be behind: replaying from an
  older offset is idempotent, the log holds only puts and tombstones).
* Options are built from a :class:`~statestore.config.RocksDBConfig` on every
  open; nothing is read back from the OPTIONS file.

Errors: every rocksdict failure is mapped in one place, :class:`_EngineErrors`,
to :class:`~statestore.errors.StoreEngineError` naming the RocksDB directory and
the operation, with the rocksdict error as ``__cause__``.  Using a closed engine
raises :class:`~statestore.errors.InvalidStateStoreError`.

Lifecycle: ``open`` (from :meth:`RocksDBEngine.open`) -> ``closed``.

Thread-safety: reads and writes are thread-safe (RocksDB is); :meth:`close`
must not race with other calls: the owning store serializes them.  Iterators
hold RocksDB open: exhaust or drop them before closing.

Read consistency (what concurrent readers rely on, :mod:`statestore.stores.reader`):
every write is one ``WriteBatch``, and RocksDB makes a batch visible to reads
all at once (it publishes the batch's last sequence number after inserting the
whole batch), so each read below sees every write whole or not at all:

* :meth:`RocksDBEngine.get`: one key, as of the call;
* :meth:`RocksDBEngine.get_many`: RocksDB's ``MultiGet`` (rocksdict's list
  get), one implicit snapshot for all keys;
* :meth:`RocksDBEngine.items`: a RocksDB iterator, created when ``items`` is
  called (rocksdict creates and seeks it eagerly), pins an implicit snapshot:
  the scan sees the store as of that call to the end, whatever is written
  while it runs, and stays valid across writes and memtable flushes;
* :meth:`RocksDBEngine.view`: a point-in-time view (a RocksDB iterator) for
  lookups of several keys as of one earlier moment (a reader of several
  partitions opens one view per partition at one moment, then reads them).

rocksdict 0.3.29's ``Snapshot`` serves point reads at its sequence number but
its iterators ignore it (:meth:`RocksDBEngine._check_scan_end`), so the
engine's consistent scans and views use iterators' own implicit snapshots.
"""

from __future__ import annotations

import collections
import itertools
import logging
import shutil
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import rocksdict

from changelog.native import compiled
from statestore.config import RocksDBConfig
from statestore.errors import InvalidStateStoreError, StateStoreError, StoreEngineError

__all__ = [
    "LEVEL0_COMPACTION_TRIGGER",
    "META_COLUMN_FAMILY",
    "EngineView",
    "RocksDBEngine",
    "new_block_cache",
    "rocksdb_options",
]


def _load_fill() -> Callable[[Any, list[Any] | dict[Any, Any]], None] | None:
    """The compiled WriteBatch fill (``statestore/stores/_put.c``), or ``None`` if not built."""
    return compiled("statestore.stores._put", "fill")  # type: ignore[no-any-return]


_FILL: Final = _load_fill()

META_COLUMN_FAMILY: Final = "statestore"
LEVEL0_COMPACTION_TRIGGER: Final = 4
"""``level0_file_num_compaction_trigger`` (RocksDB's default, set explicitly so that
:meth:`RocksDBEngine.compact_level0` can put it back)."""
_APPLIED_OFFSET_KEY: Final = b"changelog-offset"
_OFFSET: Final = struct.Struct(">q")

logger = logging.getLogger(__name__)


def new_block_cache(size_bytes: int) -> rocksdict.Cache | None:
    """An LRU block cache of ``size_bytes`` to share between engines (``None`` for 0)."""
    return rocksdict.Cache(size_bytes) if size_bytes > 0 else None


class _EndOfSource:
    """Compares false with everything: the bound tests of :meth:`RocksDBEngine.items` stop at it.

    ``(hi,) > (_END, b"")`` and ``(lo,) <= (_END, b"")`` are false (the first
    items differ, and bytes defer to these methods), and ``dropwhile``'s
    ``(hi,) <= entry`` lets it through to the ``lo`` test.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return False

    def __lt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


_END_OF_SOURCE: Final[tuple[tuple[Any, bytes]]] = ((_EndOfSource(), b""),)
"""The one sentinel entry a bounded scan appends after rocksdict's iterator."""


def _after(last: bytes | None) -> str:
    return "before its first key" if last is None else f"after key {last!r}"


class _EngineErrors:
    """``with _EngineErrors(path, operation):`` maps any rocksdict error to :class:`StoreEngineError`.

    The one home of that mapping.  A :class:`StoreEngineError` raised inside
    passes through unchanged.  A small class rather than
    ``contextlib.contextmanager`` (no generator per ``with``): it is on the
    per-commit write path.

    Thread-safety: immutable after construction; one instance per ``with``.
    """

    __slots__ = ("_operation", "_path")

    def __init__(self, path: Path, operation: str) -> None:
        self._path = path
        self._operation = operation

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, StoreEngineError):
            raise StoreEngineError(self._path, self._operation, str(exc)) from exc


def _compression(name: str) -> Any:
    kinds = rocksdict.DBCompressionType
    return {
        "none": kinds.none,
        "snappy": kinds.snappy,
        "lz4": kinds.lz4,
        "zstd": kinds.zstd,
    }[name]()


def rocksdb_options(config: RocksDBConfig, cache: rocksdict.Cache | None) -> Any:
    """The rocksdict ``Options`` every engine opens with (benchmark baselines reuse them)."""
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_atomic_flush(True)
    options.set_write_buffer_size(config.write_buffer_size_bytes)
    options.set_max_write_buffer_number(config.max_write_buffer_number)
    options.set_max_background_jobs(config.max_background_jobs)
    options.set_max_open_files(config.max_open_files)
    options.set_compression_type(_compression(config.compression))
    options.set_keep_log_file_num(2)
    options.set_level_zero_file_num_compaction_trigger(LEVEL0_COMPACTION_TRIGGER)
    if config.memtable_bloom_size_ratio > 0:
        options.set_memtable_prefix_bloom_ratio(config.memtable_bloom_size_ratio)
        options.set_memtable_whole_key_filtering(True)
    table = rocksdict.BlockBasedOptions()
    table.set_block_size(config.block_size_bytes)
    if cache is None:
        table.disable_cache()
    else:
        table.set_block_cache(cache)
    if config.bloom_filter_bits_per_key > 0:
        table.set_bloom_filter(config.bloom_filter_bits_per_key, False)
    options.set_block_based_table_factory(table)
    return options


class RocksDBEngine:
    """One RocksDB directory in raw mode (bytes keys and values).

    Invariants: ``_db`` is open until :meth:`close` (``None`` after it);
    ``_meta`` is the handle of the metadata column family of ``_db``.  See the
    module docstring for what every write and flush guarantees.

    Thread-safety: see the module docstring (reads/writes thread-safe; close is not).
    """

    def __init__(self, path: Path, db: Any, config: RocksDBConfig, label: str) -> None:
        """Use :meth:`open`."""
        self._path = path
        self._db = db
        self._config = config
        self._label = label
        self._meta = db.get_column_family_handle(META_COLUMN_FAMILY)
        # Kept for the engine's lifetime: dropping or closing a column family's
        # Rdict flushes it (rocksdict), which could persist an applied offset
        # ahead of unflushed data.  Released in close() after the data flush or
        # after RocksDB's background work is cancelled.
        self._meta_db = db.get_column_family(META_COLUMN_FAMILY)
        self._write_options = rocksdict.WriteOptions()
        # a property at run time, a method in rocksdict's stubs
        self._write_options.disable_wal = True  # type: ignore[method-assign,assignment]
        self._level0_trigger_lowered = False
        self._get = db.get
        self.lookup: Any = db.get
        """rocksdict's own ``get`` (value or ``None``), its errors **not** mapped: the hot read path.

        For a caller that keeps it in its own frame and maps any exception with
        :meth:`read_error` (:meth:`WriteBuffer.get
        <statestore.stores.buffer.WriteBuffer.get>` does): one Python frame less
        per get than :meth:`get`.  Once the
        engine is closed it raises rocksdict's ``DbClosedError``, which
        :meth:`read_error` turns into :class:`InvalidStateStoreError`.
        """

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        config: RocksDBConfig,
        cache: rocksdict.Cache | None,
        label: str = "",
        **extra: Any,
    ) -> Self:
        """Open (creating if missing) the RocksDB directory ``path`` with ``config``.

        ``label`` (store and partition) prefixes log lines; ``extra`` goes to
        the constructor of a subclass (a segmented engine's settings).
        """
        options = rocksdb_options(config, cache)
        meta_options = rocksdict.Options(raw_mode=True)
        with _EngineErrors(path, "open"):
            db = rocksdict.Rdict(
                str(path), options, column_families={META_COLUMN_FAMILY: meta_options}
            )
        logger.debug("%s: opened RocksDB at %s", label, path)
        try:
            return cls(path, db, config, label, **extra)
        except BaseException:
            db.close()
            raise

    @staticmethod
    def destroy(path: Path) -> None:
        """Delete the RocksDB directory ``path`` (it must not be open)."""
        if path.exists():
            shutil.rmtree(path)

    @property
    def path(self) -> Path:
        """The RocksDB directory."""
        return self._path

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._db is None

    def _check_open(self, operation: str) -> None:
        if self._db is None:
            raise InvalidStateStoreError(f"RocksDB at {self._path}", "closed", operation)

    def read_error(self, exc: Exception, operation: str) -> StateStoreError:
        """The typed error for ``exc``, raised by rocksdict during a read (for :attr:`lookup`'s callers).

        :class:`InvalidStateStoreError` once the engine is closed, else
        :class:`StoreEngineError` naming the directory and ``operation``; the
        caller raises it ``from exc``.
        """
        if self._db is None:
            return InvalidStateStoreError(f"RocksDB at {self._path}", "closed", operation)
        return StoreEngineError(self._path, operation, str(exc))

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or ``None``.

        A plain ``try`` (free in CPython 3.11 when nothing is raised) instead
        of :class:`_EngineErrors`, same mapping (:meth:`read_error`).
        """
        try:
            value: bytes | None = self._get(key)
        except Exception as exc:
            raise self.read_error(exc, "get") from exc
        return value

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The values of ``keys`` (``None`` where absent), in order: one RocksDB multi-get."""
        try:
            values: list[bytes | None] = self._get(keys)
        except Exception as exc:
            raise self.read_error(exc, "get") from exc
        return values

    def view(self) -> EngineView:
        """A point-in-time view of the data: lookups as of this call, whatever is written after.

        Cheap to open (one RocksDB iterator); it pins the memtables and
        files it reads until dropped, so drop it when done.
        """
        self._check_open("view")
        with _EngineErrors(self._path, "view"):
            iterator = self._db.iter()
        return EngineView(self, iterator)

    def applied_offset(self) -> int | None:
        """The next changelog offset to apply, as stored with the data (``None``: never written)."""
        self._check_open("read applied offset")
        with _EngineErrors(self._path, "read applied offset"):
            raw = self._meta_db.get(_APPLIED_OFFSET_KEY)
        if raw is None:
            return None
        if len(raw) != _OFFSET.size:
            raise StoreEngineError(
                self._path, "read applied offset", f"expected 8 bytes, found {len(raw)}"
            )
        return int(_OFFSET.unpack(raw)[0])

    def meta(self, key: bytes) -> bytes | None:
        """A metadata entry written by ``write(..., meta=)`` (``None``: never written)."""
        self._check_open("read metadata")
        with _EngineErrors(self._path, "read metadata"):
            value: bytes | None = self._meta_db.get(key)
        return value

    def write(
        self,
        records: Iterable[tuple[bytes, bytes | None]] | Mapping[bytes, bytes | None],
        applied_offset: int,
        *,
        meta: Mapping[bytes, bytes] | None = None,
    ) -> None:
        """Apply ``records`` (pairs or a mapping; ``None`` value: delete) and the applied offset in one WriteBatch.

        ``meta`` entries go to the metadata column family in the same WriteBatch
        (the applied offset's own key is reserved).  A record whose key is not
        ``bytes`` raises ``KeyError`` (rocksdict's raw mode) before anything is
        written; restore reports it as a record without a key.

        The compiled fill (``_put.c``, for a list) hands RocksDB the records in
        key order, a repeated key's writes in their own order (a stable sort),
        so the result is the same as in list order.  RocksDB's memtable (a skip
        list) takes keys in order far faster: each insert starts its search
        where the last one ended and finds those nodes in the CPU's cache
        (docs/performance.md, "Measurements behind the store layers").
        """
        self._check_open("write")
        batch = rocksdict.WriteBatch(raw_mode=True)
        if _FILL is not None and (type(records) is list or type(records) is dict):
            _FILL(batch, records)  # the loop below, in C (``_put.c``), in key order
        else:
            put = batch.put
            delete = batch.delete
            for key, value in records.items() if isinstance(records, Mapping) else records:
                if value is None:
                    delete(key)
                else:
                    put(key, value)
        if meta:
            self.write_batch(batch, applied_offset, meta=meta)
            return
        # write_batch without metadata, spelled out: one frame less on every commit
        batch.put(_APPLIED_OFFSET_KEY, _OFFSET.pack(applied_offset), self._meta)
        try:
            self._db.write(batch, self._write_options)
            if self._level0_trigger_lowered:
                self._restore_level0_trigger()
        except Exception as exc:
            if isinstance(exc, StoreEngineError):
                raise
            raise StoreEngineError(self._path, "write", str(exc)) from exc

    @staticmethod
    def fill_batch(batch: Any, records: list[tuple[bytes, bytes | None]]) -> None:
        """Put ``records`` (``None`` value: delete) into ``batch`` (a raw-mode ``WriteBatch``).

        In key order, a repeated key's writes in their own order, with the
        compiled fill when it is built (see :meth:`write`); a layer that
        builds its own batch (the segmented engine's) fills it here.
        """
        if _FILL is not None:
            _FILL(batch, records)
            return
        put = batch.put
        delete = batch.delete
        for key, value in records:
            if value is None:
                delete(key)
            else:
                put(key, value)

    def write_batch(
        self, batch: Any, applied_offset: int, *, meta: Mapping[bytes, bytes] | None = None
    ) -> None:
        """Add ``meta`` entries and the applied offset to ``batch`` (a raw-mode ``WriteBatch``) and write it, WAL off."""
        self._check_open("write")
        if meta:
            if _APPLIED_OFFSET_KEY in meta:
                raise ValueError(f"metadata key {_APPLIED_OFFSET_KEY!r} is reserved")
            for meta_key, meta_value in meta.items():
                batch.put(meta_key, meta_value, self._meta)
        batch.put(_APPLIED_OFFSET_KEY, _OFFSET.pack(applied_offset), self._meta)
        with _EngineErrors(self._path, "write"):
            self._db.write(batch, self._write_options)
            if self._level0_trigger_lowered:
                self._restore_level0_trigger()

    def compact_level0(self) -> bool:
        """Have RocksDB compact level 0 now, in its own background threads; whether there was any.

        For the end of a full restore.  The restore's memtable flushes leave
        up to ``LEVEL0_COMPACTION_TRIGGER - 1`` files in level 0, and until
        RocksDB compacts them (after more writes) every get probes each of them
        before the last level (docs/performance.md, "Measurements behind the
        store layers").  Lowering ``level0_file_num_compaction_trigger`` to 1 makes RocksDB
        schedule that compaction at once; nothing waits for it.  The first write after it has
        finished (level 0 is empty) puts the trigger back to
        :data:`LEVEL0_COMPACTION_TRIGGER` (until then a flush is compacted at once too).  A close meanwhile
        cancels it as RocksDB cancels any background compaction.
        """
        self._check_open("compact")
        with _EngineErrors(self._path, "compact"):
            if not self._db.property_int_value("rocksdb.num-files-at-level0"):
                return False
            self._db.set_options({"level0_file_num_compaction_trigger": "1"})
        self._level0_trigger_lowered = True
        logger.debug("%s: compacting level 0 in the background", self._label)
        return True

    def _restore_level0_trigger(self) -> None:
        """:meth:`compact_level0`'s end, from a write: the trigger back once level 0 is empty.

        Level 0 empties when the compaction has installed its output (its
        files are gone from level 0 only then); RocksDB's pending and running
        counters are not waited for, as other levels may keep them non-zero.
        """
        db = self._db
        if db.property_int_value("rocksdb.num-files-at-level0"):
            return
        db.set_options({"level0_file_num_compaction_trigger": str(LEVEL0_COMPACTION_TRIGGER)})
        self._level0_trigger_lowered = False

    @property
    def level0_compaction_requested(self) -> bool:
        """Whether :meth:`compact_level0`'s lowered trigger is still in place."""
        return self._level0_trigger_lowered

    def items(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        key_size_bytes: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key < hi`` (``None``: unbounded) in key order, or reversed.

        With ``key_size_bytes``, only the keys of exactly that length (a
        Python test per entry here; the segmented engine uses it to open
        fewer segments).

        Bounds are applied with ``itertools`` on the iterator rather than with
        RocksDB's ``iterate_upper_bound``: rocksdict does not keep the bound's
        bytes alive (0.3.29's ``ReadOptionsPy.to_read_opt`` hands RocksDB a
        pointer into a buffer it frees right after), and a freed bound silently
        cuts a scan short.

        The bound test runs in C, with no Python call per entry: an entry
        ``(key, value)`` compares with the one-element tuple ``(hi,)`` by
        ``key`` first, and when ``key == hi`` the longer tuple is the greater,
        so ``(hi,) > entry`` holds exactly when ``key < hi`` and
        ``(lo,) <= entry`` exactly when ``key >= lo`` (no ``lambda`` per entry).

        **A scan that RocksDB cuts short raises.** rocksdict's iterators end
        on an invalid RocksDB iterator and never look at its status, so a
        corrupted block or an I/O error mid-scan looks like the end of the
        range (rocksdict 0.3.29; docs/performance.md, "Measurements behind
        the store layers").  Once the scan's
        entries are exhausted it is checked once (:meth:`_check_scan_end`,
        from :meth:`_scan`); a cut raises :class:`StoreEngineError`
        (operation ``iterate``) naming the store partition, the directory and
        the last key returned.
        """
        self._check_open("iterate")
        with _EngineErrors(self._path, "iterate"):
            sequence = self._db.latest_sequence_number()  # before the iterator is made
            if reverse:
                source = self._db.items(backwards=True, from_key=hi)
            else:
                source = self._db.items(from_key=lo)
        entries: Iterator[tuple[bytes, bytes]] = iter(source)
        tail = None  # with a bound test: the sentinel entry after rocksdict's last one
        if reverse:
            if lo is not None:
                tail = iter(_END_OF_SOURCE)
                entries = itertools.chain(entries, tail)
            if hi is not None:  # the seek lands on the last key <= hi: drop key >= hi
                entries = itertools.dropwhile((hi,).__le__, entries)
            if lo is not None:  # keep key >= lo
                entries = itertools.takewhile((lo,).__le__, entries)
        elif hi is not None:  # keep key < hi
            tail = iter(_END_OF_SOURCE)
            entries = itertools.takewhile((hi,).__gt__, itertools.chain(entries, tail))
        scan = itertools.chain.from_iterable(
            self._scan(entries, tail, sequence, lo, hi, reverse=reverse)
        )
        if key_size_bytes is None:
            return scan
        return (entry for entry in scan if len(entry[0]) == key_size_bytes)

    def _scan(
        self,
        entries: Iterator[tuple[bytes, bytes]],
        tail: Iterator[Any] | None,
        sequence: int,
        lo: bytes | None,
        hi: bytes | None,
        *,
        reverse: bool,
    ) -> Iterator[Iterator[tuple[bytes, bytes]]]:
        """The scan's entries as one iterator, then the end-of-scan check (once they are exhausted).

        ``deque.append`` returns ``None``, so ``filterfalse`` passes every
        entry on and keeps the last one in ``last``: in C, with no Python
        call per entry.  The check is skipped when the bound test stopped at
        a key out of range: ``tail`` still holds the sentinel, so rocksdict's
        iterator was valid past the last key returned (most bounded scans end
        so; the check's seek costs ~10% of a 100-key scan here, ~4% of a
        store's ``range`` with values decoded).  The exhausted
        iterators are dropped before the check: rocksdict's holds RocksDB
        open, and the traceback of an error raised here holds this frame.
        """
        last: collections.deque[tuple[bytes, bytes]] = collections.deque(maxlen=1)
        passed = itertools.filterfalse(last.append, entries)
        del entries
        yield passed
        del passed
        if tail is None or next(tail, None) is None:
            self._check_scan_end(last[0][0] if last else None, sequence, lo, hi, reverse=reverse)

    def _check_scan_end(
        self,
        last: bytes | None,
        sequence: int,
        lo: bytes | None,
        hi: bytes | None,
        *,
        reverse: bool,
    ) -> None:
        """Raise unless the scan that returned up to ``last`` (``None``: nothing) is whole.

        One seek of a fresh iterator to where the scan stopped:

        * RocksDB's error (``status()`` raises: the same corrupted block or
          failing file the scan met) raises;
        * a key in ``[lo, hi)`` after ``last`` raises if nothing was written
          since the scan began (RocksDB's ``sequence`` number unchanged, so
          both iterators see the same data): the scan lost it to an error
          that did not come back.  After a write that key may be new, so it
          does not raise; only the status check applies then.  (rocksdict
          0.3.29's ``Snapshot`` iterators ignore the snapshot, like the
          upper bound, so a snapshot cannot pin the second iterator's view.)
        """
        it: Any = None
        try:
            it = self._db.iter()
            if reverse:
                bound = hi if last is None else last  # both excluded
                if bound is None:
                    it.seek_to_last()
                else:
                    it.seek_for_prev(bound)
                    if it.valid() and it.key() == bound:
                        it.prev()
                cut = it.valid() and (lo is None or it.key() >= lo)
            else:
                bound = lo if last is None else last  # ``lo`` included, ``last`` excluded
                if bound is None:
                    it.seek_to_first()
                else:
                    it.seek(bound)
                    if last is not None and it.valid() and it.key() == last:
                        it.next()
                cut = it.valid() and (hi is None or it.key() < hi)
            if not cut:
                it.status()  # raises RocksDB's error, if the iterator stopped on one
            follows = it.key() if cut else None
            cut = cut and self._db.latest_sequence_number() == sequence
        except Exception as exc:
            it = None  # it holds RocksDB open; the traceback holds this frame
            if self._db is None:
                raise self.read_error(exc, "iterate") from exc
            raise StoreEngineError(
                self._path, "iterate", f"{self._scan_name()} cut short {_after(last)}: {exc}"
            ) from exc
        it = None
        if cut:
            raise StoreEngineError(
                self._path,
                "iterate",
                f"{self._scan_name()} ended early {_after(last)}: key {follows!r} follows in range",
            )

    def _scan_name(self) -> str:
        return f"{self._label} scan" if self._label else "scan"

    def is_empty(self) -> bool:
        """Whether the data column family holds no entry (one seek)."""
        return next(self.items(), None) is None

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate of the number of keys (``rocksdb.estimate-num-keys``)."""
        self._check_open("property")
        with _EngineErrors(self._path, "property"):
            return int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def request_data_flush(self) -> None:
        """Seal the data column family's memtable and flush it in the background (no wait).

        The sealed memtable holds every write made before this call; the
        metadata column family (the applied offset) is not flushed.
        """
        self._check_open("flush")
        with _EngineErrors(self._path, "flush"):
            self._db.flush(False)

    def data_flush_pending(self) -> bool:
        """Whether the data column family still has a sealed memtable that is not on disk.

        ``False`` means every write made before the last
        :meth:`request_data_flush` (or any earlier seal) is in SST files.
        """
        self._check_open("property")
        with _EngineErrors(self._path, "property"):
            sealed = self._db.property_int_value("rocksdb.num-immutable-mem-table")
        return bool(sealed)

    def persist_applied_offset(self, durable: int, *, current: int) -> None:
        """Make ``durable`` the applied offset on disk, then restore ``current`` in memory.

        The caller guarantees that the data up to ``durable`` is already on disk
        (see :meth:`data_flush_pending`), so the flushed offset is never ahead of
        the flushed data (it may be behind: replaying again is idempotent).
        Writes ``durable``, flushes the metadata column family (a few bytes)
        and waits, then writes ``current`` (the applied offset of the data
        written since), which the next flush persists.
        """
        self._check_open("flush applied offset")
        durable_batch = rocksdict.WriteBatch(raw_mode=True)
        durable_batch.put(_APPLIED_OFFSET_KEY, _OFFSET.pack(durable), self._meta)
        current_batch = rocksdict.WriteBatch(raw_mode=True)
        current_batch.put(_APPLIED_OFFSET_KEY, _OFFSET.pack(current), self._meta)
        with _EngineErrors(self._path, "flush applied offset"):
            self._db.write(durable_batch, self._write_options)
            self._meta_db.flush(True)
            self._db.write(current_batch, self._write_options)

    def flush(self) -> None:
        """Flush the memtables to SST files and wait: data first, then the metadata."""
        self._check_open("flush")
        with _EngineErrors(self._path, "flush"):
            self._db.flush(True)
            self._meta_db.flush(True)

    def checkpoint(self, directory: Path) -> None:
        """Write a RocksDB checkpoint (a consistent, openable copy, flushed first) to ``directory``.

        ``directory`` must not exist.  Files are hard-linked where possible.
        """
        self._check_open("checkpoint")
        with _EngineErrors(self._path, "checkpoint"):
            rocksdict.Checkpoint(self._db).create_checkpoint(str(directory))

    def close(self, *, flush: bool = True) -> None:
        """Flush (unless told not to), cancel background work and release RocksDB's lock.

        Idempotent.  ``flush=False`` (a failed store, a simulated crash) skips
        the explicit flush; RocksDB may still flush at shutdown, which is
        harmless: the stored offset is never ahead of the data, and the
        changelog restores the rest.
        """
        if self._db is None:
            return
        db, self._db = self._db, None
        meta_db, self._meta_db = self._meta_db, None
        self._meta = None
        self._get = None
        self.lookup = None
        try:
            with _EngineErrors(self._path, "close"):
                if flush:
                    db.flush(True)
                    meta_db.flush(True)
                # Stops compactions and (having flushed) releases the LOCK file as soon
                # as the handle is dropped; close() then reports "shutdown in progress".
                db.cancel_all_background(True)
        finally:
            del meta_db  # after the cancel (or the flush): its flush-on-drop is harmless
            try:
                db.close()
            except Exception as exc:  # noqa: BLE001 - expected after cancel_all_background
                logger.debug("%s: RocksDB close after cancel: %s", self._label, exc)
            del db
        logger.debug("%s: closed RocksDB at %s", self._label, self._path)


class EngineView:
    """A point-in-time view of one engine's data (see :meth:`RocksDBEngine.view`).

    Invariants: ``_iterator`` is a RocksDB iterator created by the view's
    engine; every lookup reads at the implicit snapshot it pinned when created.

    Thread-safety: not thread-safe (one iterator moved by every lookup); a
    caller that shares a view holds a lock around its lookups.
    """

    __slots__ = ("_engine", "_iterator")

    def __init__(self, engine: RocksDBEngine, iterator: Any) -> None:
        """Use :meth:`RocksDBEngine.view`."""
        self._engine = engine
        self._iterator = iterator

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The values of ``keys`` (``None`` where absent) as of the view's moment, in order.

        One seek per key.  A RocksDB error, or a closed engine, raises the
        engine's typed error (:meth:`RocksDBEngine.read_error`).
        """
        it = self._iterator
        values: list[bytes | None] = []
        append = values.append
        try:
            for key in keys:
                it.seek(key)
                if it.valid() and it.key() == key:
                    append(it.value())
                else:
                    it.status()  # raises RocksDB's error if the seek stopped on one
                    append(None)
        except Exception as exc:
            raise self._engine.read_error(exc, "get") from exc
        return values

    def close(self) -> None:
        """Release the iterator (and what it pins); idempotent."""
        self._iterator = None
