"""The ``statestore`` pytest plugin (registered through the ``pytest11`` entry point).

Fixtures are added here as :mod:`statestore.testing` grows.
"""

from __future__ import annotations
