"""Log-level format features: compressed appends, mixed codecs, record headers, leader epochs."""

from __future__ import annotations

from pathlib import Path

import pytest

from changelog.config import LogConfig
from changelog.errors import InvalidRecordError
from changelog.log.log import Log
from changelog.record.batch import decode_header
from changelog.record.compression import CODEC_NAMES
from changelog.record.header import field_offset
from tests.changelog.conftest import FakeClock

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def codecs_on_disk(log_dir: Path) -> list[str]:
    found = []
    for path in sorted(log_dir.glob("*.log")):
        data = path.read_bytes()
        position = 0
        while position < len(data):
            header = decode_header(data, position, path=path, validate=True)
            found.append(CODEC_NAMES[header.compression])
            position += header.size_in_bytes
    return found


@pytest.mark.parametrize("codec", CODECS)
def test_compression_type_compresses_appends(log_dir: Path, clock: FakeClock, codec: str) -> None:
    config = LogConfig(compression_type=codec, segment_bytes=4096)
    pairs = [(b"key-%03d" % i, b"value " * 20) for i in range(40)]
    with Log.open(log_dir, config, clock=clock) as log:
        for start in range(0, 40, 10):
            log.append(pairs[start : start + 10])
        assert [(r.offset, r.key, r.value) for r in log.read()] == [
            (i, k, v) for i, (k, v) in enumerate(pairs)
        ]
    assert codecs_on_disk(log_dir) == [codec] * 4
    with Log.open(log_dir, LogConfig(), clock=clock) as log:  # reading needs no setting
        assert [r.value for r in log.read()] == [v for _k, v in pairs]


def test_mixed_codecs_in_one_partition_survive_reopen_and_cleaning(
    log_dir: Path, clock: FakeClock
) -> None:
    from changelog.cleaner.clean import clean_log  # noqa: PLC0415

    expected: dict[bytes, bytes | None] = {}
    for round_ in range(3):
        for codec in CODECS:
            config = LogConfig(
                compression_type=codec, segment_bytes=600, min_cleanable_dirty_ratio=0.01
            )
            with Log.open(log_dir, config, clock=clock) as log:
                for i in range(4):
                    key = b"k%d" % ((i + round_) % 6)
                    value = (
                        None
                        if i == 3 and codec == "lz4"
                        else b"%s-%d-%d" % (codec.encode(), round_, i)
                    )
                    mine = b"only-%s" % codec.encode()  # survives in a batch of this codec
                    log.append([(key, value), (b"other-%d" % i, b"x" * 30), (mine, b"%d" % i)])
                    expected[key] = value
                    expected[b"other-%d" % i] = b"x" * 30
                    expected[mine] = b"%d" % i
    assert set(codecs_on_disk(log_dir)) == set(CODECS)
    config = LogConfig(segment_bytes=600, min_cleanable_dirty_ratio=0.01)
    with Log.open(log_dir, config, clock=clock) as log:
        log.roll()
        stats = clean_log(log, force=True)
        assert stats is not None and stats.records_kept < stats.records_read
        latest: dict[bytes, bytes | None] = {}
        for record in log.read():
            assert record.key is not None
            latest[record.key] = record.value
        assert latest == expected
    assert set(codecs_on_disk(log_dir)) == set(CODECS)  # rewritten batches keep their codec


def test_headers_round_trip(log_dir: Path, clock: FakeClock) -> None:
    headers = [(("trace", b"abc"), ("null", None)), (), (("é", b""),)]
    with Log.open(log_dir, LogConfig(compression_type="zstd"), clock=clock) as log:
        log.append([(b"a", b"1"), (b"b", None), (b"c", b"3")], headers=headers)
        log.append([(b"d", b"4")])
    with Log.open(log_dir, LogConfig(), clock=clock) as log:
        assert [r.headers for r in log.read()] == [*headers, ()]


@pytest.mark.parametrize(
    "headers",
    [[()], [(), (), ()], [(("k", "text"),)], [((b"k", b"v"),)], [[("k", b"v")]], "x"],
)
def test_bad_headers_write_nothing(log_dir: Path, clock: FakeClock, headers: object) -> None:
    with Log.open(log_dir, LogConfig(), clock=clock) as log:
        with pytest.raises(InvalidRecordError):
            log.append([(b"a", b"1"), (b"b", b"2")], headers=headers)  # type: ignore[arg-type]
        assert log.log_end_offset == 0 and log.size_bytes == 0


def set_leader_epoch(log_dir: Path, epoch: int) -> None:
    """Stamp every batch with ``epoch``, as a broker's leader would (not under the CRC)."""
    for path in log_dir.glob("*.log"):
        data = bytearray(path.read_bytes())
        position = 0
        while position < len(data):
            header = decode_header(data, position, path=path)
            at = position + field_offset("partition_leader_epoch")
            data[at : at + 4] = epoch.to_bytes(4, "big")
            position += header.size_in_bytes
        path.write_bytes(bytes(data))


def epochs(log_dir: Path) -> list[int]:
    out = []
    for path in sorted(log_dir.glob("*.log")):
        data = path.read_bytes()
        position = 0
        while position < len(data):
            header = decode_header(data, position, path=path, validate=True)
            out.append(header.partition_leader_epoch)
            position += header.size_in_bytes
    return out


def test_appends_continue_the_last_leader_epoch(log_dir: Path, clock: FakeClock) -> None:
    with Log.open(log_dir, LogConfig(), clock=clock) as log:
        log.append([(b"a", b"1")])
    assert epochs(log_dir) == [0]
    set_leader_epoch(log_dir, 2)
    with Log.open(log_dir, LogConfig(), clock=clock) as log:
        log.append([(b"b", b"2")])
        log.roll()
        log.append([(b"c", b"3")])
    with Log.open(log_dir, LogConfig(), clock=clock) as log:
        log.append([(b"d", b"4")])
    assert epochs(log_dir) == [2, 2, 2, 2]


def test_a_brokers_leader_epoch_checkpoint_stays_true(log_dir: Path, clock: FakeClock) -> None:
    """A checkpoint naming a later epoch than the last batch: appends take that epoch."""
    with Log.open(log_dir, LogConfig(), clock=clock) as log:
        log.append([(b"a", b"1")])
    (log_dir / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n5 1\n")
    with Log.open(log_dir, LogConfig(), clock=clock) as log:
        log.append([(b"b", b"2")])
    assert epochs(log_dir) == [0, 5]
    assert (log_dir / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n5 1\n"
