"""``python -m statestore``: the ``statestore`` command line (see :mod:`statestore.cli`)."""

from __future__ import annotations

from statestore.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
