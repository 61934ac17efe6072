"""``AppendInfo``: where one ``Log.append`` put its batch (Kafka's ``LogAppendInfo``, reduced).

Thread-safety: immutable, thread-safe.
"""

from __future__ import annotations

import attrs

__all__ = ["AppendInfo"]


@attrs.frozen(kw_only=True)
class AppendInfo:
    """Where one :meth:`Log.append` put its batch."""

    first_offset: int
    """Offset of the first record."""
    last_offset: int
    """Offset of the last record (``first_offset + len(records) - 1``)."""
    timestamp_ms: int
    """The CreateTime every record got."""
    size_bytes: int
    """Size of the batch in the ``.log`` file."""
    segment_base_offset: int
    """Base offset of the segment that holds it."""
    flushed: bool
    """Whether the append was fsynced before returning (the flush policy decides)."""
    flush_time_s: float = 0.0
    """Wall time of that fsync in seconds (0.0 when not flushed; Kafka's ``LogFlushRateAndTimeMs``)."""
