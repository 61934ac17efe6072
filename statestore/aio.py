"""asyncio face of a state manager: reads on the loop, commits off it, group commit for all.

::

    async with await AsyncStateManager.open("state") as manager:
        users = await manager.store("users")
        profile = await users.get("alice")                  # committed state
        async with users.transaction() as tx:               # read-modify-write, atomic
            visits = (await tx.get("counter")) or 0
            tx.put("counter", visits + 1)
        # here the transaction is durable (fsynced): it survives kill -9

**Who sees what.**

* ``await store.get/get_many``, ``store.range/prefix_scan`` (async
  iterators): the **committed** state, through the store's
  :class:`~statestore.stores.reader.StoreReader` (consistent per call, never a
  transaction's writes before they are durable and applied).
* Inside a transaction: the transaction's own writes, over the writes of the
  transactions **accepted** before it (their bodies ended; their commit may
  still be in flight), over the committed state.  Transactions of one store
  run their bodies one at a time (each holds the store's ``asyncio.Lock`` from
  ``async with`` to its end), so a read-modify-write is never lost to a
  concurrent one.  A body that awaits something slow keeps the other
  transactions of its stores waiting: do slow work outside it.
* A transaction is **accepted** when its block ends: its writes go to the
  stores' write buffers (all or nothing), its lock is released, and the
  committer takes it in its next round.  It is **committed** (durable, and
  visible to readers) when the round's commit returned; ``async with`` returns
  then.

**Group commit.**  One committer thread (per async manager) runs the rounds:
a round commits every store with accepted writes in one commit (one changelog
batch for one partition, one transaction of the coordinator for several,
:mod:`statestore.txn.coordinator`), covering every transaction accepted before
it began; transactions accepted while it runs go to the next round.  N
concurrent transactions therefore share about one fsync per round, and the
fsync never runs on the event loop (the loop serializes a transaction's writes,
``SCAN_CHUNK`` at a time with a turn of the loop between parts, and puts them
into the buffers in one step).

**Errors** are the synchronous API's typed errors
(:class:`~statestore.errors.StateStoreError` subclasses).  When a round fails,
every transaction of that round fails with its error, and so does every
transaction accepted meanwhile on the same stores (its writes were in the
same buffers, which are discarded): a transaction is never reported failed
while its writes commit later.  ``CommitFailedError(written=False)``: nothing
was written, the stores stay usable; ``written=True`` (and
:class:`~statestore.errors.StoreEngineError`): the store is failed, as in the
synchronous API; ``await manager.store(name)`` reopens it.

**Cancellation.**  Cancelling a task inside a transaction's body aborts the
transaction (nothing of it is written).  Cancelling the ``async with`` exit
while it awaits the commit, or an ``await store.put(...)``, does **not**
cancel the commit: the transaction was accepted and will be committed (or
fail) like any other.  The caller finds out with :attr:`AsyncTransaction.state`
or ``await tx.wait()`` (itself cancellable; the outcome is kept).  A cancel
while a large transaction is still being serialized (before it is accepted)
aborts it.

**Reads on the loop.**  Point reads run on the event loop: a RocksDB lookup
from the block cache or memtable takes microseconds; one that misses reads one
block from disk.  Scans read and decode ``SCAN_CHUNK`` (256) entries at a time
and yield to the loop between chunks.

Lifecycle of the manager: ``open`` -> ``closed`` (:meth:`AsyncStateManager.aclose`
waits for every accepted transaction, then closes the manager off the loop).
A transaction: see :class:`TransactionState` and :data:`_MOVES`.

Thread-safety: every method must be called on the event loop that opened the
manager (the store locks and events are that loop's); only the committer
thread calls the synchronous manager's commit.  The synchronous stores
obtained through an async manager must not be written by other threads.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Generic, TypeVar

from statestore.errors import InvalidStateStoreError
from statestore.manager import StateManager
from statestore.stores.lifecycle import StoreState
from statestore.stores.reader import StoreReader
from statestore.stores.time.ttl import TtlKeyValueStore
from statestore.stores.typed import KeyValueStore

__all__ = [
    "AsyncStateManager",
    "AsyncStore",
    "AsyncStoreTransaction",
    "AsyncTransaction",
    "TransactionState",
]

K = TypeVar("K")
V = TypeVar("V")

SCAN_CHUNK: Final = 256
"""Entries an async scan reads and decodes before it yields to the event loop."""
_MISSING: Final[Any] = object()


class TransactionState(enum.Enum):
    """Where an :class:`AsyncTransaction` is (legal moves: :data:`_MOVES`)."""

    OPEN = "open"
    """Its body runs; it holds its stores' locks; its writes are its own."""
    ACCEPTED = "accepted"
    """Its writes are in the stores' buffers, waiting for (or in) a commit round."""
    COMMITTED = "committed"
    """Durable and visible to readers."""
    FAILED = "failed"
    """Not committed; :attr:`AsyncTransaction.error` says why."""
    ABORTED = "aborted"
    """Its body raised (or was cancelled) or it was aborted: nothing was written."""


