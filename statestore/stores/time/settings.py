"""Which store in time a store is, and its time settings: :class:`TimeSettings`.

Session stores (:meth:`TimeSettings.session`) follow Kafka Streams'
``Stores.persistentSessionStore``: the same segment interval default and
changelog settings as window stores, with the session *end* as the time.

A :class:`~statestore.stores.spec.StoreSpec` with ``time=None`` is a plain
key-value store.  With :class:`TimeSettings` the builder picks the lower
layers' capabilities from it (:attr:`TimeSettings.timestamped`: the
change-logging layer's timestamped value format; :attr:`TimeSettings.segmented`:
the segmented engine) and the store's metadata file records it
(:meth:`TimeSettings.to_doc`), so a reopen with other settings is refused.

Window store defaults follow Kafka Streams' ``Stores.persistentWindowStore``:
the segment interval is ``max(retention / 2, 60 s)``; the changelog is
``cleanup.policy=compact,delete`` with ``retention.ms`` = the store's
retention + one day (``windowstore.changelog.additional.retention.ms``).

Immutable values; thread-safe.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import attrs

from changelog import LogConfig
from statestore.errors import InvalidStoreConfigError
from statestore.stores.time.layout import (
    SESSION_SUFFIX_BYTES,
    TIMESTAMP,
    TIMESTAMP_BYTES,
    VALUE_VERSION,
    WINDOW_SUFFIX_BYTES,
    RecordFormat,
    split_session_key,
    split_timestamp,
    split_windowed_key,
)

__all__ = [
    "ADDITIONAL_RETENTION_MS",
    "MIN_SEGMENT_INTERVAL_MS",
    "StoreType",
    "TimeSettings",
    "TtlSettings",
    "TtlTimestamp",
]

StoreType = Literal["timestamped-key-value", "window", "session", "versioned-key-value"]
_STORE_TYPES: Final = ("timestamped-key-value", "window", "session", "versioned-key-value")
_NEVER: Final = 2**62
"""A versioned store's engine segment interval and retention: one segment that never expires."""

ADDITIONAL_RETENTION_MS: Final = 24 * 3600 * 1000
"""Kafka Streams' ``windowstore.changelog.additional.retention.ms`` default (one day)."""
MIN_SEGMENT_INTERVAL_MS: Final = 60_000
"""Kafka Streams' smallest default segment interval (``max(retention / 2, 60 s)``)."""


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidStoreConfigError(attribute.name, value, "must be an integer >= 0")


