"""Shared steps of the conformance tests: read a partition with Kafka's DumpLogSegments and with ours.

Records are compared as ``(offset, timestamp_ms, key, value)`` tuples of text
(the test data is spaceless ASCII, which DumpLogSegments prints verbatim);
``value`` is ``None`` for a tombstone.
"""

from __future__ import annotations

from pathlib import Path

from changelog.config import LogConfig
from changelog.log.log import Log
from kafka_harness.dump_parser import DumpedFile, index_problems, parse_log_dump
from kafka_harness.kafka_runtime import KafkaDist
from statestore.cli.progress import Progress
from statestore.cli.verify import PartitionReport, verify_partition
from tests.kafka.scenario import INDEX_INTERVAL_BYTES, SEGMENT_BYTES

Row = tuple[int, int, str, str | None]
"""``(offset, timestamp_ms, key, value)``; ``value`` ``None`` = tombstone."""

__all__ = [
    "Row",
    "dump_partition",
    "kafka_rows",
    "log_config",
    "our_rows",
    "our_verify",
    "segment_files",
    "verify_indexes_with_kafka",
]


def log_config(*, delete_retention_ms: int, **overrides: object) -> LogConfig:
    """Our settings for the scenario's topics (Kafka's names, our spelling)."""
    settings: dict[str, object] = {
        "segment_bytes": SEGMENT_BYTES,
        "index_interval_bytes": INDEX_INTERVAL_BYTES,
        "min_cleanable_dirty_ratio": 0.01,
        "min_compaction_lag_ms": 0,
        "delete_retention_ms": delete_retention_ms,
        "cleanup_policy": "compact",
    }
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]  # keyword settings checked by LogConfig


def segment_files(partition_dir: Path, suffix: str) -> list[Path]:
    """The ordinary (not ``.deleted``/``.cleaned``/``.swap``) segment files with ``suffix``, by base offset."""
    return sorted(
        p
        for p in partition_dir.iterdir()
        if p.name.endswith(suffix) and p.name[:20].isdigit() and p.name[20:] == suffix
    )


def dump_partition(
    dist: KafkaDist, partition_dir: Path, *, compression: str | None = "none"
) -> list[DumpedFile]:
    """DumpLogSegments ``--deep-iteration --print-data-log`` over every ``.log`` file, parsed.

    Asserts what must hold for any valid partition: one dump per file, every
    batch valid (CRC-32C) with magic 2 and ``compression`` (``None``: any codec; an
    emptied batch is uncompressed whatever the codec), batches back to back
    from position 0, no invalid trailing bytes.
    """
    logs = segment_files(partition_dir, ".log")
    assert logs, f"no .log files in {partition_dir}"
    result = dist.dump_log_segments(logs, "--deep-iteration", "--print-data-log")
    parsed = parse_log_dump(result.stdout)
    assert sorted(parsed) == [p.resolve() for p in logs], result.stdout[-2000:]
    dumped = [parsed[p.resolve()] for p in logs]
    for file in dumped:
        base_offset = int(file.path.name[:20])
        assert file.log_start_offset == base_offset
        assert file.invalid_trailing_bytes == 0, f"{file.path}: Kafka found invalid trailing bytes"
        position = 0
        for batch in file.batches:
            where = f"{file.path} batch at {batch.position}"
            assert batch.is_valid, f"{where}: Kafka says the CRC is wrong"
            assert batch.magic == 2, where
            assert compression is None or batch.compression in (compression, "none"), where
            assert batch.compression == (compression or batch.compression) or not batch.records, (
                f"{where}: codec {batch.compression} with {len(batch.records)} records"
            )
            assert batch.position == position, where
            assert batch.base_offset >= base_offset, where
            assert all(batch.base_offset <= r.offset <= batch.last_offset for r in batch.records), (
                where
            )
            if batch.records:
                assert batch.max_timestamp_ms == max(r.timestamp_ms for r in batch.records), where
            position += batch.size
        assert position == file.path.stat().st_size
    return dumped


