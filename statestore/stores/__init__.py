"""The store stack, one concern per module, each layer built over the finished one below.

::

    typed.KeyValueStore            serdes, once, at the top; lifecycle checks
      partitioned.PartitionedStore   N partitions routed by murmur2 (only when N > 1)
        buffer.WriteBuffer             the writes of the current commit (read-your-writes)
          change_logging.ChangeLoggingStore   changelog append + RocksDB apply; owns the Log
            engine.RocksDBEngine                RocksDB, bytes in and out, applied offset

``builder.build_store`` is the only code that constructs the stack (inside
out); ``restore`` holds the restore policy (full or incremental) and the
replay; ``spec`` says what a store is and where its files live;
``lifecycle`` is the state table every layer checks; ``bytes_store`` is the
protocol between the typed store and the layers under it.  Modules import
only modules listed below them here.
"""
