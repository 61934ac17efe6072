"""Step 2 skips what the offset map proved unchanged: same bytes as reading everything.

A segment wholly inside the mapped range, none of whose records a later put
shadowed, with no tombstone, keyless record, empty, control or transactional
batch (transactional logs: ``test_transactions.py``), keeps every batch byte for byte: the pass neither scans nor rewrites it
(``CleanerStats.segments_skipped``).  The reference is the same cleaner with the
evidence switched off (every segment scanned, as before the skip existed).
"""

from __future__ import annotations

import hashlib
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelog.cleaner import clean as clean_module
from changelog.cleaner.clean import SegmentEvidence, clean_log
from changelog.cleaner.offset_map import OffsetMap
from changelog.config import CleanerConfig, LogConfig
from changelog.log.log import Log

T0 = 1_700_000_000_000


class _Unproven(SegmentEvidence):
    """Evidence that never proves anything: the pass scans every group (the reference)."""

    @property  # type: ignore[override]
    def mapped(self) -> bool:
        return False

    @mapped.setter
    def mapped(self, value: bool) -> None:
        del value


def _config(segment_bytes: int) -> LogConfig:
    return LogConfig(
        segment_bytes=segment_bytes,
        delete_retention_ms=1000,
        file_delete_delay_ms=0,
        flush_messages=10**9,
    )


def _write(path: Path, batches: list[list[tuple[bytes, bytes | None]]], segment_bytes: int) -> Path:
    now = [T0]
    with Log.open(path, _config(segment_bytes), clock=lambda: now[0]) as log:
        for batch in batches:
            log.append(batch)
            now[0] += 5
        log.roll()
    return path


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for file in sorted(path.glob("*.log")):
        h.update(file.name.encode())
        h.update(file.read_bytes())
    return h.hexdigest()


def _clean_to_end(path: Path, segment_bytes: int, buffer_bytes: int) -> list[Any]:
    now = [T0 + 10_000]
    config = CleanerConfig(dedupe_buffer_size_bytes=buffer_bytes)
    passes = []
    with Log.open(path, _config(segment_bytes), clock=lambda: now[0]) as log:
        offset_map = OffsetMap(buffer_bytes)
        for _ in range(200):
            stats = clean_log(log, force=True, config=config, offset_map=offset_map)
            if stats is None:
                break
            passes.append(stats)
            now[0] += 2000  # tombstone horizons pass between passes
            if stats.end_offset >= stats.first_uncleanable_offset and not (
                stats.pending_delete_horizon_ms
            ):
                break
    return passes


def _both(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    batches: list[list[tuple[bytes, bytes | None]]],
    segment_bytes: int,
    buffer_bytes: int,
) -> tuple[list[Any], list[Any], str]:
    source = _write(tmp_path / "src" / "t-0", batches, segment_bytes)
    ours = tmp_path / "ours" / "t-0"
    reference = tmp_path / "ref" / "t-0"
    shutil.copytree(source, ours)
    shutil.copytree(source, reference)
    skipped = _clean_to_end(ours, segment_bytes, buffer_bytes)
    with monkeypatch.context() as patch:
        patch.setattr(clean_module, "SegmentEvidence", _Unproven)
        scanned = _clean_to_end(reference, segment_bytes, buffer_bytes)
    assert _digest(ours) == _digest(reference)
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in reference.iterdir())
    for a, b in zip(skipped, scanned, strict=True):
        assert (a.end_offset, a.records_read, a.records_kept, a.bytes_read, a.bytes_kept) == (
            b.end_offset,
            b.records_read,
            b.records_kept,
            b.bytes_read,
            b.bytes_kept,
        )
        assert a.pending_delete_horizon_ms == b.pending_delete_horizon_ms
        assert b.segments_skipped == 0
    return skipped, scanned, _digest(ours)


