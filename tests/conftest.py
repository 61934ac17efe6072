"""Shared test configuration: Hypothesis profiles and the pure-Python run.

Profiles: ``dev`` (default, fast), ``ci`` (more examples, no deadline; .ci/run
selects it through HYPOTHESIS_PROFILE=ci).

``STATESTORE_PURE=1`` (:mod:`changelog.native`) runs every test on the Python paths;
the tests marked ``compiled`` (about the C extensions themselves) are deselected
then, and the summary says how many.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from changelog import native

settings.register_profile(
    "dev",
    max_examples=30,
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


def pytest_report_header() -> str:
    """Which implementation runs: the compiled paths or the pure-Python ones."""
    return f"statestore: {'pure Python (STATESTORE_PURE=1)' if native.PURE else 'compiled paths'}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect ``compiled`` tests under ``STATESTORE_PURE``."""
    if native.PURE:
        deselected = [item for item in items if item.get_closest_marker("compiled")]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if not item.get_closest_marker("compiled")]
