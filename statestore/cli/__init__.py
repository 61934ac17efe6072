"""The ``statestore`` command line: inspect, dump, verify, compact, restore, get and scan.

Entry points: the ``statestore`` console script and ``python -m statestore``
both call :func:`main`.  See docs/cli.md.
"""

from __future__ import annotations

from statestore.cli.app import main

__all__ = ["main"]
