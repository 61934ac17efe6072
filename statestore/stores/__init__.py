"""The store stack, one concern per module, each layer built over the finished one below.

::

    builder.build_store              builds the stack below, inside out (the only code that does)
    time.*                           window, session, timestamped, versioned: top layers over typed
    typed.KeyValueStore              serdes, once, at the top; lifecycle checks
      partitioned.PartitionedStore     N partitions routed by murmur2 (only when N > 1)
        metered.MeteredStore             counts and times (only when metrics are on)
          buffer.WriteBuffer               the writes of the current commit (read-your-writes)
            caching.CachingStore             committed values in memory (distributed key-value stores)
            change_logging.ChangeLoggingStore   changelog append + RocksDB apply; owns the Log
              restore, reader                    replay into the engine; committed reads
                engine.RocksDBEngine               RocksDB, bytes in and out, applied offset
    lifecycle, spec, metadata, bytes_store, time.layout, time.settings   the leaves

``restore`` holds the restore policy (full or incremental) and the replay;
``spec`` says what a store is and where its files live; ``metadata`` is its
persisted identity; ``lifecycle`` is the state table every layer checks;
``bytes_store`` is the protocol between the typed store and the layers under
it.  The layers below the typed store are the transaction coordinator's
participants (:class:`statestore.txn.participant.Participant`) and record into
:mod:`statestore.metrics`; both packages sit below this one.  Modules import
only modules drawn below them here (``tests/test_architecture.py``).
"""