def test_an_insert_only_log_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every key written once: nothing can go, and step 2 reads no segment."""
    batches = [[(b"k-%06d" % (i * 20 + j), b"v" * 30) for j in range(20)] for i in range(200)]
    source = _write(tmp_path / "before" / "t-0", batches, 16 * 1024)
    digest = _digest(source)
    skipped, _scanned, after = _both(tmp_path, monkeypatch, batches, 16 * 1024, 1 << 20)
    assert after == digest  # nothing changed
    (stats,) = skipped
    segments = len(list(source.glob("*.log"))) - 1  # the empty active segment is not cleaned
    assert segments >= 5
    assert stats.segments_skipped == stats.segments_untouched == segments
    assert stats.records_read == stats.records_kept == 4000
    assert stats.groups_swapped == 0


def test_only_segments_with_a_shadowed_record_are_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old segments of unique keys are skipped; those whose keys come again are rewritten,
    without being scanned first."""
    rng = random.Random(5)
    unique = [[(b"u-%06d" % (i * 20 + j), b"x" * 30) for j in range(20)] for i in range(100)]
    hot = [[(b"h-%03d" % rng.randrange(50), b"y" * 30) for _ in range(20)] for _ in range(100)]
    scans: list[int] = []
    real_scan = clean_module.scan_group

    def counting_scan(*args: Any, **kwargs: Any) -> Any:
        scans.append(1)
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(clean_module, "scan_group", counting_scan)
    skipped, _scanned, _ = _both(tmp_path, monkeypatch, unique + hot, 8 * 1024, 1 << 20)
    (stats,) = skipped
    assert stats.segments_skipped >= 4  # the unique keys' segments
    assert stats.segments_rewritten >= 4  # the hot keys' segments
    ours_scans = len(scans) // 2  # half of the calls were the reference's (it scans every group)
    assert ours_scans < stats.segments_rewritten + stats.segments_skipped


def test_a_tombstone_or_a_partly_mapped_segment_is_still_scanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tombstone needs its batch stamped; a map that fills mid-log proves nothing past it."""
    batches = [[(b"k-%06d" % (i * 20 + j), b"v" * 30) for j in range(20)] for i in range(100)]
    batches[3] = [*batches[3][:-1], (b"k-gone", None)]
    skipped, _scanned, _ = _both(tmp_path, monkeypatch, batches, 8 * 1024, 16 * 1024)
    assert len(skipped) > 1  # the small map takes several passes
    first = skipped[0]
    assert first.groups_swapped == 1  # the tombstone's segment: stamped
    assert all(s.segments_skipped < s.segments_untouched + s.segments_rewritten for s in skipped)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    key_space=st.sampled_from([10, 200, 5000]),
    unique_prefix=st.integers(0, 60),
    batches=st.integers(1, 80),
    tombstone_rate=st.sampled_from([0.0, 0.0, 0.05]),
    buffer_bytes=st.sampled_from([1024, 4096, 1 << 20]),
    segment_bytes=st.sampled_from([1024, 4096, 64 * 1024]),
    seed=st.integers(0, 2**16),
)
@pytest.mark.slow  # a long fault sweep: the slow tier
def test_skipping_changes_no_byte(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    key_space: int,
    unique_prefix: int,
    batches: int,
    tombstone_rate: float,
    buffer_bytes: int,
    segment_bytes: int,
    seed: int,
) -> None:
    """Random logs (a prefix of unique keys, then updates and tombstones),
    cleaned to the end with maps from a few dozen keys to all of them: the skip changes
    no byte, no file, no count."""
    rng = random.Random(seed)
    log: list[list[tuple[bytes, bytes | None]]] = []
    for i in range(unique_prefix):
        log.append([(b"p-%05d-%02d" % (i, j), b"u" * rng.randrange(40)) for j in range(8)])
    for _ in range(batches):
        batch: list[tuple[bytes, bytes | None]] = []
        for _ in range(rng.randint(1, 30)):
            key = b"k-%05d" % rng.randrange(key_space)
            value = None if rng.random() < tombstone_rate else b"v" * rng.randrange(40)
            batch.append((key, value))
        log.append(batch)
    _both(tmp_path_factory.mktemp("skip"), monkeypatch, log, segment_bytes, buffer_bytes)
