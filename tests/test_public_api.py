"""Each package's public API is explicit: a sorted ``__all__`` whose names all exist and are documented."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

import changelog
import statestore
import statestore.aio
import statestore.kafka

PACKAGES = [changelog, statestore, statestore.aio, statestore.kafka]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_all_is_sorted_and_unique(package: ModuleType) -> None:
    names = list(package.__all__)
    assert names == sorted(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_public_name_exists_and_has_a_docstring(package: ModuleType) -> None:
    for name in package.__all__:
        obj = getattr(package, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{package.__name__}.{name} has no docstring"
