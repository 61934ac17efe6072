"""Transactions across stores: the local transaction coordinator and its log's record format.

::

    coordinator.TransactionCoordinator   the commit protocol (T1-T6) and recovery (O1-O2, R1-R3)
      scope                                the threads' transaction blocks: what each covers, who owns a store
      record                               the transaction state record (key, value, byte table)

The state manager owns one coordinator per state directory; the store
builder lets it end open transactions before a partition restores; typed
stores commit through it.  It knows store partitions only through
:class:`statestore.stores.participant.Participant`.
"""
