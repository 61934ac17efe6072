"""Read-only views of a state directory for the CLI: its stores, partitions and their figures.

Layout (see :mod:`statestore.manager`)::

    <state_dir>/.lock
    <state_dir>/<store>-changelog-<p>/    Kafka partition directory of topic <store>-changelog
    <state_dir>/<store>-rocksdb-<p>/      the RocksDB of that partition

:func:`scan_partition` reads a partition's files directly, without opening
the log: it takes no lock, runs no recovery and changes nothing, so it works
next to a running service (whose figures may move meanwhile).

Thread-safety: plain functions over the file system.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, cast

import attrs

from changelog.config import LogConfig
from changelog.errors import CorruptRecordError, UnsupportedFormatError
from changelog.fs.checkpoint import CLEANER_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from changelog.fs.checkpoint import LOG_START_OFFSET_CHECKPOINT as LOG_START_CHECKPOINT
from changelog.fs.files import CLEAN_SHUTDOWN_FILE, LOG_SUFFIX, parse_base_offset
from changelog.fs.lock import LOCK_FILE_NAME as LOCK_FILE
from changelog.record.batch import decode_header, decode_key_values, decode_records
from statestore.cli.errors import UsageError
from statestore.stores.metadata import StoreMetadata, read_metadata
from statestore.stores.spec import rocksdb_dir

__all__ = [
    "PartitionInfo",
    "SegmentInfo",
    "StorePartitions",
    "find_partitions",
    "find_stores",
    "is_partition_dir",
    "lock_holder",
    "mapped",
    "read_checkpoint_offset",
    "recorded_log_config",
    "recorded_metadata",
    "scan_partition",
    "select_stores",
]

_MAX_DEPTH: Final = 4
_CHANGELOG_DIR = re.compile(r"^(?P<store>.+)-changelog-(?P<partition>\d+)$")


@attrs.frozen
class StorePartitions:
    """One store of a state directory: its name and its partitions' directories."""

    name: str
    changelog_dirs: tuple[Path, ...]
    rocksdb_dirs: tuple[Path, ...]

    @property
    def partitions(self) -> int:
        """Number of changelog partitions."""
        return len(self.changelog_dirs)


def find_stores(state_dir: Path) -> dict[str, StorePartitions]:
    """The stores of ``state_dir`` by name (from its ``<store>-changelog-<p>`` directories).

    Raises :class:`UsageError` when ``state_dir`` is missing or holds no store,
    or when a store's partitions are not numbered ``0..N-1`` or disagree with
    the count recorded in its metadata file.
    """
    if not state_dir.exists():
        raise UsageError(f"{state_dir}: no such directory")
    if not state_dir.is_dir():
        raise UsageError(f"{state_dir}: not a directory")
    partitions: dict[str, dict[int, Path]] = {}
    for child in state_dir.iterdir():
        match = _CHANGELOG_DIR.match(child.name)
        if match and child.is_dir():
            partitions.setdefault(match["store"], {})[int(match["partition"])] = child
    if not partitions:
        hint = ""
        if _CHANGELOG_DIR.match(state_dir.resolve().name):
            hint = " (this is a changelog partition directory: give its parent)"
        raise UsageError(
            f"{state_dir}: not a state directory (no <store>-changelog-<p> directories){hint}"
        )
    stores: dict[str, StorePartitions] = {}
    for name, by_number in sorted(partitions.items()):
        numbers = sorted(by_number)
        meta = read_metadata(state_dir, name)
        if meta is not None and numbers != list(range(meta.partitions)):
            raise UsageError(
                f"{state_dir}: store {name!r} has changelog partitions {numbers}, but its "
                f"metadata records {meta.partitions} (see docs/operations.md, 'Store metadata')"
            )
        if numbers != list(range(len(numbers))):
            raise UsageError(
                f"{state_dir}: store {name!r} has changelog partitions {numbers}, "
                f"expected 0..{len(numbers) - 1}"
            )
        stores[name] = StorePartitions(
            name=name,
            changelog_dirs=tuple(by_number[n] for n in numbers),
            rocksdb_dirs=tuple(rocksdb_dir(state_dir, name, n) for n in numbers),
        )
    return stores


def recorded_metadata(partition_dir: Path) -> StoreMetadata | None:
    """The metadata of the store a ``<store>-changelog-<p>`` directory belongs to, if recorded.

    Read from ``<parent>/<store>.metadata.json``; ``None`` for a directory of
    another name or without the file.  A damaged file raises
    :class:`~statestore.errors.CorruptStoreMetadataError` (the open would too).
    """
    match = _CHANGELOG_DIR.match(partition_dir.name)
    if match is None:
        return None
    return read_metadata(partition_dir.parent, match["store"])


