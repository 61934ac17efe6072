"""The compiled record encoder (``changelog/record/_records.c``) writes the reference's bytes.

Three encoders must agree byte for byte on every batch the append path writes:
the compiled one (taken by :func:`encode_batch` for records without headers),
aiokafka's builder (its fallback) and the pure-Python reference
(:func:`encode_batch_py`).  Lengths cross the varint boundaries (127/128,
16383/16384), keys and values may be null or empty, batches may be
transactional or compressed.  A pair the C code refuses goes down the other
path and keeps that path's errors and bytes.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelog import native
from changelog.config import LogConfig
from changelog.errors import InvalidRecordError
from changelog.record import batch as rb
from changelog.record.batch import encode_batch, encode_batch_py
from changelog.record.compression import compression_for

TS = 1_700_000_000_000

sizes = st.sampled_from([0, 1, 2, 63, 64, 127, 128, 300, 16383, 16384, 20000])
blobs = st.none() | sizes.flatmap(lambda n: st.binary(min_size=n, max_size=n))
pair_lists = st.lists(st.tuples(blobs, blobs), min_size=1, max_size=20)


def without_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rb, "_ENCODE_BATCH", None)


def test_the_compiled_encoder_is_built_unless_pure() -> None:
    """CI builds it (a C compiler is there); without it the append path silently loses ~0.4 us a
    record.  Under ``STATESTORE_PURE=1`` it must not be in use."""
    assert rb.compiled_encoder_available() is not native.PURE


def test_a_stale_build_without_a_function_falls_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An extension built from older sources lacks a newer function: the Python path runs,
    # and the warning names the module and what it lacks (PURE off: the extension is built
    # in both of CI's runs).
    monkeypatch.setattr(native, "PURE", False)
    with pytest.warns(RuntimeWarning, match=r"changelog\.record\._records .*no encode_v9"):
        assert native.compiled("changelog.record._records", "encode_v9") is None
    assert native.compiled("changelog.record._records", "encode_batch") is not None


@settings(max_examples=150, deadline=None)
@given(
    base_offset=st.integers(min_value=0, max_value=2**62),
    pairs=pair_lists,
    timestamp=st.integers(min_value=-1, max_value=2**45),
    transactional=st.booleans(),
)
def test_compiled_equals_reference_and_aiokafka(
    base_offset: int,
    pairs: list[tuple[bytes | None, bytes | None]],
    timestamp: int,
    transactional: bool,
) -> None:
    producer: dict[str, Any] = (
        {"producer_id": 7, "producer_epoch": 2, "base_sequence": 11, "is_transactional": True}
        if transactional
        else {}
    )
    compiled = encode_batch(base_offset, pairs, timestamp_ms=timestamp, **producer)
    reference = encode_batch_py(base_offset, pairs, timestamp_ms=timestamp, **producer)
    assert compiled == reference
    with pytest.MonkeyPatch.context() as patch:
        without_compiled(patch)
        assert encode_batch(base_offset, pairs, timestamp_ms=timestamp, **producer) == reference


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compiled_then_compressed_equals_reference(codec: str) -> None:
    pairs = [(b"k%d" % i, b"v" * (i % 300)) for i in range(500)] + [(b"gone", None)]
    compression = compression_for(LogConfig(compression_type=codec))
    assert encode_batch(5, pairs, timestamp_ms=TS, compression=compression) == encode_batch_py(
        5, pairs, timestamp_ms=TS, compression=compression
    )


def test_a_tuple_of_pairs_and_list_pairs_are_accepted_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    as_tuple = ((b"a", b"1"), (b"b", None))
    as_lists = [
        [b"a", b"1"],
        [b"b", None],
    ]  # not tuples: the C code passes, aiokafka's path takes them
    expected = encode_batch_py(0, list(as_tuple), timestamp_ms=TS)
    assert encode_batch(0, as_tuple, timestamp_ms=TS) == expected
    assert encode_batch(0, as_lists, timestamp_ms=TS) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "pairs",
    [
        [(b"k", "text")],
        [(1, b"v")],
        [(b"k",)],
        [(b"k", b"v", b"x")],
        [b"kv"],
        [(bytearray(b"k"), b"v")],
    ],
)
def test_bad_pairs_raise_the_same_typed_error_either_way(
    pairs: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InvalidRecordError, match="record 0") as compiled:
        encode_batch(0, pairs, timestamp_ms=TS)
    without_compiled(monkeypatch)
    with pytest.raises(InvalidRecordError, match="record 0") as other:
        encode_batch(0, pairs, timestamp_ms=TS)
    assert str(compiled.value) == str(other.value)


def test_headers_take_the_other_path() -> None:
    pairs = [(b"k", b"v")]
    headers = [(("h", b"x"),)]
    assert encode_batch(0, pairs, timestamp_ms=TS, headers=headers) == encode_batch_py(
        0, pairs, timestamp_ms=TS, headers=headers
    )


@pytest.mark.parametrize("path", ["compiled", "aiokafka", "reference"])
@pytest.mark.parametrize("container", [list, tuple])
def test_require_keys_refuses_a_none_key_on_every_path_and_names_it(
    path: str, container: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compacted log's rule, checked inside the compiled encoder's own pass (issue 14 part 7:
    the separate ``None in map(key, records)`` pass cost ~38 ns a record)."""
    if path != "compiled":
        without_compiled(monkeypatch)
    if path == "reference":
        monkeypatch.setattr(rb, "_FAST", None)
    pairs = container([(b"a", b"1"), (b"", None), (None, b"3"), (None, b"4")])
    with pytest.raises(InvalidRecordError, match=r"record 2 has no key"):
        encode_batch(0, pairs, timestamp_ms=TS, require_keys=True)
    # without the flag the same pairs encode, as before; with it, keyed pairs encode alike
    assert encode_batch(0, pairs, timestamp_ms=TS) == encode_batch_py(0, pairs, timestamp_ms=TS)
    keyed = pairs[:2]
    assert encode_batch(0, keyed, timestamp_ms=TS, require_keys=True) == encode_batch_py(
        0, keyed, timestamp_ms=TS
    )


