"""Fixtures of the Kafka conformance tests: a pinned Apache Kafka, fetched with Maven, run for real.

Every test here is marked ``kafka``.  When ``java`` or ``mvn`` is missing they are
skipped with a reason that says so loudly (``-ra`` prints it in the summary); CI
has both, so there they run.  Select them alone with ``./dev test -m kafka``.

Session fixtures:

* ``kafka_dist``: the resolved Kafka release (Maven runs once; the classpath is
  cached in ``.cache/kafka/``).
* ``kafka_scenario``: one broker driven through the two runs of
  :mod:`tests.kafka.scenario` (produce with the cleaner off; clean with it on),
  with copies of its partition directories before and after Kafka's cleaner.
  The broker is killed in ``finally`` blocks whatever happens.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kafka_harness.kafka_runtime import KafkaDist, fetch, missing_prerequisites
from tests.kafka.scenario import KafkaScenario, run_kafka_scenario

_HERE = Path(__file__).resolve().parent

KAFKA_TIMEOUT_S = 300
"""Per-test deadline of the Kafka tests (the suite's default is 120 s, pyproject.toml)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of this directory ``kafka``; skip them all, loudly, without Java/Maven."""
    del config
    reason = missing_prerequisites()
    for item in items:
        if _HERE not in Path(str(item.path)).resolve().parents:
            continue
        item.add_marker(pytest.mark.kafka)
        # A JVM broker's start (Maven resolving the classpath on a first run) is part of the
        # first test's setup, and a scenario runs two brokers: a deadline of their own.
        item.add_marker(pytest.mark.timeout(KAFKA_TIMEOUT_S))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def kafka_dist() -> KafkaDist:
    """The pinned Kafka release, resolved with Maven (first run) or from the cached classpath."""
    reason = missing_prerequisites()
    if reason is not None:
        pytest.skip(reason)
    started = time.monotonic()
    dist = fetch()
    print(f"kafka: Apache Kafka {dist.version} ready in {time.monotonic() - started:.1f}s")
    return dist


@pytest.fixture(scope="session")
def kafka_scenario(
    kafka_dist: KafkaDist, tmp_path_factory: pytest.TempPathFactory
) -> KafkaScenario:
    """Kafka's own partition directories: as produced, and after Kafka's cleaner."""
    scenario = run_kafka_scenario(kafka_dist, tmp_path_factory.mktemp("kafka-scenario"))
    print(f"kafka: scenario timings {scenario.timings}")
    return scenario
