"""Kafka's cleaner and ours on the same store changelog: the same bytes come out.

:mod:`benchmarks.kafka_cleaner_bench` at its tiny size (20k writes over 4k keys, a
2 MiB dedupe buffer): a broker is handed our segment files and cleans them with its own
cleaner (after a warm-up topic); ours cleans a copy.  Both must leave exactly the 4k
latest records, and the final ``.log`` files must be byte for byte the same.  This is
also the smoke test of the benchmark (its timings are not checked here).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import kafka_cleaner_bench as bench
from kafka_harness.kafka_runtime import KafkaDist

pytestmark = pytest.mark.kafka


def test_kafka_and_we_clean_a_store_changelog_to_the_same_bytes(
    kafka_dist: KafkaDist, tmp_path: Path
) -> None:
    template = bench.build(tmp_path / "log", 20_000, 4_000)
    warmup = bench.build(tmp_path / "warm", 2_000, 400)
    ours = bench.run_ours(template, tmp_path / "ours", 2 << 20)
    kafka = bench.run_kafka(kafka_dist, template, warmup, tmp_path / "kafka", 2 << 20, 300)
    assert ours["records_after"] == kafka["records_after"] == 4_000
    assert ours["digest"] == kafka["digest"]
    assert [p["dirty"] for p in kafka["passes"]] == [[0, 20_000]]
    assert kafka["seconds"] > 0 and ours["seconds"] > 0
    assert (tmp_path / "log").exists()  # the template is left for the caller
