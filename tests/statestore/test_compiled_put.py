"""The compiled put (``statestore/stores/_put.c``) does what ``KeyValueStore.put`` does.

Its fast path buffers the same bytes; everything else (a closed or failed store, a key or
value the serde refuses, a record too large, a delete, keyword arguments) goes to the
Python put, which raises the store's typed errors.  The rest of the store tests (and the
Hypothesis state machines) run through it too; these pin the edges.
"""

from __future__ import annotations

import gc
import re
import weakref
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from changelog import native
from changelog.config import LogConfig
from statestore.errors import InvalidStateStoreError, RecordTooLargeForLogError, SerializationError
from statestore.serdes import BytesSerde, IntSerde, MsgpackSerde, StringSerde
from statestore.stores import typed
from statestore.stores.typed import KeyValueStore
from tests.statestore.conftest import OpenManager
from tests.statestore.helpers import NO_CLEANER, changelog_entries


def test_the_compiled_put_is_built_unless_pure() -> None:
    """CI builds it (a C compiler is there); without it a put pays one Python frame more.
    Under ``STATESTORE_PURE=1`` it must not be in use."""
    assert typed.compiled_put_available() is not native.PURE


def _stores(open_manager: OpenManager) -> tuple[Any, Any]:
    manager = open_manager()
    fast = manager.store("fast", key_serde=BytesSerde(), value_serde=MsgpackSerde())
    text = manager.store("text", key_serde=StringSerde(), value_serde=MsgpackSerde())
    return fast, text


@pytest.mark.compiled
def test_the_store_put_is_the_compiled_one(open_manager: OpenManager) -> None:
    fast, text = _stores(open_manager)
    assert type(fast.put).__name__ == "Putter"
    assert type(text.put).__name__ == "Putter"


def test_it_writes_the_same_bytes_as_the_python_put(open_manager: OpenManager) -> None:
    """Observed where the bytes end up (the changelog), not in a layer's private buffer."""
    fast, text = _stores(open_manager)
    python_put = KeyValueStore.put
    for store, keys in ((fast, [b"a", b"b"]), (text, ["a", "b"])):
        store.put(keys[0], {"n": 1, "s": "x" * 300})
        store[keys[1]] = [1, 2, 3]
        assert store.get(keys[0]) == {"n": 1, "s": "x" * 300}  # read-your-writes
        assert store.commit() == 2
        compiled = changelog_entries(store.changelog)
        python_put(store, keys[0], {"n": 1, "s": "x" * 300})
        python_put(store, keys[1], [1, 2, 3])
        assert store.get(keys[0]) == {"n": 1, "s": "x" * 300}
        assert store.commit() == 2
        python = changelog_entries(store.changelog)[len(compiled) :]
        assert len(compiled) == 2
        assert python == compiled
        assert store.get(keys[1]) == [1, 2, 3]


def test_a_delete_a_keyword_call_and_setitem_work(open_manager: OpenManager) -> None:
    fast, _ = _stores(open_manager)
    fast.put(b"k", 1)
    fast.commit()
    fast.put(b"k", None)  # a delete: the Python path
    assert fast.get(b"k") is None
    fast.put(key=b"j", value=2)  # keyword arguments: the Python path
    fast[b"i"] = 3
    assert fast.commit() == 3
    assert (fast.get(b"j"), fast.get(b"i"), fast.get(b"k")) == (2, 3, None)


def test_a_closed_store_raises_the_typed_error(open_manager: OpenManager) -> None:
    fast, text = _stores(open_manager)
    put_fast, put_text = fast.put, text.put  # bound before the close: still refused after it
    fast.close()
    text.close()
    with pytest.raises(InvalidStateStoreError):
        put_fast(b"k", 1)
    with pytest.raises(InvalidStateStoreError):
        put_text("k", 1)


@pytest.mark.parametrize(
    ("key", "value"),
    [(b"k", object()), ("not bytes", 1), (None, 1), (b"k", {1j: 2})],
)
def test_what_the_serde_refuses_raises_serialization_error(
    open_manager: OpenManager, key: Any, value: Any
) -> None:
    fast, _ = _stores(open_manager)
    with pytest.raises(SerializationError):
        fast.put(key, value)
    assert fast.pending_count == 0


def test_a_text_store_refuses_bytes_and_none_keys(open_manager: OpenManager) -> None:
    _, text = _stores(open_manager)
    with pytest.raises(SerializationError):
        text.put(b"bytes", 1)
    with pytest.raises(SerializationError):
        text.put(None, 1)
    assert text.pending_count == 0


