"""Restore and the CLI read a changelog with transactions read_committed.

The changelog of a store gets transactions written straight into it (as a
Kafka broker, or a coordinator, would write them): committed, aborted (one
shadowing a committed value), one interleaved with a non-transactional write,
and one left open.  Every reader that builds state must see exactly the
committed data below the last stable offset.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest

from changelog.log.log import Log
from changelog.record.control import ControlRecordType
from statestore import StateManager
from statestore.config import StoreConfig
from tests.cli.helpers import run_cli

ABORT = ControlRecordType.ABORT
COMMIT = ControlRecordType.COMMIT


def _v(value: object) -> bytes:
    return msgpack.packb(value)  # type: ignore[no-any-return]


def _write_transactions(state: Path) -> dict[str, object]:
    """The transactions described in the module docstring; returns the committed state."""
    with StateManager(state) as manager:
        store = manager.store("accounts")
        store["alice"] = 10
        store["bob"] = 20
        manager.commit()
    with Log.open(state / "accounts-changelog-0") as log:
        log.append_transactional([(b"alice", _v(11))], producer_id=1, producer_epoch=0)
        log.append_transactional([(b"carol", _v(30))], producer_id=2, producer_epoch=0)
        log.append_marker(COMMIT, producer_id=1, producer_epoch=0)
        log.append_transactional(
            [(b"bob", _v(-999)), (b"dave", _v(1))], producer_id=3, producer_epoch=0
        )
        log.append_marker(ABORT, producer_id=3, producer_epoch=0)  # bob keeps 20
        log.append_marker(ABORT, producer_id=2, producer_epoch=0)  # carol never existed
        log.append_transactional([(b"erin", None)], producer_id=4, producer_epoch=0)
        log.append_transactional([(b"erin", _v(5))], producer_id=4, producer_epoch=0)
        log.append_marker(COMMIT, producer_id=4, producer_epoch=0)
        log.append([(b"frank", _v(7))])
        log.append_transactional([(b"alice", _v(-1))], producer_id=5, producer_epoch=0)  # open
        assert log.last_stable_offset == log.log_end_offset - 1
    return {"alice": 11, "bob": 20, "erin": 5, "frank": 7}


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_restore_reads_committed_only(tmp_path: Path, mode: str) -> None:
    state = tmp_path / "state"
    expected = _write_transactions(state)
    with StateManager(state) as manager:
        store = manager.store("accounts", config=StoreConfig(restore_mode=mode))  # type: ignore[arg-type]
        assert dict(store.items()) == expected


def test_cli_get_and_scan_read_committed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    expected = _write_transactions(state)
    result = run_cli(["get", str(state), "accounts", "bob", "--json"], capsys)
    assert result.status == 0, result.err
    assert json.loads(result.out)["value"] == 20
    assert run_cli(["get", str(state), "accounts", "carol"], capsys).status == 1
    assert run_cli(["get", str(state), "accounts", "dave"], capsys).status == 1
    scanned = json.loads(run_cli(["scan", str(state), "accounts", "--json"], capsys).out)
    rows = scanned if isinstance(scanned, list) else scanned.get("entries", scanned)
    got = {row["key"]: row["value"] for row in rows}
    assert got == expected
