"""Shared test configuration: Hypothesis profiles, the pure-Python run, parallel workers.

Profiles: ``dev`` (default: 20 examples, so that ``./dev test`` stays quick), ``ci``
(60 examples; .ci/run selects it through HYPOTHESIS_PROFILE=ci).

``STATESTORE_PURE=1`` (:mod:`changelog.native`) runs every test on the Python paths;
the tests marked ``compiled`` (about the C extensions themselves) are deselected
then, and the summary says how many.

Under pytest-xdist (``-n``), the reliability figures each worker counted
(:mod:`tests.reliability.stats`) are sent to the controller, which prints them.
Tests marked ``kafka`` go to one worker per broker kind (``xdist_group``), so
that one broker of each kind serves them, as in a serial run.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from changelog import native
from tests.reliability import stats

settings.register_profile(
    "dev",
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

_RELIABILITY_KEY = "statestore_reliability"

SLOW_TIMEOUT_S = 600
"""Per-test deadline of the ``slow`` tests (the suite's default is 120 s, pyproject.toml)."""


def pytest_report_header() -> str:
    """Which implementation runs: the compiled paths or the pure-Python ones."""
    return f"statestore: {'pure Python (STATESTORE_PURE=1)' if native.PURE else 'compiled paths'}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect ``compiled`` tests under ``STATESTORE_PURE``; deadlines of ``slow`` tests; one
    xdist group per broker kind for ``kafka``."""
    if native.PURE:
        deselected = [item for item in items if item.get_closest_marker("compiled")]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if not item.get_closest_marker("compiled")]
    for item in items:
        if item.get_closest_marker("slow"):
            # Soak-sized runs and long fault sweeps: minutes each on a loaded machine.
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        if item.get_closest_marker("kafka"):
            # Kafka 4.x (``cluster``) and Kafka 3.9 (the conformance scenario): two workers.
            cluster = "cluster" in getattr(item, "fixturenames", ())
            item.add_marker(pytest.mark.xdist_group("kafka-cluster" if cluster else "kafka"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand this worker's reliability figures to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[_RELIABILITY_KEY] = stats.dump()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """On the xdist controller: add a finished worker's figures to the summary."""
    del error
    data = getattr(node, "workeroutput", {}).get(_RELIABILITY_KEY)
    if data:
        stats.merge(data)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the reliability figures of this session (one parseable line per kind)."""
    lines = stats.lines()
    if not lines:
        return
    terminalreporter.section("statestore reliability figures")
    for line in lines:
        terminalreporter.write_line(line)
    stats.write_report()