def recorded_log_config(partition_dir: Path) -> LogConfig | None:
    """The changelog settings recorded for ``partition_dir``'s store (see :func:`recorded_metadata`)."""
    meta = recorded_metadata(partition_dir)
    return None if meta is None else meta.log_config


def is_partition_dir(path: Path) -> bool:
    """Whether ``path`` holds at least one ``<20-digit offset>.log`` file."""
    try:
        return path.is_dir() and any(
            (parsed := parse_base_offset(child.name)) is not None and parsed[1] == LOG_SUFFIX
            for child in path.iterdir()
        )
    except OSError:
        return False


def find_partitions(path: Path) -> list[Path]:
    """``path`` itself if it is a partition directory, else every partition directory below it."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory (give a state or partition directory)")
    if is_partition_dir(path):
        return [path]
    found: list[Path] = []

    def walk(directory: Path, depth: int) -> None:
        for child in sorted(directory.iterdir()):
            if not child.is_dir() or child.is_symlink():
                continue
            if is_partition_dir(child):
                found.append(child)
            elif depth < _MAX_DEPTH:
                walk(child, depth + 1)

    walk(path, 1)
    if not found:
        raise UsageError(f"{path}: no changelog partitions found (no <offset>.log files)")
    return found


@contextlib.contextmanager
def mapped(path: Path) -> Iterator[bytes]:
    """The file's bytes, memory-mapped read-only (segments can be 1 GiB: never copied whole).

    Slicing the map copies only the slice.  An empty file gives ``b""``.
    Raises :class:`UsageError` if the file vanished (the cleaner may delete
    segments while a read-only command runs) or cannot be read.
    """
    try:
        with path.open("rb") as file:
            if os.fstat(file.fileno()).st_size == 0:
                yield b""
                return
            view = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file (deleted by the cleaner meanwhile?)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        yield cast(bytes, view)  # supports len(), slicing and the buffer protocol like bytes
    finally:
        with contextlib.suppress(BufferError):  # a view still exported: the GC closes it
            view.close()


def lock_holder(directory: Path) -> str | None:
    """``"pid N"`` (or ``"another process"``) if someone holds ``directory/.lock``, else ``None``.

    Probes with a shared non-blocking ``flock`` on a read-only descriptor:
    creates nothing and writes nothing.
    """
    path = directory / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return f"pid {text}" if text.isdigit() else "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def read_checkpoint_offset(path: Path) -> int | None:
    """The (single) offset in a Kafka text checkpoint file, ``None`` if absent or unreadable."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if len(lines) < 3 or lines[0].strip() != "0":
        return None
    parts = lines[2].split(" ")
    try:
        return int(parts[-1])
    except ValueError:
        return None


@attrs.frozen
class SegmentInfo:
    """One segment as found on disk."""

    base_offset: int
    size_bytes: int
    batches: int
    records: int
    next_offset: int


