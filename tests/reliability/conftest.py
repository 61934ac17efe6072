"""Reliability suite: sizes from the environment.

- ``STATESTORE_CI_TRIALS`` (default 3): kill -9 trials per mode in the normal suite;
- ``STATESTORE_SOAK_TRIALS`` (default 5): trials per kill -9 mode of the ``slow``
  soak tests (``-m slow``; the documented soak run uses 200);
- ``STATESTORE_SOAK_SCALE`` (default 2): how many times more data the ``slow``
  crash-point scenarios prepare (the documented soak run uses 4).

The defaults keep the ``slow`` tier of ``.ci/run`` bounded.  The summary lines
(``statestore-reliability ...``) are printed by ``tests/conftest.py``, which also
gathers them from pytest-xdist workers.
"""

from __future__ import annotations

import os


def env_int(name: str, default: int) -> int:
    """A positive integer from the environment."""
    value = int(os.environ.get(name, default))
    if value < 1:
        raise ValueError(f"{name} must be >= 1, not {value}")
    return value


CI_TRIALS = env_int("STATESTORE_CI_TRIALS", 3)
SOAK_TRIALS = env_int("STATESTORE_SOAK_TRIALS", 5)
SOAK_SCALE = env_int("STATESTORE_SOAK_SCALE", 2)