def _store_type(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in _STORE_TYPES:
        raise InvalidStoreConfigError(attribute.name, value, f"must be one of {_STORE_TYPES}")


TtlTimestamp = Literal["wall-clock", "record"]
_TTL_TIMESTAMPS: Final = ("wall-clock", "record")


def _ttl_timestamp(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in _TTL_TIMESTAMPS:
        raise InvalidStoreConfigError(attribute.name, value, f"must be one of {_TTL_TIMESTAMPS}")


def _at_least_one(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    _check_positive(attribute.name, value)


@attrs.frozen(kw_only=True)
class TtlSettings:
    """A key-value store's time to live (docs/time.md, "TTL").

    A value has expired once ``now - its timestamp >= ttl_ms``, ``now`` being
    the manager's clock (the wall clock unless a test injects one).  Its
    timestamp is the clock when it was put (``timestamp="wall-clock"``) or the
    ``timestamp_ms`` given to ``put`` (``timestamp="record"``: the input
    record's timestamp, as Kafka Streams stamps a timestamped store; the
    clock when none is given).  ``sweep_interval_ms``: how often a commit of
    the manager first writes tombstones for the keys that expired (0: at every
    commit); it is not part of the store's identity.
    """

    ttl_ms: int = attrs.field(validator=_at_least_one)
    """How long a value lives after its timestamp."""
    timestamp: TtlTimestamp = attrs.field(default="wall-clock", validator=_ttl_timestamp)
    """What a value's age is measured from: ``wall-clock`` (its put) or ``record`` (its ``timestamp_ms``)."""
    sweep_interval_ms: int = attrs.field(default=60_000, validator=_non_negative, eq=False)
    """How long after the open or the last sweep a commit sweeps expired keys into tombstones (0: every commit)."""


def _ttl_or_none(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, TtlSettings):
        raise InvalidStoreConfigError(attribute.name, value, "must be a TtlSettings or None")


@attrs.frozen(kw_only=True)
class TimeSettings:
    """A store in time: its type and, for a window store, window size, retention and segments.

    Build with :meth:`timestamped_key_value` or :meth:`window`; they check the
    settings together (a window store needs ``retention_ms >= window_size_ms``
    and a segment interval of at least 1 ms).
    """

    store_type: StoreType = attrs.field(validator=_store_type)
    window_size_ms: int = attrs.field(default=0, validator=_non_negative)
    """Window stores: the size of every window (informative to the store; Kafka's ``windowSize``)."""
    retention_ms: int = attrs.field(default=0, validator=_non_negative)
    """Window (session) stores: a window is dropped once its start (end) ``<= stream time - retention_ms``."""
    segment_interval_ms: int = attrs.field(default=0, validator=_non_negative)
    """Window and session stores: the time span of one RocksDB segment (dropped whole when expired)."""
    retain_duplicates: bool = attrs.field(
        default=False, validator=attrs.validators.instance_of(bool)
    )
    """Window stores: keep every put of a key and window (a seqnum each), as Kafka's joins do."""
    ttl: TtlSettings | None = attrs.field(default=None, validator=_ttl_or_none)
    """Timestamped key-value stores: the time to live of a value (``None``: values live until deleted)."""

    @classmethod
    def timestamped_key_value(cls, *, ttl: TtlSettings | None = None) -> TimeSettings:
        """A timestamped key-value store (with ``ttl``: a key-value store whose values expire)."""
        return cls(store_type="timestamped-key-value", ttl=ttl)

    @classmethod
    def window(
        cls,
        *,
        window_size_ms: int,
        retention_ms: int,
        segment_interval_ms: int | None = None,
        retain_duplicates: bool = False,
    ) -> TimeSettings:
        """A window store's settings (Kafka Streams' ``persistentWindowStore`` arguments)."""
        for name, value in (("window_size_ms", window_size_ms), ("retention_ms", retention_ms)):
            _check_positive(name, value)
        if retention_ms < window_size_ms:
            raise InvalidStoreConfigError(
                "retention_ms", retention_ms, f"must be >= window_size_ms ({window_size_ms})"
            )
        if segment_interval_ms is None:
            segment_interval_ms = max(retention_ms // 2, MIN_SEGMENT_INTERVAL_MS)
        _check_positive("segment_interval_ms", segment_interval_ms)
        return cls(
            store_type="window",
            window_size_ms=window_size_ms,
            retention_ms=retention_ms,
            segment_interval_ms=segment_interval_ms,
            retain_duplicates=retain_duplicates,
        )

    @classmethod
    def session(cls, *, retention_ms: int, segment_interval_ms: int | None = None) -> TimeSettings:
        """A session store's settings (Kafka Streams' ``persistentSessionStore`` arguments)."""
        _check_positive("retention_ms", retention_ms)
        if segment_interval_ms is None:
            segment_interval_ms = max(retention_ms // 2, MIN_SEGMENT_INTERVAL_MS)
        _check_positive("segment_interval_ms", segment_interval_ms)
        return cls(
            store_type="session",
            retention_ms=retention_ms,
            segment_interval_ms=segment_interval_ms,
        )

    @classmethod
    def versioned_key_value(cls, *, history_retention_ms: int) -> TimeSettings:
        """A versioned key-value store's settings (KIP-889's ``historyRetention``)."""
        _check_positive("history_retention_ms", history_retention_ms)
        return cls(store_type="versioned-key-value", retention_ms=history_retention_ms)

    @property
    def record_format(self) -> RecordFormat:
        """The change-logging layer's record format (:mod:`statestore.stores.time.layout`)."""
        if self.store_type == "versioned-key-value":
            return "versioned"
        return "timestamped" if self.timestamped else "plain"

    @property
    def engine_retention_ms(self) -> int:
        """The segmented engine's retention (a versioned store's single segment never expires)."""
        return _NEVER if self.store_type == "versioned-key-value" else self.retention_ms

    @property
    def engine_segment_interval_ms(self) -> int:
        """The segmented engine's segment interval (a versioned store: one segment)."""
        return _NEVER if self.store_type == "versioned-key-value" else self.segment_interval_ms

    @property
    def history_prune_interval_ms(self) -> int | None:
        """A versioned store's prune interval: ``max(history retention // 2, 1)`` (``None``: other types).

        The segmented engine prunes superseded versions up to the last multiple of
        it at or below ``stream time - history retention``
        (:mod:`statestore.stores.time.segments`), as Kafka Streams' versioned
        store drops a segment of old versions once the history retention has
        passed it.
        """
        if self.store_type != "versioned-key-value":
            return None
        return max(self.retention_ms // 2, 1)

    @property
    def timestamped(self) -> bool:
        """Whether RocksDB values are ``timestamp | value`` (the change-logging layer's format).

        Session stores keep plain values (Kafka Streams' session stores are not timestamped).
        """
        return self.store_type in ("timestamped-key-value", "window")

    @property
    def segmented(self) -> bool:
        """Whether RocksDB is segmented by time (:class:`~statestore.stores.time.segments.SegmentedEngine`)."""
        return self.store_type != "timestamped-key-value"

    @property
    def key_suffix_bytes(self) -> int:
        """The fixed-size suffix after the key bytes of a segmented store's RocksDB key (before its segment id)."""
        if self.store_type == "versioned-key-value":
            return TIMESTAMP_BYTES
        return SESSION_SUFFIX_BYTES if self.store_type == "session" else WINDOW_SUFFIX_BYTES

    def changelog_config(self, base: LogConfig) -> LogConfig:
        """``base`` as this store's changelog needs it.

        With a TTL: ``record_ttl_ms`` = the TTL (the cleaner removes expired
        records, restore applies them as deletes).  Window, session:
        ``compact,delete`` with retention + 1 day; versioned:
        ``min_compaction_lag_ms`` = history retention + 1 day (Kafka Streams'
        versioned changelog), so the cleaner keeps the history a restore needs
        (``max_compaction_lag_ms`` raised to it if below).
        """
        if self.store_type == "versioned-key-value":
            lag = self.retention_ms + ADDITIONAL_RETENTION_MS
            return attrs.evolve(
                base,
                min_compaction_lag_ms=lag,
                max_compaction_lag_ms=max(base.max_compaction_lag_ms, lag),
            )
        if not self.segmented:
            if self.ttl is not None:
                return attrs.evolve(base, record_ttl_ms=self.ttl.ttl_ms)
            return base
        return attrs.evolve(
            base,
            cleanup_policy="compact,delete",
            retention_ms=self.retention_ms + ADDITIONAL_RETENTION_MS,
        )

    def split_entry(
        self, key: bytes, value: bytes | None
    ) -> tuple[bytes, dict[str, int], bytes | None]:
        """A RocksDB entry of this store as ``(serialized key, time fields, serialized value)``.

        For tools (the CLI's ``scan`` and ``get``): the time fields are
        ``window_start_ms``/``seqnum`` (window), ``start_ms``/``end_ms``
        (session), ``timestamp_ms`` (timestamped values, versions); the value
        is ``None`` for a versioned delete.  ``ValueError`` if the bytes do not
        have this store's layout.
        """
        fields: dict[str, int] = {}
        if self.store_type == "window":
            if len(key) < WINDOW_SUFFIX_BYTES:
                raise ValueError(f"key {key!r:.60} is shorter than a windowed key")
            key, fields["window_start_ms"], fields["seqnum"] = split_windowed_key(key)
        elif self.store_type == "session":
            if len(key) < SESSION_SUFFIX_BYTES:
                raise ValueError(f"key {key!r:.60} is shorter than a session key")
            key, fields["start_ms"], fields["end_ms"] = split_session_key(key)
        elif self.store_type == "versioned-key-value":
            if len(key) < TIMESTAMP_BYTES or not value:
                raise ValueError(f"entry {key!r:.60} is not a version")
            fields["timestamp_ms"] = int(TIMESTAMP.unpack_from(key, len(key) - TIMESTAMP_BYTES)[0])
            key = key[:-TIMESTAMP_BYTES]
            return key, fields, None if value[:1] != VALUE_VERSION else value[1:]
        if self.timestamped and value is not None:
            if len(value) < TIMESTAMP_BYTES:
                raise ValueError(f"value {value!r:.60} is shorter than a timestamp")
            fields["timestamp_ms"], value = split_timestamp(value)
        return key, fields, value

    def to_doc(self) -> dict[str, Any]:
        """The JSON object the store's metadata file records."""
        return attrs.asdict(self)

    @classmethod
    def from_doc(cls, doc: object) -> TimeSettings:
        """The settings recorded by :meth:`to_doc`; ``ValueError`` if ``doc`` is not such an object."""
        names = {a.name for a in attrs.fields(cls)}
        # a store recorded before TTL existed has no "ttl": it has none
        if not isinstance(doc, dict) or set(doc) not in (names, names - {"ttl"}):
            raise ValueError(f"not a time settings object: {doc!r:.120}")
        try:
            ttl = doc.get("ttl")
            if ttl is not None:
                ttl_names = {a.name for a in attrs.fields(TtlSettings)}
                if not isinstance(ttl, dict) or set(ttl) != ttl_names:
                    raise ValueError(f"not a TTL settings object: {ttl!r:.120}")
                ttl = TtlSettings(**ttl)
            return cls(**{**doc, "ttl": ttl})
        except InvalidStoreConfigError as exc:
            raise ValueError(str(exc)) from exc


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidStoreConfigError(name, value, "must be an integer >= 1")
