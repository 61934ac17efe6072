"""statestore.testing's public API is pinned, documented, and its plugin is loaded by pytest."""

from __future__ import annotations

import inspect

import pytest

import statestore.testing
from statestore.testing import plugin

EXPECTED = [
    "CrashHarness",
    "CrashRun",
    "CrashTestError",
    "Reporter",
    "RestoredStores",
    "ServiceExitError",
    "ServiceFailedError",
    "ServiceTimeoutError",
    "simulate_crash",
]


def test_all_is_pinned_sorted_and_documented() -> None:
    assert statestore.testing.__all__ == EXPECTED
    for name in EXPECTED:
        obj = getattr(statestore.testing, name)
        assert inspect.getdoc(obj), f"statestore.testing.{name} has no docstring"
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if not member.startswith("_") and callable(value):
                    assert inspect.getdoc(value), f"{name}.{member} has no docstring"


def test_the_plugin_is_registered_through_its_entry_point(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.get_plugin("statestore") is plugin


def test_errors_share_one_base() -> None:
    for name in ("ServiceExitError", "ServiceFailedError", "ServiceTimeoutError"):
        assert issubclass(getattr(statestore.testing, name), statestore.testing.CrashTestError)