def kafka_rows(dumped: list[DumpedFile]) -> list[Row]:
    """The records DumpLogSegments printed, as rows, in log order."""
    rows: list[Row] = []
    for file in dumped:
        for record in file.records:
            assert record.key is not None, f"{file.path}: record {record.offset} has no key"
            assert record.timestamp_type == "CreateTime"
            rows.append((record.offset, record.timestamp_ms, record.key, record.value))
    return rows


def our_rows(log: Log) -> list[Row]:
    """The records ``Log.read()`` yields, as rows."""
    rows: list[Row] = []
    for record in log.read():
        assert record.key is not None
        value = None if record.value is None else record.value.decode()
        rows.append((record.offset, record.timestamp_ms, record.key.decode(), value))
    return rows


def our_verify(partition_dir: Path) -> PartitionReport:
    """``statestore verify`` (read-only) on ``partition_dir``: no error, no warning but the holes a broker's cleaner leaves."""
    report = verify_partition(partition_dir, Progress("verify", enabled=False))
    bad = [
        str(p)
        for p in report.problems
        if p.severity != "info"
        # a broker's cleaner leaves holes between segments: verify names them, as a warning
        and not (p.severity == "warning" and "a Kafka broker's cleaner may leave" in p.message)
    ]
    assert bad == [], f"statestore verify on {partition_dir}:\n" + "\n".join(bad)
    assert report.segments > 0 and report.batches > 0
    return report


def verify_indexes_with_kafka(
    dist: KafkaDist, partition_dir: Path, *, allow_empty_batch_mismatch: bool = True
) -> None:
    """Kafka's index checks on every ``.index`` and ``.timeindex`` of ``partition_dir``.

    ``--verify-index-only`` (each offset index entry names the last offset of the
    batch at its position; each time index entry names a batch's last offset and
    that batch's max record timestamp, increasing) and ``--index-sanity-check``
    (the check Kafka runs at start-up to decide whether to rebuild an index).

    One complaint is not a fault and is let through: a time index entry for an
    *empty* batch (one the cleaner emptied and kept for its last offset).  The
    tool compares the entry with the max timestamp of the batch's records, which
    is -1 when there are none, while a segment indexes the batch header's
    ``maxTimestamp``; Kafka's cleaner writes such batches too (``writeEmptyHeader``
    keeps the batch's ``maxTimestamp``) and its segments index them the same way.
    The batch must really be empty, with that header timestamp.
    """
    indexes = segment_files(partition_dir, ".index") + segment_files(partition_dir, ".timeindex")
    assert indexes
    verify = dist.dump_log_segments(indexes, "--verify-index-only")
    problems = index_problems(verify.stderr)
    if allow_empty_batch_mismatch and any(
        p.kind == "timestamp mismatch" and p.b == -1 for p in problems
    ):
        empty = {
            (Path(file.path.name[:20]), batch.max_timestamp_ms)
            for file in dump_partition(dist, partition_dir)
            for batch in file.batches
            if not batch.records
        }
        problems = [
            p
            for p in problems
            if not (
                p.kind == "timestamp mismatch"
                and p.b == -1
                and p.path is not None
                and (Path(p.path.name[:20]), p.a) in empty
            )
        ]
    assert problems == [], "Kafka rejects the indexes:\n" + "\n".join(map(str, problems))
    sanity = dist.dump_log_segments(indexes, "--index-sanity-check")
    for index in indexes:
        resolved = index.resolve()
        passed = f"{resolved} passed sanity check."
        empty_index = f"{resolved} is empty."  # DumpLogSegments skips the check of an empty .index
        assert passed in sanity.stdout or (
            index.suffix == ".index" and empty_index in sanity.stdout
        ), f"{index}: no sanity verdict in\n{sanity.stdout}\n{sanity.stderr}"