def test_a_record_too_large_raises_and_buffers_nothing(open_manager: OpenManager) -> None:
    manager = open_manager(log_config=LogConfig(max_message_bytes=1000))
    store = manager.store("kv", key_serde=BytesSerde(), value_serde=MsgpackSerde())
    with pytest.raises(RecordTooLargeForLogError):
        store.put(b"k", b"x" * 2000)
    assert store.pending_count == 0


class _Interrupting:
    """A value serde that raises KeyboardInterrupt: not an Exception, so never swallowed."""

    def serialize(self, obj: Any, /) -> bytes:
        raise KeyboardInterrupt

    def deserialize(self, data: bytes, /) -> Any:
        return data


@pytest.mark.compiled
def test_a_base_exception_of_the_serde_propagates_as_is(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("kv", key_serde=BytesSerde(), value_serde=_Interrupting())
    assert type(store.put).__name__ == "Putter"
    with pytest.raises(KeyboardInterrupt):
        store.put(b"k", 1)


def test_a_subclass_that_overrides_put_keeps_its_put(open_manager: OpenManager) -> None:
    calls: list[Any] = []

    class Counting(KeyValueStore[Any, Any]):
        def put(self, key: Any, value: Any) -> None:
            calls.append(key)
            super().put(key, value)

    manager = open_manager()
    store = manager.store("kv", key_serde=BytesSerde(), value_serde=MsgpackSerde())
    counting = Counting(
        name="kv",
        inner=store._inner,
        key_serde=BytesSerde(),
        value_serde=MsgpackSerde(),
        max_record_bytes=store._max_record_bytes,
        committer=store._committer,
        reader=store.reader(),
    )
    assert "put" not in vars(counting)  # no compiled put over an overridden one
    counting.put(b"k", 1)
    counting[b"j"] = 2
    assert calls == [b"k", b"j"]
    assert counting.pending_count == 2


def test_a_closed_store_is_collected(open_manager: OpenManager) -> None:
    manager = open_manager()
    store = manager.store("gone", key_serde=BytesSerde(), value_serde=MsgpackSerde())
    store.put(b"k", 1)
    store.commit()
    ref = weakref.ref(store)
    store.close()
    manager._stores.pop("gone", None)  # the manager forgets a closed store
    del store
    gc.collect()
    assert ref() is None, "the put's reference cycle (store -> put -> store) was not collected"


# ---------------------------------------------------- the write buffer's forget, the fill


def _python_forget(pending: dict[bytes, Any], records: list[tuple[bytes, Any]]) -> None:
    for key, value in records:
        current = pending.pop(key, None)
        if current is not value and current is not None:
            pending.setdefault(key, current)


def test_forget_drops_exactly_what_was_committed() -> None:
    from statestore.stores import _put  # noqa: PLC0415 - the compiled module itself

    pending: dict[bytes, Any] = {b"a": b"1", b"b": b"2", b"c": None, b"d": b"4"}
    records = list(pending.items())
    pending[b"b"] = b"rewritten"  # another thread, during the commit
    pending[b"e"] = b"new"
    del pending[b"d"]  # an abort() and a rewrite would look like this
    expected = dict(pending)
    _python_forget(expected, records)
    _put.forget(pending, records)
    assert pending == expected == {b"b": b"rewritten", b"e": b"new"}


def _buffer_of(store: KeyValueStore[Any, Any]) -> Any:
    """The write buffer under a one-partition store."""
    part: Any = store._inner
    while not hasattr(part, "fast_path"):
        part = part.inner
    return part


def _engine_of(store: KeyValueStore[Any, Any]) -> Any:
    """The RocksDB engine under a one-partition store."""
    part: Any = store._inner
    while not hasattr(part, "engine"):
        part = part.inner
    return part.engine


@pytest.mark.compiled
def test_fill_puts_and_deletes_like_the_loop(open_manager: OpenManager) -> None:
    from statestore.stores import engine as engine_module  # noqa: PLC0415

    assert engine_module._FILL is not None
    fast, _ = _stores(open_manager)
    fast.put(b"gone", 1)
    fast.put(b"kept", 2)
    fast.commit()
    fast.put(b"gone", None)
    fast.put(b"new", 3)
    fast.commit()
    assert (fast.get(b"gone"), fast.get(b"kept"), fast.get(b"new")) == (None, 2, 3)


def test_fill_raises_what_the_loop_raises(
    open_manager: OpenManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statestore.stores import engine as engine_module  # noqa: PLC0415

    engine = _engine_of(_stores(open_manager)[0])
    with pytest.raises(Exception) as compiled:
        engine.write([(b"ok", b"v"), ("not bytes", b"v")], 1)
    monkeypatch.setattr(engine_module, "_FILL", None)
    with pytest.raises(type(compiled.value)):
        engine.write([(b"ok", b"v"), ("not bytes", b"v")], 1)
    assert engine.get(b"ok") is None  # nothing was written either way


class _RecordingBatch:
    """Stands in for a WriteBatch: records the calls ``fill`` makes, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.calls.append(("put", key, value))

    def delete(self, key: bytes) -> None:
        self.calls.append(("delete", key, None))


def test_fill_hands_the_records_over_in_key_order_and_keeps_a_repeated_keys_order() -> None:
    """Key order (memcmp, then length: RocksDB's bytewise order) makes the memtable insert
    cheaper; a stable sort keeps the last write of a repeated key last."""
    from statestore.stores import _put  # noqa: PLC0415

    records: list[tuple[bytes, bytes | None]] = [
        (b"b", b"1"),
        (b"ab", None),
        (b"a", b"2"),
        (b"", b"empty"),
        (b"b", b"3"),
        (b"a\x00", b"4"),
        (b"b", None),
        (b"\xff", b"5"),
    ]
    batch = _RecordingBatch()
    _put.fill(batch, records)
    assert batch.calls == [
        ("put", b"", b"empty"),
        ("put", b"a", b"2"),
        ("put", b"a\x00", b"4"),
        ("delete", b"ab", None),
        ("put", b"b", b"1"),
        ("put", b"b", b"3"),
        ("delete", b"b", None),
        ("put", b"\xff", b"5"),
    ]
    # a key that is not bytes: the list's own order, so rocksdict raises on that record
    mixed: list[Any] = [(b"b", b"1"), ("a", b"2")]
    batch = _RecordingBatch()
    _put.fill(batch, mixed)
    assert [call[1] for call in batch.calls] == [b"b", "a"]


def test_the_sorted_fill_leaves_the_database_the_loop_leaves(
    open_manager: OpenManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statestore.stores import engine as engine_module  # noqa: PLC0415

    engine = _engine_of(_stores(open_manager)[0])
    records: list[tuple[bytes, bytes | None]] = [
        (b"%03d" % (i * 37 % 101), None if i % 5 == 0 else b"v%d" % i) for i in range(300)
    ]
    engine.write(records, 1)
    compiled = dict(engine.items())
    for key, _ in records:
        engine.write([(key, None)], 2)
    monkeypatch.setattr(engine_module, "_FILL", None)
    engine.write(records, 3)
    assert dict(engine.items()) == compiled
    expected: dict[bytes, bytes] = {}
    for key, value in records:
        if value is None:
            expected.pop(key, None)
        else:
            expected[key] = value
    assert compiled == expected


def test_forget_and_fill_take_the_dict_snapshot_as_they_take_a_list() -> None:
    """take() hands over a copy of the pending dict (no tuple per record); forget and fill
    walk it in C with the same rules as for a list of pairs."""
    from statestore.stores import _put  # noqa: PLC0415

    pending: dict[bytes, Any] = {b"b": b"2", b"a": b"1", b"c": None, b"d": b"4"}
    snapshot = pending.copy()
    pending[b"b"] = b"rewritten"
    pending[b"e"] = b"new"
    del pending[b"d"]
    expected = dict(pending)
    _python_forget(expected, list(snapshot.items()))
    _put.forget(pending, snapshot)
    assert pending == expected == {b"b": b"rewritten", b"e": b"new"}
    with pytest.raises(ValueError, match="snapshot"):
        _put.forget(pending, pending)
    with pytest.raises(TypeError):
        _put.forget(pending, (b"a", b"1"))  # type: ignore[arg-type]
    batch = _RecordingBatch()
    _put.fill(batch, snapshot)
    assert batch.calls == [
        ("put", b"a", b"1"),
        ("put", b"b", b"2"),
        ("delete", b"c", None),
        ("put", b"d", b"4"),
    ]
    batch = _RecordingBatch()
    _put.fill(batch, {})
    assert batch.calls == []


@pytest.mark.compiled
def test_the_compiled_put_does_the_buffers_put_or_calls_the_layer_below() -> None:
    """Given the buffer's compiled put (a ``Pending``) it does that put without the call; given
    any other callable it calls it."""
    from statestore.stores import _put  # noqa: PLC0415

    pending: dict[bytes, bytes | None] = {}
    offered = _put.Pending(pending, {}.get)
    calls: list[tuple[bytes, bytes | None]] = []

    def record(key: bytes, value: bytes | None) -> None:
        calls.append((key, value))

    def slow(key: object, value: object) -> None:
        raise AssertionError("the fast path should take these")

    for target in (offered, record):
        put = _put.Putter([True], None, lambda v: b"v" + v, 100, target, slow)
        put(b"k", b"1")
    assert pending == {b"k": b"v1"}
    assert calls == [(b"k", b"v1")]
    offered(b"j", None)  # the buffer's own put: a tombstone too
    assert pending == {b"k": b"v1", b"j": None}
    with pytest.raises(TypeError):
        offered(b"j")  # type: ignore[call-arg]


@pytest.mark.compiled
def test_an_emptied_cell_takes_the_slow_path_instead_of_reading_out_of_bounds() -> None:
    """The cells are one-element lists the store keeps; were one ever emptied, the compiled put
    and get call the Python path (which raises its own error) rather than read past the end."""
    from statestore.stores import _put  # noqa: PLC0415

    slow_calls: list[tuple[Any, ...]] = []

    def slow(*args: Any) -> str:
        slow_calls.append(args)
        return "slow"

    pending: dict[bytes, bytes | None] = {b"k": b"v"}
    source = _put.Pending(pending, {}.get)
    open_cell: list[Any] = [True]
    try_cell: list[Any] = [bytes.decode]
    put = _put.Putter(open_cell, None, bytes, 100, source, slow)
    get = _put.Getter(open_cell, None, source, try_cell, slow)
    assert get(b"k") == "v"
    try_cell.clear()
    assert get(b"k") == "slow"
    open_cell.clear()
    assert get(b"k") == "slow"
    put(b"j", b"w")
    assert slow_calls == [(b"k",), (b"k",), (b"j", b"w")]
    assert b"j" not in pending


# ------------------------------------------------------------------------ the compiled get


@pytest.mark.compiled
@pytest.mark.parametrize(
    ("level", "partitions", "granted"),
    [("OFF", 1, True), ("INFO", 1, True), ("DEBUG", 1, False), ("INFO", 3, False)],
)
def test_the_builder_grants_the_buffers_fast_path_only_where_nothing_must_see_each_call(
    open_manager: OpenManager, level: str, partitions: int, granted: bool
) -> None:
    """One partition whose metered layer (if any) passes put and get straight through: the typed
    store's compiled get reads the buffer's offered fast path.  Per-operation metrics (DEBUG)
    or a partition router between them: no grant, and every put and get passes through them."""
    from statestore.stores import _put  # noqa: PLC0415

    manager = open_manager(config=attrs.evolve(NO_CLEANER, metrics_recording_level=level))
    store = manager.store("kv", partitions=partitions)
    assert isinstance(store.get, _put.Getter) is granted
    store["k"] = 1
    assert store.get("k") == 1
    store.commit()
    assert store.get("k") == 1
    if level == "DEBUG":  # the puts and gets were counted one by one
        (partition,) = manager.metrics()["stores"]["kv"].values()
        assert (partition["put-total"], partition["get-total"]) == (1, 2)


@pytest.mark.compiled
def test_the_store_get_is_the_compiled_one_and_reads_like_the_python_get(
    open_manager: OpenManager,
) -> None:
    from statestore.stores import _put  # noqa: PLC0415

    assert typed.compiled_get_available()
    manager = open_manager()
    store = manager.store("g", key_serde=BytesSerde(), value_serde=MsgpackSerde())
    assert isinstance(store.get, _put.Getter)
    python_get = lambda *a: KeyValueStore.get(store, *a)  # noqa: E731
    store.put(b"pending", [1, 2])
    store.put(b"committed", {"a": 1})
    store.commit()
    store.put(b"committed-then-deleted", 1)
    store.commit()
    store.put(b"committed-then-deleted", None)  # a pending tombstone hides the committed value
    for key, default in [
        (b"pending", None),
        (b"committed", None),
        (b"committed-then-deleted", "gone"),
        (b"absent", None),
        (b"absent", 7),
    ]:
        assert store.get(key, default) == python_get(key, default)
    assert store.get(b"committed") == {"a": 1}
    assert store.get(b"committed-then-deleted", "gone") == "gone"
    assert store.get(b"absent", 7) == 7
    assert store.get(key=b"committed") == {"a": 1}  # a keyword call: the Python get


def test_the_compiled_get_keeps_the_typed_errors(open_manager: OpenManager) -> None:
    manager = open_manager()
    text = manager.store("t")  # str keys, msgpack values
    text["k"] = 1
    with pytest.raises(SerializationError):
        text.get(b"k")  # bytes into a str store: the serde refuses, the Python get raises
    with pytest.raises(SerializationError):
        text.get(None)
    raw = manager.store("b", key_serde=BytesSerde(), value_serde=BytesSerde())
    with pytest.raises(SerializationError):
        raw.get("not bytes")
    manager.close()
    with pytest.raises(InvalidStateStoreError):
        text.get("k")  # closed: the Python get's typed error
    with pytest.raises(InvalidStateStoreError):
        raw.get(b"k")


def test_the_compiled_get_follows_the_decoder_swap(open_manager: OpenManager) -> None:
    """Values the strict first try refuses (msgpack maps with int keys) make the store switch to
    the serde's own decoder; the compiled get reads the new one from its cell."""
    store = open_manager().store("kv")
    store["ints"] = {1: "int key"}
    store["strs"] = {"n": 1}
    store.commit()
    assert store.get("strs") == {"n": 1}
    assert store.get("ints") == {1: "int key"}  # first try fails: the Python get, then the swap
    assert store._try_cell[0] is store._de_value
    assert store.get("ints") == {1: "int key"}
    assert store.get("strs") == {"n": 1}


@pytest.mark.compiled
def test_no_reference_to_rocksdb_outlives_the_store(open_manager: OpenManager) -> None:
    """The compiled get reads RocksDB's get through the buffer's offered fast path, which drops
    it at close: a closed store holds no reference to the database. (rocksdict's close
    releases the LOCK even with one left, so the reopen below passes either way; the
    referents are checked directly.)"""
    manager = open_manager()
    store = manager.store("kv")
    store["k"] = 1
    store.commit()
    assert store.get("k") == 1
    engine = _engine_of(store)
    offered: Any = _buffer_of(store).fast_path()
    lookups = [r for r in gc.get_referents(offered) if callable(r) and not isinstance(r, dict)]
    assert lookups == [engine.lookup]
    manager.close()
    assert [r for r in gc.get_referents(offered) if r is not None and not isinstance(r, dict)] == []
    again = open_manager().store("kv")
    assert again.get("k") == 1
    assert store._inner is not None  # the old store object is still alive here


# --------------------------------------------------------------------------- IntSerde in C

_INT_ORDERED = typed._INT64_ORDERED
_INT_FROM_ORDERED = typed._INT64_FROM_ORDERED


@pytest.mark.compiled
def test_an_int_store_is_granted_the_compiled_int_serde(open_manager: OpenManager) -> None:
    store = open_manager().store("ints", key_type=int, value_serde=IntSerde())
    assert store._ser_key is _INT_ORDERED is not None
    assert store._de_value is _INT_FROM_ORDERED is not None
    store.put(-5, 7)
    store.commit()
    assert store.get(-5) == 7
    assert [k for k, _ in store.items()] == [-5]


@pytest.mark.compiled
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_the_compiled_int_serde_writes_and_reads_the_same_bytes(value: int) -> None:
    assert _INT_ORDERED is not None and _INT_FROM_ORDERED is not None
    data = IntSerde().serialize(value)
    assert _INT_ORDERED(value) == data
    assert _INT_FROM_ORDERED(data) == value == IntSerde().deserialize(data)


@pytest.mark.compiled
@pytest.mark.parametrize("bad", [True, 1.5, "7", None, 2**63, -(2**63) - 1, 10**30], ids=repr)
def test_the_compiled_int_serde_refuses_what_the_python_one_refuses(bad: Any) -> None:
    assert _INT_ORDERED is not None
    with pytest.raises((TypeError, ValueError)) as python:
        IntSerde().serialize(bad)
    with pytest.raises(python.type, match=f"^{re.escape(str(python.value))}$"):
        _INT_ORDERED(bad)


@pytest.mark.compiled
@pytest.mark.parametrize("data", [b"", b"1234567", b"123456789"])
def test_the_compiled_int_serde_refuses_other_lengths(data: bytes) -> None:
    assert _INT_FROM_ORDERED is not None
    with pytest.raises(ValueError, match=f"^expected 8 bytes, got {len(data)}$"):
        IntSerde().deserialize(data)
    with pytest.raises(ValueError, match=f"^expected 8 bytes, got {len(data)}$"):
        _INT_FROM_ORDERED(data)
