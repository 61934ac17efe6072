"""``./dev demo-cluster`` end to end (its broker is the session's): three workers, a kill -9, VERIFIED."""

from __future__ import annotations

from pathlib import Path

from examples.balances.cluster_demo import run_demo
from kafka_harness.broker import KafkaBroker


def test_demo_cluster_verifies(cluster: KafkaBroker, tmp_path: Path) -> None:
    assert run_demo(cluster.bootstrap_servers, tmp_path, count=1500, accounts=60, app="demo")
