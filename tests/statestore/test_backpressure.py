"""A store's commit waits for the cleaner when the dirty tail outgrows its bound.

The manager's coordinator calls the cleaner's ``pace`` after every commit; with a throttled
cleaner (slower than the writer) the records a full restore would replay stay within
2 x live plus the allowance after every commit, and some commits waited.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from changelog.config import CleanerConfig
from changelog.log.log_dir import peek_batch_headers
from statestore import StateManager
from statestore.config import STORE_LOG_CONFIG, StateManagerConfig

pytestmark = pytest.mark.timeout(180)

KEYS = 100
PER_COMMIT = 50
MIN_BYTES = 16 * 1024


def _replayed(partition: Path) -> int:
    return sum(h.records_count for _p, _pos, h in peek_batch_headers(partition) if not h.is_control)


def test_commits_wait_so_that_a_restore_stays_bounded(tmp_path: Path) -> None:
    log_config = attrs.evolve(
        STORE_LOG_CONFIG, roll_dirty_min_bytes=4 * 1024, backpressure_min_bytes=MIN_BYTES
    )
    slow = CleanerConfig(io_max_bytes_per_second=300_000, backoff_ms=60_000)
    config = StateManagerConfig(cleaner=slow)
    with StateManager(tmp_path / "state", config=config, log_config=log_config) as manager:
        store = manager.store("s", key_type=bytes, value_type=bytes)
        partition = tmp_path / "state" / "s-changelog-0"
        for round_ in range(300):
            for i in range(PER_COMMIT):
                store.put(b"k%03d" % ((round_ * PER_COMMIT + i) % KEYS), b"v%06d" % round_)
            manager.commit()
            # each record is ~20 bytes in its batch: the allowance is ~800 records, plus the
            # commit that may land between the check and the wait
            assert _replayed(partition) <= 2 * KEYS + MIN_BYTES // 20 + 2 * PER_COMMIT, round_
        assert manager.cleaner is not None
        assert manager.cleaner.pace_waits > 0, "the throttled cleaner never held the writer"
        assert store.get(b"k007") is not None