_MOVES: Final[dict[TransactionState, frozenset[TransactionState]]] = {
    TransactionState.OPEN: frozenset(
        {TransactionState.ACCEPTED, TransactionState.ABORTED, TransactionState.FAILED}
    ),
    TransactionState.ACCEPTED: frozenset({TransactionState.COMMITTED, TransactionState.FAILED}),
    TransactionState.COMMITTED: frozenset(),
    TransactionState.FAILED: frozenset(),
    TransactionState.ABORTED: frozenset(),
}
"""Every legal move of a transaction (anything else is our bug)."""


class AsyncStateManager:
    """A :class:`~statestore.StateManager` driven from asyncio (module docstring).

    Invariants: ``_accepted`` lists the accepted transactions no round has taken
    yet, in acceptance order; ``_rounds`` is the one task running rounds
    (``None`` when idle); ``_closed`` is set once :meth:`aclose` began.
    """

    def __init__(self, manager: StateManager) -> None:
        """Drive ``manager`` (open) from the running event loop; :meth:`open` makes both."""
        self._manager = manager
        self._committer = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"statestore-commit-{manager.state_dir.name}"
        )
        self._stores: dict[str, AsyncStore[Any, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._accepted: list[AsyncTransaction] = []
        self._rounds: asyncio.Task[None] | None = None
        self._closed = False
        self.rounds = 0
        """Commit rounds run so far (each commits every transaction accepted before it)."""

    @classmethod
    async def open(cls, state_dir: str | Path, **manager_kwargs: Any) -> AsyncStateManager:
        """Open a :class:`~statestore.StateManager` on ``state_dir`` off the loop and drive it."""
        manager = await asyncio.to_thread(
            functools.partial(StateManager, state_dir, **manager_kwargs)
        )
        return cls(manager)

    @property
    def manager(self) -> StateManager:
        """The synchronous manager (metrics, metadata; not for writing the async stores)."""
        return self._manager

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise InvalidStateStoreError(
                f"async manager of {self._manager.state_dir}", "closed", operation
            )

    async def store(self, name: str, **kwargs: Any) -> AsyncStore[Any, Any]:
        """The store ``name``, opened and restored off the loop (arguments: :meth:`StateManager.store`).

        Asking again returns the same :class:`AsyncStore`; a store that failed
        is reopened (restored from its changelog).
        """
        self._check_open("open a store")
        existing = self._stores.get(name)
        if existing is not None and existing.sync.state is StoreState.OPEN:
            return existing
        store = await asyncio.to_thread(functools.partial(self._manager.store, name, **kwargs))
        wrapped: AsyncStore[Any, Any] = AsyncStore(self, store)
        self._stores[name] = wrapped
        self._locks.setdefault(name, asyncio.Lock())
        return wrapped

    async def ttl_store(self, name: str, **kwargs: Any) -> AsyncStore[Any, Any]:
        """The key-value store ``name`` with a TTL, opened and restored off the loop.

        Arguments: :meth:`StateManager.ttl_store`.  Reads skip expired values as
        the synchronous store's do; its sweep runs on the loop before a commit
        round that includes the store, once ``ttl.sweep_interval_ms`` has passed
        (it walks the store: keep the interval long for a large store), so its
        tombstones commit in that round.
        """
        self._check_open("open a store")
        existing = self._stores.get(name)
        if existing is not None and existing.sync.state is StoreState.OPEN:
            return existing
        store = await asyncio.to_thread(functools.partial(self._manager.ttl_store, name, **kwargs))
        store.sweeps_at_commit = False  # swept on the loop (_run_rounds), its buffer's writer
        wrapped: AsyncStore[Any, Any] = AsyncStore(self, store)  # type: ignore[arg-type]
        self._stores[name] = wrapped
        self._locks.setdefault(name, asyncio.Lock())
        return wrapped

    def transaction(self, *stores: AsyncStore[Any, Any]) -> AsyncTransaction:
        """A transaction over ``stores`` (one or more of this manager's), atomic over all of them."""
        self._check_open("transaction")
        if not stores:
            raise InvalidStateStoreError(
                f"async manager of {self._manager.state_dir}", "open", "transaction of no store"
            )
        for store in stores:
            if self._stores.get(store.name) is not store:
                raise InvalidStateStoreError(store.name, "not of this manager", "transaction")
        return AsyncTransaction(self, stores)

    # ------------------------------------------------------------ the committer

    def lock_of(self, name: str) -> asyncio.Lock:
        """The lock a transaction over store ``name`` holds while its body runs."""
        return self._locks[name]

    def accept(self, tx: AsyncTransaction) -> None:
        """Take ``tx`` (its writes now buffered) into the next round; for :class:`AsyncTransaction`."""
        self._accepted.append(tx)
        if self._rounds is None or self._rounds.done():
            self._rounds = asyncio.get_running_loop().create_task(self._run_rounds())

    async def _run_rounds(self) -> None:
        """Run rounds until no transaction is waiting (the task ends when idle)."""
        loop = asyncio.get_running_loop()
        while self._accepted:
            batch, self._accepted = self._accepted, []
            stores = sorted({store.name: store for tx in batch for store in tx.stores}.items())
            syncs = [store.sync for _name, store in stores]
            for _name, store in stores:  # a TTL store's sweep, on the loop: joins the round
                sync: object = store.sync
                if (
                    isinstance(sync, TtlKeyValueStore)
                    and sync.state is StoreState.OPEN
                    and sync.sweep_due()
                ):
                    sync.expire()
            self.rounds += 1
            try:
                await asyncio.shield(
                    loop.run_in_executor(self._committer, _commit, self._manager, syncs)
                )
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - every transaction of the round gets it
                self.fail_round(batch, {name for name, _store in stores}, exc)
                continue
            for tx in batch:
                tx._finish(TransactionState.COMMITTED, None)

    def fail_round(
        self, batch: list[AsyncTransaction], names: set[str], exc: BaseException
    ) -> None:
        """On the loop: fail ``batch`` and every accepted transaction sharing a store with it.

        Called by a failed round, and by a transaction whose writes only some
        of its stores took.

        Their writes were in the same buffers; those buffers are discarded
        (their stores' buffers hold nothing else: every write of an async
        store comes from an accepted transaction), so nothing of a failed
        transaction commits later.
        """
        failed = set(names)
        grown = True
        while grown:  # a transaction over a failed store and another fails both
            grown = False
            for tx in self._accepted:
                tx_names = {store.name for store in tx.stores}
                if tx_names & failed and not tx_names <= failed:
                    failed |= tx_names
                    grown = True
        keep: list[AsyncTransaction] = []
        doomed = list(batch)
        for tx in self._accepted:
            (doomed if {s.name for s in tx.stores} & failed else keep).append(tx)
        self._accepted = keep
        for name in sorted(failed):
            sync = self._stores[name].sync
            if sync.state is StoreState.OPEN:
                sync.abort()
        for tx in doomed:
            tx._finish(TransactionState.FAILED, exc)

    async def aclose(self) -> None:
        """Wait for every accepted transaction, then close the manager off the loop; idempotent."""
        if self._closed:
            return
        self._closed = True
        while self._rounds is not None and not self._rounds.done():
            await asyncio.shield(self._rounds)
        await asyncio.to_thread(self._manager.close)
        await asyncio.to_thread(self._committer.shutdown, wait=True)  # a join: not on the loop

    async def __aenter__(self) -> AsyncStateManager:
        """The manager itself."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """:meth:`aclose`."""
        await self.aclose()


def _commit(manager: StateManager, stores: list[KeyValueStore[Any, Any]]) -> None:
    """One round, on the committer thread: the stores' buffered writes as one commit."""
    if len(stores) == 1:
        stores[0].commit()
        return
    with manager.transaction(*stores):
        pass  # the scoped block's end commits every buffered write of the stores at once


class AsyncStore(Generic[K, V]):
    """One store of an :class:`AsyncStateManager` (module docstring for who sees what)."""

    def __init__(self, manager: AsyncStateManager, store: KeyValueStore[K, V]) -> None:
        """Use :meth:`AsyncStateManager.store`."""
        self._manager = manager
        self._store = store
        self._reader: StoreReader[K, V] = store.reader()

    @property
    def name(self) -> str:
        """The store's name."""
        return self._store.name

    @property
    def sync(self) -> KeyValueStore[K, V]:
        """The synchronous store underneath (its writes belong to the committer: read only)."""
        return self._store

    @property
    def reader(self) -> StoreReader[K, V]:
        """The committed state, for synchronous code on other threads."""
        return self._reader

    async def get(self, key: K, default: V | None = None) -> V | None:
        """The committed value of ``key``, or ``default``."""
        return self._reader.get(key, default)

    async def get_many(self, keys: Iterable[K], default: V | None = None) -> list[V | None]:
        """The committed values of ``keys`` in order, all as of one moment."""
        return self._reader.get_many(keys, default)

    async def contains(self, key: K) -> bool:
        """Whether ``key`` has a committed value."""
        return key in self._reader

    def range(
        self, lo: K | None = None, hi: K | None = None, *, reverse: bool = False
    ) -> AsyncIterator[tuple[K, V]]:
        """Committed entries with ``lo <= key < hi``, as of this call, yielding to the loop per chunk."""
        return _chunked(self._reader.range(lo, hi, reverse=reverse))

    def prefix_scan(self, prefix: Any, *, reverse: bool = False) -> AsyncIterator[tuple[K, V]]:
        """Committed entries whose serialized key starts with the serialized ``prefix``, as of this call."""
        return _chunked(self._reader.prefix_scan(prefix, reverse=reverse))

    def transaction(self) -> AsyncStoreTransaction[K, V]:
        """A transaction over this store alone (``async with store.transaction() as tx``)."""
        return AsyncStoreTransaction(self._manager.transaction(self), self)

    async def put(self, key: K, value: V | None) -> None:
        """Write ``key`` (``None``: delete) as a transaction of its own; returns once it is durable.

        A cancelled await does not cancel the write once accepted (module
        docstring); a caller that must learn the outcome after a cancel keeps
        the transaction: ``tx = store.transaction(); tx.put(k, v); await
        tx.commit()``, then ``tx.state`` / ``await tx.wait()``.
        """
        tx = self._manager.transaction(self)
        tx.put(self, key, value)
        await tx.commit()

    async def delete(self, key: K) -> None:
        """Delete ``key`` as a transaction of its own; returns once it is durable."""
        await self.put(key, None)


async def _chunked(source: Iterator[tuple[K, V]]) -> AsyncIterator[tuple[K, V]]:
    """``source`` (already opened: its moment is fixed), yielding to the loop every chunk."""
    while True:
        chunk = list(itertools.islice(source, SCAN_CHUNK))
        for entry in chunk:
            yield entry
        if len(chunk) < SCAN_CHUNK:
            return
        await asyncio.sleep(0)


class AsyncTransaction:
    """Writes to one or more stores that commit atomically (module docstring).

    Use ``async with manager.transaction(a, b) as tx:`` (or ``await tx.begin()``,
    then ``await tx.commit()`` or ``tx.abort()``).

    Invariants: ``state`` moves only along :data:`_MOVES`; while ``OPEN`` and
    begun, the transaction holds the locks of its stores (taken in name
    order) and ``_writes`` holds its writes (store name -> key -> value,
    ``None`` for a delete), which nothing else sees; ``_done`` is set exactly
    when the state is final.
    """

    def __init__(self, manager: AsyncStateManager, stores: Sequence[AsyncStore[Any, Any]]) -> None:
        """Use :meth:`AsyncStateManager.transaction` or :meth:`AsyncStore.transaction`."""
        self._manager = manager
        self.stores: tuple[AsyncStore[Any, Any], ...] = tuple(
            sorted({s.name: s for s in stores}.values(), key=lambda s: s.name)
        )
        """The stores it covers, by name."""
        self._writes: dict[str, dict[Any, Any]] = {s.name: {} for s in self.stores}
        self._held: list[asyncio.Lock] = []
        self._begun = False
        self.state = TransactionState.OPEN
        """Where the transaction is (:class:`TransactionState`)."""
        self.error: BaseException | None = None
        """Why it failed (``FAILED``), else ``None``."""
        self._done = asyncio.Event()

    def _move(self, state: TransactionState) -> None:
        if state not in _MOVES[self.state]:
            raise AssertionError(f"transaction: {self.state.value} -> {state.value}")
        self.state = state

    def _require_open(self, operation: str) -> None:
        if self.state is not TransactionState.OPEN:
            raise InvalidStateStoreError(
                ",".join(s.name for s in self.stores),
                f"a transaction {self.state.value}",
                operation,
            )

    async def begin(self) -> AsyncTransaction:
        """Take the stores' locks (waiting for earlier transactions' bodies); idempotent."""
        self._require_open("begin")
        if not self._begun:
            try:
                for store in self.stores:
                    lock = self._manager.lock_of(store.name)
                    await lock.acquire()
                    self._held.append(lock)
            except BaseException:  # cancelled while waiting: let go of what it holds
                self._release()
                raise
            self._begun = True
        return self

    def _release(self) -> None:
        held, self._held = self._held, []
        for lock in reversed(held):
            lock.release()

    def _writes_of(self, store: AsyncStore[Any, Any]) -> dict[Any, Any]:
        writes = self._writes.get(store.name)
        if writes is None:
            raise InvalidStateStoreError(store.name, "not in this transaction", "write")
        return writes

    async def get(self, store: AsyncStore[K, V], key: K, default: V | None = None) -> V | None:
        """``key``'s value as this transaction sees it: its writes, then accepted ones, then committed."""
        self._require_open("get")
        await self.begin()
        writes = self._writes_of(store)
        value = writes.get(key, _MISSING)
        if value is _MISSING:
            return store.sync.get(key, default)
        return default if value is None else value

    def put(self, store: AsyncStore[K, V], key: K, value: V | None) -> None:
        """Write ``key`` (``None``: delete) in ``store`` when the transaction commits."""
        self._require_open("put")
        self._writes_of(store)[key] = value

    def delete(self, store: AsyncStore[K, V], key: K) -> None:
        """Delete ``key`` from ``store`` when the transaction commits."""
        self.put(store, key, None)

    def abort(self) -> None:
        """Drop the writes and release the locks (an open transaction only; else nothing)."""
        if self.state is TransactionState.OPEN:
            self._writes = {name: {} for name in self._writes}
            self._release()
            self._move(TransactionState.ABORTED)
            self._done.set()

    async def commit(self) -> None:
        """Accept the writes, then wait until they are durable (or raise the round's error).

        Cancelling this await after acceptance does not cancel the commit
        (module docstring, "Cancellation").
        """
        self._require_open("commit")
        await self.begin()
        try:
            encoded = await self._encode()
            self._accept(encoded)
        finally:
            self._release()
        await self.wait()

    async def _encode(self) -> list[tuple[AsyncStore[Any, Any], list[tuple[bytes, bytes | None]]]]:
        """The writes serialized, per store, ``SCAN_CHUNK`` records per turn of the loop.

        Nothing is buffered yet, so a cancel (the transaction is aborted) or a
        bad key or value (it fails) leaves every store as it was.
        """
        encoded: list[tuple[AsyncStore[Any, Any], list[tuple[bytes, bytes | None]]]] = []
        try:
            for store in self.stores:
                writes = self._writes[store.name]
                if not writes:
                    continue
                if len(writes) <= SCAN_CHUNK:
                    encoded.append((store, store.sync.encode_entries(writes)))
                    continue
                pairs: list[tuple[bytes, bytes | None]] = []
                items = iter(writes.items())
                while chunk := list(itertools.islice(items, SCAN_CHUNK)):
                    pairs += store.sync.encode_entries(chunk)
                    await asyncio.sleep(0)  # a large write does not hold the loop
                encoded.append((store, pairs))
        except asyncio.CancelledError:
            self.abort()
            raise
        except BaseException as exc:
            self._move(TransactionState.FAILED)
            self.error = exc
            self._done.set()
            raise
        return encoded

    def _accept(
        self, encoded: list[tuple[AsyncStore[Any, Any], list[tuple[bytes, bytes | None]]]]
    ) -> None:
        """OPEN -> ACCEPTED: the encoded writes into the stores' buffers, all or nothing, in
        one step on the loop (no await: no round can take part of them)."""
        written: list[AsyncStore[Any, Any]] = []
        try:
            for store, pairs in encoded:
                store.sync.put_encoded(pairs)  # a dict update: cannot fail half way
                written.append(store)
        except BaseException as exc:
            self._move(TransactionState.FAILED)
            self.error = exc
            self._done.set()
            if written:  # another store took its part: discard theirs (and what shares them)
                self._manager.fail_round([], {s.name for s in written}, exc)
            raise
        self._move(TransactionState.ACCEPTED)
        if written:
            self._manager.accept(self)
        else:
            self._finish(TransactionState.COMMITTED, None)

    def _finish(self, state: TransactionState, error: BaseException | None) -> None:
        self._move(state)
        self.error = error
        self._done.set()

    def done(self) -> bool:
        """Whether the outcome is known (committed, failed or aborted)."""
        return self._done.is_set()

    async def wait(self) -> None:
        """Wait for the outcome; raise the error if it failed.  Cancelling it cancels only the wait."""
        await self._done.wait()
        if self.error is not None:
            raise self.error

    async def __aenter__(self) -> AsyncTransaction:
        """:meth:`begin`."""
        return await self.begin()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Commit (and wait for it) on success; abort on an exception (or cancellation) of the body."""
        if exc is not None:
            self.abort()
            return
        if self.state is TransactionState.OPEN:
            await self.commit()


class AsyncStoreTransaction(Generic[K, V]):
    """An :class:`AsyncTransaction` over one store, with the store left out of every call."""

    def __init__(self, transaction: AsyncTransaction, store: AsyncStore[K, V]) -> None:
        """Use :meth:`AsyncStore.transaction`."""
        self.transaction = transaction
        """The transaction (its ``state``, ``error``, ``wait()``)."""
        self._store = store

    @property
    def state(self) -> TransactionState:
        """The transaction's state."""
        return self.transaction.state

    async def get(self, key: K, default: V | None = None) -> V | None:
        """See :meth:`AsyncTransaction.get`."""
        return await self.transaction.get(self._store, key, default)

    def put(self, key: K, value: V | None) -> None:
        """See :meth:`AsyncTransaction.put`."""
        self.transaction.put(self._store, key, value)

    def delete(self, key: K) -> None:
        """See :meth:`AsyncTransaction.delete`."""
        self.transaction.delete(self._store, key)

    async def commit(self) -> None:
        """See :meth:`AsyncTransaction.commit`."""
        await self.transaction.commit()

    def abort(self) -> None:
        """See :meth:`AsyncTransaction.abort`."""
        self.transaction.abort()

    def done(self) -> bool:
        """See :meth:`AsyncTransaction.done`."""
        return self.transaction.done()

    async def wait(self) -> None:
        """See :meth:`AsyncTransaction.wait`."""
        await self.transaction.wait()

    async def __aenter__(self) -> AsyncStoreTransaction[K, V]:
        """Begin the transaction."""
        await self.transaction.begin()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """See :meth:`AsyncTransaction.__aexit__`."""
        await self.transaction.__aexit__(exc_type, exc, tb)
