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
from typing import Any, Final

__all__ = ["PURE", "compiled"]

PURE: Final = os.environ.get("STATESTORE_PURE", "") not in ("", "0")
"""Whether ``STATESTORE_PURE`` asks for the pure-Python paths only."""


def compiled(module: str, name: str) -> Any:
    """``name`` from the compiled ``module``, or ``None`` under :data:`PURE` or if it was not built."""
    if PURE:
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        return None
