"""The compiled hot paths and the one switch that turns them all off.

Two C extensions are built by ``setup.py``: ``changelog.record._records`` (the
record encoder of the append path) and ``statestore.stores._put`` (the typed
store's put and get, the write buffer's forget, the engine's ``WriteBatch``
fill).  Every caller loads them through :func:`compiled` and keeps a
pure-Python path that does the same (tests run the suite on both).

``STATESTORE_PURE=1`` in the environment (read once, at import) makes
:func:`compiled` answer ``None`` for everything: the whole process runs the
Python paths, as if nothing had been built.  CI runs the suite once each way.

Source installs without a C compiler build without the extensions (they are
optional there); a wheel is built with them required (``setup.py``), so a wheel
that imports without them is a bug, not a fallback.

Thread-safety: immutable after import.
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import Any, Final

__all__ = ["PURE", "compiled"]

PURE: Final = os.environ.get("STATESTORE_PURE", "") not in ("", "0")
"""Whether ``STATESTORE_PURE`` asks for the pure-Python paths only."""


def compiled(module: str, name: str) -> Any:
    """``name`` from the compiled ``module``, or ``None`` under :data:`PURE` or if it was not built.

    A module built from other sources (a source checkout updated without rebuilding its
    extensions) that lacks ``name`` also gives ``None``, with a ``RuntimeWarning`` naming
    both: the Python path runs, correct and slower, until the extensions are rebuilt.
    """
    if PURE:
        return None
    try:
        loaded = importlib.import_module(module)
    except ImportError:
        return None
    try:
        return getattr(loaded, name)
    except AttributeError:
        warnings.warn(
            f"{module} was built from other sources (it has no {name}): the Python path runs"
            " instead; rebuild the extensions (pip install -e ., or ./dev)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
