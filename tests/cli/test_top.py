"""``statestore top``: a live, read-only view, refreshed while a real service writes."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from changelog.cleaner.clean import clean_log
from statestore import StateManager
from statestore.metrics.prometheus import StateStoreCollector
from tests.cli.helpers import QUIET, SMALL_LOG, run_cli


def tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``path`` with its size and mtime."""
    return {
        str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def test_top_reads_only(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree(state)
    result = run_cli(["top", str(state), "--count", "2", "--interval", "0.05"], capsys)
    assert result.status == 0, result.err
    assert result.out.count("statestore top ") == 2
    assert "dirty ratio" in result.out and "users" in result.out
    assert tree(state) == before


def test_top_follows_a_running_service(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    with StateManager(state, config=QUIET, log_config=SMALL_LOG) as manager:
        store = manager.store("events")
        for i in range(50):
            store[f"e{i}"] = i
        manager.commit()
        stop = threading.Event()

        def write() -> None:
            i = 50
            while not stop.is_set():
                store[f"e{i}"] = i
                manager.commit()
                i += 1
                stop.wait(0.01)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            result = run_cli(
                ["top", str(state), "--json", "--count", "3", "--interval", "0.3"], capsys
            )
        finally:
            stop.set()
            writer.join()
    assert result.status == 0, result.err
    frames = [json.loads(line) for line in result.out.splitlines()]
    assert len(frames) == 3
    ends = [frame["partitions"][0]["log_end_offset"] for frame in frames]
    assert ends == sorted(ends) and ends[-1] > ends[0] >= 50
    assert frames[0]["locked_by"]  # the service holds the lock; top does not need it
    assert frames[0]["appended_per_s"] == {}
    assert frames[2]["appended_per_s"]["events-0"] > 0


def test_top_scrapes_the_service_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    with StateManager(state, log_config=SMALL_LOG) as manager:  # the cleaner runs
        store = manager.store("users", partitions=2)
        for round_ in range(10):
            for i in range(30):
                store[f"u{i}"] = round_
            manager.commit()
        clean_log(store.changelogs[0], force=True)
        registry = CollectorRegistry()
        registry.register(StateStoreCollector(manager))
        server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        try:
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            result = run_cli(
                ["top", str(state), "--json", "--count", "1", "--metrics-url", url], capsys
            )
            text = run_cli(["top", str(state), "--count", "1", "--metrics-url", url], capsys)
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
        snapshot = manager.metrics()
    assert result.status == 0, result.err
    (frame,) = [json.loads(line) for line in result.out.splitlines()]
    rows = {row["partition"]: row for row in frame["partitions"]}
    for partition in (0, 1):
        assert rows[partition]["commits"] == snapshot["stores"]["users"][partition]["commit-total"]
        assert rows[partition]["restore_remaining_records"] == 0
    assert rows[0]["last_cleaned_s_ago"] is not None  # clean_log wrote the cleaner checkpoint
    assert frame["cleaner"]["dead threads"] == 0
    assert "cleaner: passes" in text.out and "restore left" in text.out


def test_top_usage_errors(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["top", str(state), "--interval", "0"], capsys).status == 2
    assert run_cli(["top", str(state / "missing")], capsys).status == 2
    assert run_cli(["top", str(state), "--store", "nope", "--count", "1"], capsys).status == 2