def test_require_keys_keeps_a_bad_pair_error() -> None:
    with pytest.raises(InvalidRecordError, match=r"record 1 must be a \(key, value\) pair"):
        encode_batch(0, [(b"a", b"1"), (b"b", "str")], timestamp_ms=TS, require_keys=True)


@pytest.mark.parametrize("compact", [True, False])
def test_a_compacted_log_refuses_a_record_without_a_key_and_writes_nothing(
    tmp_path: Any, compact: bool
) -> None:
    from changelog.log.log import Log  # noqa: PLC0415

    config = LogConfig(cleanup_policy="compact" if compact else "delete")
    with Log.open(tmp_path / "t-0", config=config) as log:
        pairs = [(b"k", b"v"), (None, b"no key")]
        if compact:
            with pytest.raises(InvalidRecordError, match="record 1 has no key"):
                log.append(pairs)
            with pytest.raises(InvalidRecordError, match="record 1 has no key"):
                log.append_transactional(pairs, producer_id=3, producer_epoch=0)
            assert log.log_end_offset == 0
        else:
            assert log.append(pairs).last_offset == 1


@settings(max_examples=60, deadline=None)
@given(pairs=st.dictionaries(st.binary(max_size=300), blobs, min_size=1, max_size=20))
def test_a_dict_encodes_as_the_list_of_its_items_on_every_path(
    pairs: dict[bytes, bytes | None],
) -> None:
    """The write buffer hands its dict snapshot over: one record per entry, in its order."""
    expected = encode_batch_py(5, list(pairs.items()), timestamp_ms=TS)
    assert encode_batch(5, pairs, timestamp_ms=TS) == expected
    compiled = rb._ENCODE_BATCH
    try:
        rb._ENCODE_BATCH = None  # type: ignore[misc]
        assert encode_batch(5, pairs, timestamp_ms=TS) == expected
    finally:
        rb._ENCODE_BATCH = compiled  # type: ignore[misc]


def test_a_dict_keeps_the_typed_errors() -> None:
    with pytest.raises(InvalidRecordError, match="at least one record"):
        encode_batch(0, {}, timestamp_ms=TS)
    with pytest.raises(InvalidRecordError, match="record 1 has no key"):
        encode_batch(0, {b"a": b"1", None: b"2"}, timestamp_ms=TS, require_keys=True)
    with pytest.raises(InvalidRecordError, match=r"record 1 must be a \(key, value\) pair"):
        encode_batch(0, {b"a": b"1", b"b": "text"}, timestamp_ms=TS)  # type: ignore[dict-item]


def test_log_append_takes_a_dict(tmp_path: Any) -> None:
    from changelog.log.log import Log  # noqa: PLC0415

    with Log.open(tmp_path / "t-0", config=LogConfig()) as log:
        info = log.append({b"k": b"v", b"gone": None})
        assert (info.first_offset, info.last_offset) == (0, 1)
        records = [(r.key, r.value) for r in log.read(0)]
        assert records == [(b"k", b"v"), (b"gone", None)]


@settings(max_examples=80, deadline=None)
@given(
    pairs=pair_lists,
    transactional=st.booleans(),
    compressed=st.booleans(),
    with_headers=st.booleans(),
    as_dict=st.booleans(),
)
def test_the_logs_append_encoding_is_encode_batch_in_a_bytearray(
    pairs: list[tuple[bytes | None, bytes | None]],
    transactional: bool,
    compressed: bool,
    with_headers: bool,
    as_dict: bool,
) -> None:
    """``encode_append_batch`` (no copy on the compiled path) writes ``encode_batch``'s bytes."""
    producer = (7, 2, 11) if transactional else None
    compression = compression_for(LogConfig(compression_type="zstd")) if compressed else None
    headers = [(("h", b"1"),)] * len(pairs) if with_headers else None
    records: Any = dict(pairs) if as_dict else pairs
    count = len(records)
    if headers is not None:
        headers = headers[:count]
    got = rb.encode_append_batch(
        records,
        timestamp_ms=TS,
        compression=compression,
        require_keys=False,
        headers=headers,
        producer=producer,
    )
    assert type(got) is bytearray
    extra: dict[str, Any] = (
        {"producer_id": 7, "producer_epoch": 2, "base_sequence": 11, "is_transactional": True}
        if transactional
        else {}
    )
    expected = encode_batch_py(
        0,
        list(dict(pairs).items()) if as_dict else pairs,
        timestamp_ms=TS,
        compression=compression,
        headers=headers,
        **extra,
    )
    assert bytes(got) == expected
