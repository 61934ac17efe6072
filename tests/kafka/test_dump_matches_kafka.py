"""``statestore dump`` prints what Kafka's DumpLogSegments prints, line for line.

The same files go to both tools: ours with its defaults, Kafka's with
``--deep-iteration --print-data-log``.  The files hold everything a dump
shows: every codec, record headers, tombstones, null keys, a LogAppendTime
batch, a transactional batch and its COMMIT marker, batches our cleaner
emptied or stamped with a delete horizon, and the offset and time indexes
of a real partition.  The remaining, documented differences
(``docs/kafka-compatibility.md``, "Dump matches DumpLogSegments") are values that are not UTF-8,
which Kafka prints as mojibake and we as msgpack or hex; the test data avoids
them on purpose, and one test shows the difference.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from changelog.cleaner.clean import clean_log
from changelog.config import LogConfig
from changelog.log.log import Log
from changelog.record.batch import LOG_APPEND_TIME, Compression, encode_batch, encode_records
from changelog.record.body import Record
from kafka_harness.kafka_runtime import KafkaDist
from statestore.cli.dump import DumpOptions, dump_paths

pytestmark = pytest.mark.kafka

TS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def ours(files: list[Path]) -> list[str]:
    out = io.StringIO()
    list(dump_paths(files, DumpOptions(), out))
    return out.getvalue().splitlines()


def kafkas(dist: KafkaDist, files: list[Path]) -> list[str]:
    result = dist.dump_log_segments(files, "--deep-iteration", "--print-data-log")
    return result.stdout.splitlines()


def crafted_log(directory: Path) -> Path:
    """One ``.log`` of hand-built batches: what no Log.append writes (control, LogAppendTime)."""
    directory.mkdir(parents=True)
    path = directory / "00000000000000000000.log"
    parts = []
    offset = 0
    for i, codec in enumerate(CODECS):
        pairs: list[tuple[bytes | None, bytes | None]] = [
            (b"key-%d" % i, b"value %s" % codec.encode()),
            (None, b"no key"),
            (b"gone", None),
        ]
        headers = [(("trace", b"t"), ("n", None)), (), (("only", b"x"),)]
        parts.append(
            encode_batch(
                offset,
                pairs,
                timestamp_ms=TS + i,
                headers=headers,
                compression=Compression.of(codec),
            )
        )
        offset += 3
    appended = [Record(offset + j, TS + 50, b"la-%d" % j, b"v", ()) for j in range(2)]
    parts.append(
        encode_records(
            appended,
            base_offset=offset,
            last_offset_delta=1,
            timestamp_type=LOG_APPEND_TIME,
            compression=Compression.of("lz4"),
        )
    )
    offset += 2
    txn = [Record(offset + j, TS + 60, b"tx-%d" % j, b"v", ()) for j in range(2)]
    parts.append(
        encode_records(
            txn,
            base_offset=offset,
            last_offset_delta=1,
            producer_id=42,
            producer_epoch=3,
            base_sequence=7,
            is_transactional=True,
        )
    )
    offset += 2
    marker = Record(offset, TS + 61, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x09", ())
    parts.append(
        encode_records(
            [marker],
            base_offset=offset,
            last_offset_delta=0,
            producer_id=42,
            producer_epoch=3,
            base_sequence=-1 + 1,
            is_transactional=True,
            is_control=True,
        )
    )
    path.write_bytes(b"".join(parts))
    return path


def test_dump_of_hand_built_batches_matches_kafka(kafka_dist: KafkaDist, tmp_path: Path) -> None:
    path = crafted_log(tmp_path / "crafted-0").resolve()
    assert ours([path]) == kafkas(kafka_dist, [path])


def test_dump_of_a_cleaned_compressed_partition_matches_kafka(
    kafka_dist: KafkaDist, tmp_path: Path
) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=700, index_interval_bytes=90, min_cleanable_dirty_ratio=0.01)
    for round_ in range(3):
        for codec in CODECS:
            with Log.open(
                directory, LogConfig(**{**_fields(config), "compression_type": codec})
            ) as log:
                for i in range(3):
                    key = b"k%d" % ((i + round_) % 5)
                    value = (
                        None if (i + round_) % 4 == 0 else b"%s %d %d" % (codec.encode(), round_, i)
                    )
                    log.append(
                        [(key, value), (b"%s-%d" % (codec.encode(), i), b"x" * 20)],
                        timestamp_ms=TS + round_ * 100 + i,
                        headers=[(("h", b"1"),), ()],
                    )
    with Log.open(directory, config) as log:
        log.roll()
        assert clean_log(log, force=True, now_ms=TS + 10_000) is not None
    files = sorted(
        p.resolve() for p in directory.iterdir() if p.suffix in (".log", ".index", ".timeindex")
    )
    mine, theirs = ours(files), kafkas(kafka_dist, files)
    assert len(mine) > 100
    assert mine == theirs


def _fields(config: LogConfig) -> dict[str, object]:
    import attrs  # noqa: PLC0415

    return attrs.asdict(config)


def test_the_one_known_difference_is_values_that_are_not_text(
    kafka_dist: KafkaDist, tmp_path: Path
) -> None:
    directory = tmp_path / "bin-0"
    directory.mkdir()
    path = (directory / "00000000000000000000.log").resolve()
    path.write_bytes(encode_batch(0, [(b"k", b"\x81\xa1a\x01")], timestamp_ms=TS))
    mine, theirs = ours([path]), kafkas(kafka_dist, [path])
    assert mine[:-1] == theirs[:-1]
    assert mine[-1].endswith('payload: {"a": 1}')  # msgpack, shown as JSON
    assert theirs[-1].startswith(mine[-1].split(" payload: ")[0])  # Kafka: the bytes as UTF-8
