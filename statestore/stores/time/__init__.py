"""Stores in time: timestamped key-value, window, session and versioned stores over the one store stack.

::

    layout          byte layouts (timestamped value, windowed and session keys, segmented RocksDB key)
    settings        TimeSettings: which store type, window size, retention, segments
    segments        SegmentedEngine: RocksDB segmented by time (the engine layer)
    base            TimeStoreBase: what the top layers share (lifecycle, commits, serdes)
    timestamped     TimestampedKeyValueStore: put with a timestamp, get_with_timestamp
    ttl             TtlKeyValueStore: a key-value store whose values expire (TtlSettings)
    window          WindowStore: Kafka Streams' WindowStore
    session         SessionStore: Kafka Streams' SessionStore, session merging
    versioned       VersionedKeyValueStore: KIP-889, as-of reads, history retention
    top             wrap_time_store: the top layer for a TimeSettings

The lower layers carry two narrow capabilities for these stores, chosen by the
builder from :class:`~statestore.stores.time.settings.TimeSettings`: the
change-logging layer's record format (``timestamped``: RocksDB holds
``timestamp | value``, the changelog record ``value`` with the timestamp as
its CreateTime; ``versioned``: RocksDB holds ``key | timestamp``, the changelog
record ``key`` at that time), and the segmented engine.  The top layers wrap the typed
store of raw bytes (:class:`~statestore.stores.typed.KeyValueStore` with
:class:`~statestore.serdes.BytesSerde`), so buffering, commits, transactions,
metrics and lifecycle are the key-value store's own.
"""
