"""Transaction blocks on threads: what one ``manager.transaction()`` block covers, and who owns a store.

A **block** is one thread's ``with manager.transaction(...):``.  It is
either

* **scoped** (``manager.transaction(orders, positions)``): it covers exactly
  its **enlisted** stores, those named when it starts plus those it enlists
  later (``store.transaction()`` or a nested ``manager.transaction(store)``
  inside it, on its thread).  Its end commits their buffered writes as one
  transaction, its exception discards them, and it leaves every other store
  alone; or
* **unscoped** (``manager.transaction()``, no store named): at its end it
  covers every store that no other thread's scoped block owns, as the
  manager's commit does.

**Ownership.**  A scoped block owns its enlisted stores from the moment it
enlists them until its end: no other block enlists them meanwhile, no
unscoped commit or abort touches them, and no other thread writes them (the
manager, told through ``on_owner``, makes the store raise
:class:`~statestore.errors.InvalidStateStoreError` at such a write, before it
is buffered: else the write would join the block and the block's abort would
discard it after the writer's ``commit()`` had returned).  A block that starts claims all its
stores at once, waiting while any of them is owned (all or nothing, so two
blocks never hold one store each while waiting for the other's: no
deadlock).  A store enlisted later, while the block already owns others, is
claimed only if no other block owns it (else
:class:`~statestore.errors.InvalidStateStoreError`: waiting there could
deadlock).  An unscoped commit or abort (``manager.commit()``,
``manager.abort()``, an unscoped block's end) **claims** every store not
owned by a scoped block for the time it runs, waiting while another unscoped
commit holds one of them (so it returns only once the writes its caller
buffered before it are committed), then releases them; a scoped block that
starts meanwhile waits for that release, so an unscoped commit never takes
the writes of a block that began after it looked.

Threads each running scoped blocks over their own stores therefore never
wait for each other here; their commits meet only in the coordinator
(:mod:`statestore.txn.coordinator`): disjoint partitions' commit locks, the
overlapped data fsyncs (T2), and the decision log's group commit (T3).

Invariants: ``_owners`` maps a store name to the block that owns it or to
the claim of the unscoped commit running over it; a block's ``stores``
are exactly the names ``_owners`` maps to it; a thread has at most one open
block (nested ``manager.transaction()`` calls join it).

Thread-safety: thread-safe; ``_cond`` guards ``_owners`` (and wakes the
waiters when a block ends or a claim is released).  The block of the calling
thread lives in a thread-local: nothing here runs per put.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterator

from statestore.errors import InvalidStateStoreError

__all__ = ["OwnerHook", "TransactionBlock", "TransactionScopes"]

OwnerHook = Callable[[str, int | None], None]
"""``on_owner(store, thread)``: a scoped block on ``thread`` now owns ``store`` (``None``:
no block owns it any more).  Called under the scopes' lock: it must not call back in."""


class TransactionBlock:
    """One thread's open ``manager.transaction()`` block (see the module docstring)."""

    def __init__(self, *, scoped: bool) -> None:
        """A new block; scoped (covers its enlisted stores) or not (covers every free store)."""
        self.scoped = scoped
        """Whether the block covers its enlisted stores only."""
        self.stores: set[str] = set()
        """The enlisted (owned) store names; empty for an unscoped block."""
        self.thread = threading.get_ident()
        """The thread the block runs on."""

    def __repr__(self) -> str:
        """Scoped or not, and the enlisted stores."""
        kind = "scoped" if self.scoped else "unscoped"
        return f"TransactionBlock({kind}, stores={sorted(self.stores)})"


class _Claim:
    """An unscoped commit's or abort's hold on the free stores while it runs."""


class _ThreadBlock(threading.local):
    """Each thread's open block; ``None`` (the class default) on a thread that never opened one,
    so :meth:`TransactionScopes.current` reads an attribute instead of catching a missing one
    (a ``getattr`` default raises and catches an ``AttributeError`` inside: every commit asks)."""

    block: TransactionBlock | None = None


