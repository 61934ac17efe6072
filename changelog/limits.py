"""Integer limits and sentinels shared by every format of the changelog: their one home.

Layer 0 of :mod:`changelog`: imports nothing of the package.  Kafka's Java
types are signed, so a field of type int32 or int64 is bounded by these values;
``NO_TIMESTAMP`` is Kafka's ``RecordBatch.NO_TIMESTAMP``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["INT16_MAX", "INT32_MAX", "INT64_MAX", "INT64_MIN", "NO_TIMESTAMP"]

INT16_MAX: Final = 2**15 - 1
"""Largest value of a Java ``short``: producer epochs, record versions."""

INT32_MAX: Final = 2**31 - 1
"""Largest value of a Java ``int``: relative offsets, positions, counts, segment sizes."""

INT64_MIN: Final = -(2**63)
"""Smallest value of a Java ``long``."""

INT64_MAX: Final = 2**63 - 1
"""Largest value of a Java ``long``: offsets, timestamps, producer ids."""

NO_TIMESTAMP: Final = -1
"""Kafka's ``RecordBatch.NO_TIMESTAMP``: no timestamp (an empty batch, an empty time index)."""