@attrs.define
class PartitionInfo:
    """Figures of one changelog partition, read from its files.

    ``log_end_offset`` is the next offset after the last whole batch;
    ``first_dirty_offset`` comes from the cleaner checkpoint (log start when
    absent); the dirty ratio is Kafka's ``dirty bytes / (clean + dirty bytes)``
    over the non-active segments; ``live_keys`` and ``tombstones`` are the
    keys whose latest record has a value or is a tombstone (``None`` when not
    counted); ``invalid_bytes`` are bytes after the last whole batch of a
    segment (a torn tail; ``statestore verify`` says more), except the zeros the last
    segment holds ahead of its data (``preallocated_bytes``).  ``records`` counts
    data records only; ``markers`` the transaction markers (COMMIT/ABORT control
    records), which are never records of the store.
    """

    directory: Path
    segments: list[SegmentInfo] = attrs.field(factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    recovery_point: int | None = None
    first_dirty_offset: int = 0
    clean_bytes: int = 0
    dirty_bytes: int = 0
    records: int = 0
    markers: int = 0
    live_keys: int | None = None
    tombstones: int | None = None
    expired_keys: int | None = None
    """Of ``live_keys``, those whose value has expired (a store with a TTL; else ``None``)."""
    invalid_bytes: int = 0
    preallocated_bytes: int = 0
    """Zeros after the last whole batch of the last segment: the active segment's space
    allocated ahead of its data (``LogConfig.preallocate``), not damage."""
    clean_shutdown: bool = False

    @property
    def size_bytes(self) -> int:
        """Total bytes of the ``.log`` files."""
        return sum(segment.size_bytes for segment in self.segments)

    @property
    def dirty_ratio(self) -> float:
        """``dirty / (clean + dirty)`` bytes of the cleanable (non-active) segments."""
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def zero_tail(data: bytes | mmap.mmap, position: int) -> bool:
    """Whether ``data`` holds only zeros from ``position`` on (a log's preallocated space)."""
    return data[position:].count(0) == len(data) - position


def _log_files(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for child in directory.iterdir():
        parsed = parse_base_offset(child.name)
        if parsed is not None and parsed[1] == LOG_SUFFIX and not parsed[2]:
            found.append((parsed[0], child))
    return sorted(found)


def scan_partition(
    directory: Path,
    *,
    count_keys: bool,
    advance: Callable[[int], None] = lambda _n: None,
    expiry_cutoff_ms: int | None = None,
) -> PartitionInfo:
    """Read one partition directory's figures (see :class:`PartitionInfo`); read-only.

    With ``count_keys`` every record's key is read (values are not decoded) to
    count live keys and tombstones: one pass over the whole log.  With
    ``expiry_cutoff_ms`` too (a store with a TTL) each record's timestamp is
    read as well, and live keys whose value is stamped at or before the cutoff
    are counted as expired.  ``advance`` is called with the bytes read, for a
    progress display.
    """
    info = PartitionInfo(directory)
    info.clean_shutdown = (directory / CLEAN_SHUTDOWN_FILE).exists()
    latest: dict[bytes | None, bool] = {}
    stamps: dict[bytes | None, int] = {}
    files = _log_files(directory)
    for number, (base, path) in enumerate(files, start=1):
        with mapped(path) as data:
            position = batches = records = 0
            next_offset = base
            while position < len(data):
                try:
                    header = decode_header(data, position, path=path)
                except (CorruptRecordError, UnsupportedFormatError):
                    break
                if count_keys and not header.is_control:
                    raw = data[position : position + header.size_in_bytes]
                    try:
                        if expiry_cutoff_ms is None:
                            for _offset, key, value in decode_key_values(
                                raw, path=path, position=position, validate=False
                            ):
                                latest[key] = value is not None
                        else:
                            for record in decode_records(
                                raw, path=path, position=position, validate=False
                            ):
                                latest[record.key] = record.value is not None
                                stamps[record.key] = record.timestamp_ms
                    except (CorruptRecordError, UnsupportedFormatError):
                        pass  # verify reports it; the counts just miss this batch
                batches += 1
                if header.is_control:
                    info.markers += header.records_count
                else:
                    records += header.records_count
                next_offset = header.next_offset
                position += header.size_in_bytes
                advance(header.size_in_bytes)
            size = len(data)
            tail = size - position
            if tail and number == len(files) and zero_tail(data, position):
                info.preallocated_bytes = tail  # the active segment's zeros: not damage
                tail = 0
        advance(size - position)
        info.invalid_bytes += tail
        info.records += records
        info.segments.append(SegmentInfo(base, size, batches, records, next_offset))
    if info.segments:
        info.log_end_offset = info.segments[-1].next_offset
        info.log_start_offset = info.segments[0].base_offset
    start = read_checkpoint_offset(directory / LOG_START_CHECKPOINT)
    if start is not None and start > info.log_start_offset:
        info.log_start_offset = start
    info.recovery_point = read_checkpoint_offset(directory / RECOVERY_POINT_CHECKPOINT)
    dirty = read_checkpoint_offset(directory / CLEANER_CHECKPOINT)
    info.first_dirty_offset = max(dirty if dirty is not None else 0, info.log_start_offset)
    for index, segment in enumerate(info.segments[:-1]):  # the active segment is never cleaned
        if info.segments[index + 1].base_offset <= info.first_dirty_offset:
            info.clean_bytes += segment.size_bytes
        else:
            info.dirty_bytes += segment.size_bytes
    if count_keys:
        info.live_keys = sum(1 for live in latest.values() if live)
        info.tombstones = len(latest) - info.live_keys
        if expiry_cutoff_ms is not None:
            info.expired_keys = sum(
                1 for key, live in latest.items() if live and stamps[key] <= expiry_cutoff_ms
            )
    return info


def select_stores(
    stores: dict[str, StorePartitions], name: str | None, state_dir: Path
) -> list[StorePartitions]:
    """The stores of ``stores`` named ``name`` (all when ``None``); UsageError for an unknown name."""
    if name is None:
        return list(stores.values())
    if name not in stores:
        known = ", ".join(sorted(stores)) or "none"
        raise UsageError(f"{state_dir}: no store named {name!r} (stores: {known})")
    return [stores[name]]