class TransactionScopes:
    """The blocks of every thread and the stores they own (see the module docstring)."""

    def __init__(self, on_owner: OwnerHook | None = None) -> None:
        """No block, no owner; ``on_owner(name, thread)`` is told of every change of a
        store's owning block (see :data:`OwnerHook`)."""
        self._cond = threading.Condition(threading.Lock())
        self._owners: dict[str, TransactionBlock | _Claim] = {}
        self._local = _ThreadBlock()
        self.on_owner = on_owner
        """Called under ``_cond`` with ``(store, block thread)`` when a scoped block claims a
        store and ``(store, None)`` when it releases it (the manager makes the store refuse
        other threads' writes meanwhile)."""

    def current(self) -> TransactionBlock | None:
        """The calling thread's open block, if any."""
        return self._local.block

    def owner(self, name: str) -> TransactionBlock | None:
        """The scoped block owning store ``name`` (``None``: no block owns it)."""
        with self._cond:
            owner = self._owners.get(name)
        return owner if isinstance(owner, TransactionBlock) else None

    @contextlib.contextmanager
    def block(self, names: Collection[str] | None) -> Iterator[tuple[TransactionBlock, bool]]:
        """Open a block on this thread (``names``: scoped over them; ``None``: unscoped).

        Yields ``(block, outermost)``.  Nested in an open block it joins that
        one (``outermost`` false), enlisting ``names`` into it when it is
        scoped.  The outermost block of a scoped call first claims all of
        ``names`` at once, waiting while any is owned; at its end the thread
        has no block and its stores are free again.
        """
        current = self.current()
        if current is not None:
            if names and current.scoped:
                for name in sorted(names):
                    self.enlist(current, name)
            yield current, False
            return
        block = TransactionBlock(scoped=names is not None)
        if names:
            wanted = set(names)
            with self._cond:
                while any(name in self._owners for name in wanted):
                    self._cond.wait()
                for name in wanted:
                    self._owners[name] = block
                    self._tell(name, block.thread)
                block.stores |= wanted
        self._local.block = block
        try:
            yield block, True
        finally:
            self._local.block = None
            self._release(block.stores, block)

    def enlist(self, block: TransactionBlock, name: str) -> None:
        """Add store ``name`` to ``block`` (scoped, open, of this thread) while it runs.

        Waits while an unscoped commit holds the store; raises
        :class:`~statestore.errors.InvalidStateStoreError` if another block owns it.
        """
        if name in block.stores:
            return
        with self._cond:
            while True:
                owner = self._owners.get(name)
                if owner is None:
                    break
                if isinstance(owner, TransactionBlock):
                    raise InvalidStateStoreError(
                        name, "in another thread's transaction", "enlist it in this transaction"
                    )
                self._cond.wait()
            self._owners[name] = block
            self._tell(name, block.thread)
            block.stores.add(name)

    @contextlib.contextmanager
    def claim_free(self, names: Collection[str]) -> Iterator[list[str]]:
        """For an unscoped commit or abort: the ``names`` it may cover, held while it runs.

        Yields, sorted, the names no other thread's block owns (the calling
        thread's own block's are included), after waiting while another
        unscoped commit holds any of them; they are released at the end.
        """
        mine = self.current()
        claim = _Claim()
        with self._cond:
            while any(isinstance(self._owners.get(name), _Claim) for name in names):
                self._cond.wait()
            covered: list[str] = []
            claimed: list[str] = []
            for name in sorted(names):
                owner = self._owners.get(name)
                if owner is None:
                    self._owners[name] = claim
                    claimed.append(name)
                    covered.append(name)
                elif owner is mine:
                    covered.append(name)
        try:
            yield covered
        finally:
            self._release(claimed, claim)

    def _release(self, names: Collection[str], owner: TransactionBlock | _Claim) -> None:
        if not names:
            return
        with self._cond:
            for name in names:
                if self._owners.get(name) is owner:
                    del self._owners[name]
                    if isinstance(owner, TransactionBlock):
                        self._tell(name, None)
            self._cond.notify_all()

    def _tell(self, name: str, thread: int | None) -> None:
        """``on_owner`` (under ``_cond``)."""
        if self.on_owner is not None:
            self.on_owner(name, thread)
