"""The top layer of a store in time, picked by its :class:`~statestore.stores.time.settings.TimeSettings`.

Thread-safety: a pure function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statestore.serdes import Serde
from statestore.stores.time.base import TimeStoreBase
from statestore.stores.time.session import SessionStore
from statestore.stores.time.settings import TimeSettings
from statestore.stores.time.timestamped import TimestampedKeyValueStore
from statestore.stores.time.ttl import TtlKeyValueStore
from statestore.stores.time.versioned import VersionedKeyValueStore
from statestore.stores.time.window import WindowStore
from statestore.stores.typed import KeyValueStore

__all__ = ["wrap_time_store"]


def wrap_time_store(
    inner: KeyValueStore[bytes, bytes],
    settings: TimeSettings,
    *,
    key_serde: Serde[Any],
    value_serde: Serde[Any],
    now_ms: Callable[[], int],
) -> TimeStoreBase[Any, Any]:
    """The store type of ``settings`` over ``inner`` (built by the builder for ``settings``)."""
    if settings.store_type == "versioned-key-value":
        return VersionedKeyValueStore(
            inner, settings, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms
        )
    if settings.store_type == "session":
        return SessionStore(
            inner, settings, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms
        )
    if settings.store_type == "window":
        return WindowStore(
            inner, settings, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms
        )
    if settings.ttl is not None:
        return TtlKeyValueStore(
            inner, settings.ttl, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms
        )
    return TimestampedKeyValueStore(
        inner, key_serde=key_serde, value_serde=value_serde, now_ms=now_ms
    )
