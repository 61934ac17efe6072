"""Transactions across stores: the local coordinator, its log's record format, what it asks of a store.

::

    coordinator.TransactionCoordinator   the commit protocol (T1-T6) and recovery (O1-O2, R1-R3)
      scope                                the threads' transaction blocks: what each covers, who owns a store
      record                               the transaction state record (key, value, byte table)
      participant.Participant              what it needs of one store partition (the protocol)
        commit_lock.CommitLock               one commit of a partition at a time, fsyncs shared

The state manager owns one coordinator per state directory; the store
builder lets it end open transactions before a partition restores; typed
stores commit through it.  It knows store partitions only through
:class:`~statestore.txn.participant.Participant`, which the store stack
(:mod:`statestore.stores`, above this package) implements.
"""
