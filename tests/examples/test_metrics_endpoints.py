"""Both example services expose /metrics: started as real processes, scraped over 127.0.0.1,
and parsed with prometheus_client's own text parser."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from examples.balances.transactions import generate, write_transactions

ROOT = Path(__file__).resolve().parents[2]


def scrape(port: int) -> dict[str, Any]:
    """GET /metrics and parse it; families by name."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    """The one sample of family ``name`` with ``labels`` (counters: the ``_total`` sample)."""
    found = [
        sample.value
        for sample in families[name].samples
        if all(sample.labels.get(k) == v for k, v in labels.items())
        and not sample.name.endswith("_created")
    ]
    assert len(found) == 1, (name, labels, found)
    return float(found[0])


def test_user_profiles_serves_metrics(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.user_profiles",
            "--state-dir",
            str(tmp_path),
            "--port",
            "0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        base = f"http://127.0.0.1:{port}"
        for i in range(5):
            body = json.dumps({"name": f"n{i}"}).encode()
            request = urllib.request.Request(f"{base}/users/u{i}", data=body, method="PUT")
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 201
        families = scrape(port)
        tags = {"store": "user-profiles", "partition": "0"}
        assert value(families, "statestore_stream_state_commit", **tags) == 5
        assert value(families, "statestore_log_log_end_offset", **tags) == 5
        assert value(families, "statestore_stream_state_records_committed", **tags) == 5
        assert families["statestore_stream_state_commit_latency_seconds"].type == "histogram"
        assert "statestore_log_cleaner_manager_max_dirty_percent" in families
    finally:
        process.terminate()
        process.wait(timeout=30)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    assert process.returncode == 0


def test_balances_serves_metrics_while_it_runs(tmp_path: Path) -> None:
    lines = io.StringIO()
    write_transactions(lines, generate(20, accounts=5, seed=3))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.balances",
            "--state-dir",
            str(tmp_path / "state"),
            "--events",
            "--commit-every",
            "10",
            "--metrics-port",
            "0",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        events = [json.loads(process.stdout.readline()) for _ in range(2)]
        assert [e["event"] for e in events] == ["restored", "metrics"]
        port = events[1]["port"]
        process.stdin.write(lines.getvalue())
        process.stdin.flush()  # 20 transactions: two commits of 10; stdin stays open
        commits = [json.loads(process.stdout.readline()) for _ in range(2)]
        assert [e["event"] for e in commits] == ["commit", "commit"]
        families = scrape(port)
        tags = {"store": "balances", "partition": "0"}
        assert value(families, "statestore_stream_state_commit", **tags) == 2
        assert value(families, "statestore_log_log_end_offset", **tags) > 0
        assert value(families, "statestore_log_cleaner_dead_thread_count") == 0
        process.stdin.close()
        done = json.loads(process.stdout.readline())
        assert done["event"] == "done"
        assert done["transactions"] == 20
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=30)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
