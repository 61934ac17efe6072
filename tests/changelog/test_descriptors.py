"""Segments hold no file descriptors until used (Kafka opens its indexes lazily).

A store whose cleaner stopped for a while can have thousands of segments; with
three descriptors each it could not be opened under the usual 1,024-descriptor
limit.  Only the active segment keeps descriptors; the others open their
``.log`` while a reader reads it and their indexes while they are written.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import msgpack
import pytest

from changelog import Log, LogConfig
from changelog.fs import files
from changelog.fs.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    write_offset_checkpoint,
)

SEGMENTS = 10_000
LIMIT = 1024
SMALL = LogConfig(segment_bytes=100, flush_messages=10**9)


def open_fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


def build_partition(directory: Path, segments: int) -> None:
    """``segments`` one-batch segments (one key, ``"key"`` -> msgpack 1), shut down cleanly.

    One real segment is written by a ``Log``; the others are its files with the base
    offset (outside the CRC) patched, as fast as the test needs them.
    """
    template = directory.parent / "template-0"
    with Log.open(template, SMALL) as log:
        log.append([(b"key", msgpack.packb(1))])
        log.roll()
    names = {
        suffix: (template / files.segment_file_name(0, suffix)).read_bytes()
        for suffix in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)
    }
    directory.mkdir()
    for base in range(segments):
        batch = bytearray(names[files.LOG_SUFFIX])
        struct.pack_into(">q", batch, 0, base)
        (directory / files.segment_file_name(base, files.LOG_SUFFIX)).write_bytes(batch)
        for suffix in (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX):
            (directory / files.segment_file_name(base, suffix)).write_bytes(names[suffix])
    topic, partition = directory.name.rsplit("-", 1)
    for name, offset in ((RECOVERY_POINT_CHECKPOINT, segments), (LOG_START_OFFSET_CHECKPOINT, 0)):
        write_offset_checkpoint(directory / name, topic, int(partition), offset)
    (directory / files.CLEAN_SHUTDOWN_FILE).write_bytes(b"")


CHILD = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))
    from statestore import StateManager
    with StateManager(sys.argv[1]) as manager:
        store = manager.store("big")
        assert store.get("key") == 1, store.get("key")
        assert dict(store.items()) == {{"key": 1}}
        changelog = store.changelogs[0]
        assert len(changelog.segments) >= {segments}, len(changelog.segments)
        for n in range(50):
            store.put(f"new-{{n}}", n)
            manager.commit()
    with StateManager(sys.argv[1]) as manager:
        assert manager.store("big").get("new-49") == 49
    print("ok")
    """
)


def test_a_store_of_10000_segments_opens_under_1024_descriptors(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    build_partition(state / "big-changelog-0", SEGMENTS)
    code = CHILD.format(limit=LIMIT, segments=SEGMENTS)
    result = subprocess.run(
        [sys.executable, "-c", code, str(state)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_inactive_segments_hold_no_descriptors_before_during_or_after_reads(
    tmp_path: Path,
) -> None:
    before = open_fds()
    with Log.open(tmp_path / "t-0", SMALL) as log:
        for n in range(300):
            log.append([(b"k%d" % (n % 7), b"v" * 50)])
        assert len(log.segments) > 250
        assert open_fds() - before < 10  # the active segment and the directory lock
        inactive = log.segments[:-1]
        assert not any(segment.offset_index.is_open for segment in inactive)
        peak = 0
        for count, _record in enumerate(log.read(0)):
            if count % 20 == 0:
                peak = max(peak, open_fds() - before)
        assert peak < 10, peak  # one segment's .log at a time
        assert open_fds() - before < 10
    with Log.open(tmp_path / "t-0", SMALL) as log:
        assert open_fds() - before < 10
        assert sum(1 for _ in log.read(0)) == 300


@pytest.mark.parametrize("action", ["retention", "close"])
def test_a_pinned_reader_reads_what_it_pinned_after_the_file_is_renamed_or_deleted(
    tmp_path: Path, action: str
) -> None:
    config = LogConfig(
        segment_bytes=100,
        flush_messages=10**9,
        cleanup_policy="delete",
        retention_bytes=150,
        file_delete_delay_ms=0,
    )
    log = Log.open(tmp_path / "t-0", config)
    for n in range(20):
        log.append([(b"k%d" % n, b"v" * 50)])
    records = log.read(0)
    first = next(records)  # the snapshot pinned every segment; only the first is open
    if action == "retention":
        assert log.delete_old_segments() > 0  # renamed .deleted, then removed
    else:
        log.close()
    assert [first.key] + [r.key for r in records] == [b"k%d" % n for n in range(20)]
    log.close()
