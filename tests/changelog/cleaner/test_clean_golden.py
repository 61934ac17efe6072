"""Cleaner output pinned byte for byte: the offset map's implementation must not change it.

The digests were taken with the dict-based offset map that the numpy map replaced
(at commit 6d36e80; the map's capacity is set equal for both): a deterministic log (fixed clock, seeded keys, tombstones, batches
of 1-40 records over several segments) cleaned to the end with maps of different
sizes, from many passes (a map of a few dozen keys) to one pass.  Same bytes, same
segment files, same pass count.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from changelog.cleaner.clean import clean_log
from changelog.cleaner.offset_map import SLOT_BYTES, OffsetMap
from changelog.config import CleanerConfig, LogConfig
from changelog.log.log import Log

T0 = 1_700_000_000_000


def _build(path: Path) -> Log:
    now = [T0]
    log = Log.open(
        path / "golden-0",
        LogConfig(
            segment_bytes=64 * 1024,
            delete_retention_ms=1000,
            file_delete_delay_ms=0,
            flush_messages=10**9,
        ),
        clock=lambda: now[0],
    )
    rng = random.Random(2024)
    for _ in range(500):
        batch: list[tuple[bytes, bytes | None]] = []
        for _ in range(rng.randint(1, 40)):
            key = b"key-%05d" % rng.randrange(3000)
            value = None if rng.random() < 0.05 else b"v" * rng.randint(0, 30)
            batch.append((key, value))
        log.append(batch)
        now[0] += 7
    log.roll()
    return log


def _digest(log: Log) -> str:
    h = hashlib.sha256()
    for path in sorted(Path(log.dir).glob("*.log")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


# buffer bytes -> (passes, digest of the .log files) with the previous, dict-based map
GOLDEN: dict[int, tuple[int, str]] = {
    200: (48, "bbbaa3a5035240fc"),
    700: (13, "654c8af0e1c43164"),
    100_000: (1, "16411edd69223908"),
}


@pytest.mark.parametrize("keys_per_pass", [200, 700, 100_000])
def test_cleaned_log_is_byte_identical_to_the_previous_map(
    tmp_path: Path, keys_per_pass: int
) -> None:
    log = _build(tmp_path)
    slots = int(keys_per_pass / 0.9) + 1  # capacity keys_per_pass, whatever a slot costs
    offset_map = OffsetMap(slots * SLOT_BYTES, load_factor=0.9)
    passes = 0
    now = T0 + 10_000
    while True:
        stats = clean_log(
            log, force=True, config=CleanerConfig(), now_ms=now, offset_map=offset_map
        )
        if stats is None:
            break
        passes += 1
        if stats.end_offset >= stats.first_uncleanable_offset:
            break
        assert passes < 500
    digest = _digest(log)
    log.close()
    assert (passes, digest) == GOLDEN[keys_per_pass]
