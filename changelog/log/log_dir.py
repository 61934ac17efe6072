"""A partition directory: its name (``<topic>-<partition>``), taking it over and handing it back.

Opening runs, in order: parse the name; create the directory if it is missing
and any missing parent (fsyncing each parent, so the new entries survive a power cut); take the directory
lock (:mod:`changelog.fs.lock`); run the loader's recovery passes
(:mod:`changelog.log.loader`).  If anything after the lock fails, the lock is
released again.  Closing writes what the next open trusts: steps C3-C5 of
``Log.close`` (the clean-shutdown marker last, so a crash before it makes the
next open recover).

Thread-safety: pure functions; :func:`open_partition_dir` must not run twice
at once for one directory (the lock makes the second one fail).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from changelog.config import LogConfig
from changelog.errors import ChangelogError, InvalidConfigError
from changelog.fs import files
from changelog.fs.checkpoint import LOG_START_OFFSET_CHECKPOINT, write_offset_checkpoint
from changelog.fs.files import CLEAN_SHUTDOWN_FILE
from changelog.fs.lock import DirectoryLock
from changelog.limits import INT32_MAX
from changelog.log.loader import LoadedLog, load_log
from changelog.log.log_segments import LogSegments
from changelog.record.header import HEADER, BatchHeader
from changelog.record.reader import decode_header

__all__ = [
    "close_partition_dir",
    "open_partition_dir",
    "parse_topic_partition",
    "peek_batch_headers",
]

_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names
_PARTITION: Final = re.compile(r"[0-9]{1,10}")


def parse_topic_partition(directory: Path) -> tuple[str, int]:
    """``("orders", 3)`` for a directory named ``orders-3``; a typed error otherwise.

    The topic must be a legal Kafka topic name (1-249 of ``[a-zA-Z0-9._-]``)
    and the partition a non-negative int32.
    """
    topic, sep, number = directory.name.rpartition("-")
    if (
        not sep
        or not _TOPIC.fullmatch(topic)
        or not _PARTITION.fullmatch(number)
        or int(number) > INT32_MAX
    ):
        raise InvalidConfigError(
            "directory", str(directory), "a partition directory must be named <topic>-<partition>"
        )
    return topic, int(number)


def open_partition_dir(
    directory: Path, *, config: LogConfig, now_ms: int
) -> tuple[str, int, DirectoryLock, LoadedLog]:
    """Topic, partition, the held directory lock and the loaded segments of ``directory``.

    Raises :class:`~changelog.errors.LogLockedError` if another owner holds it.
    """
    topic, partition = parse_topic_partition(directory)
    files.make_dirs(directory, "open.mkdir")  # each new directory's parent fsynced
    dir_lock = DirectoryLock(directory)
    dir_lock.acquire()
    try:
        loaded = load_log(directory, config=config, topic=topic, partition=partition, now_ms=now_ms)
    except BaseException:
        dir_lock.release()
        raise
    return topic, partition, dir_lock, loaded


def close_partition_dir(
    directory: Path, *, topic: str, partition: int, log_start_offset: int, segments: LogSegments
) -> None:
    """Steps C3-C5 of ``Log.close``: the log-start-offset checkpoint, the pending ``.deleted``
    files, the clean-shutdown marker (the caller then closes the segments and the lock)."""
    write_offset_checkpoint(
        directory / LOG_START_OFFSET_CHECKPOINT, topic, partition, log_start_offset
    )  # C3
    segments.delete_expired(everything=True)  # C4
    files.atomic_write(directory / CLEAN_SHUTDOWN_FILE, b"", "close.marker")  # C5


def peek_batch_headers(directory: Path) -> Iterator[tuple[Path, int, BatchHeader]]:
    """``(.log file, position, header)`` of the batches of ``directory``, read-only, unlocked.

    For questions asked before (or instead of) opening a log, such as whether a
    partition ever held transactional batches: no lock, no recovery, no CRC
    check (a header is believed as it reads).  Each ``.log`` file (in base offset
    order) is read up to its first header that does not decode or does not fit
    (a torn tail, damage: the loader's business); a file that vanishes meanwhile
    is skipped.  A missing directory has no batches.
    """
    try:
        children = sorted(directory.iterdir())
    except FileNotFoundError:
        return
    for path in children:
        parsed = files.parse_base_offset(path.name)
        if parsed is None or parsed[1] != files.LOG_SUFFIX or parsed[2]:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            size = os.fstat(fd).st_size
            position = 0
            while position + HEADER.size <= size:
                raw = os.pread(fd, HEADER.size, position)
                try:
                    header = decode_header(
                        raw, 0, path=path, end=size - position, file_position=position
                    )
                except ChangelogError:
                    break
                yield path, position, header
                position += header.size_in_bytes
        finally:
            os.close(fd)
