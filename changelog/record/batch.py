"""Kafka record batch v2 (magic 2): records in, bytes out, and back.

The header layout (byte table, CRC coverage, what we write for the partition
leader epoch) lives in :mod:`changelog.record.header`, the order in which a read
batch is checked in :mod:`changelog.record.reader`; one record's layout in
:mod:`changelog.record.body`.  This module is the public face: it re-exports
the header names and owns :class:`Record` and the encoders/decoders.

Two encoders, two purposes (see ``docs/internals.md``, "Codec contract"):
:func:`encode_batch` is the append path (dense offsets, one timestamp, no
headers); :func:`encode_records` is the cleaner's path (each record keeps its
offset, timestamp and headers; empty batches and the KIP-534 delete horizon).

Fast paths (``changelog/record/_records.c``, loaded through :mod:`changelog.native`):
our compiled record encoder writes the append path's records, our compiled decoder
reads every batch (restore, reads, the cleaner); aiokafka's record builder encodes
what the compiled encoder does not (records with headers, the cleaner's records).
The ``*_py`` functions are the reference and the fallback (a source install without a
C compiler, or ``STATESTORE_PURE=1``), and Hypothesis tests prove that every path
gives identical bytes and identical records.  Encoders build with base offset 0 and
patch the base offset and leader epoch afterwards (neither is under the CRC), as a
broker assigns offsets.  :func:`decode_key_values` and :func:`key_value_pairs` return
plain tuples for restore: no :class:`Record` objects.  Measurements:
``docs/performance.md``.

After a crash nothing here is trusted without :func:`iter_batches` (or
:func:`decode_records`) checking the CRC; the indexes are rebuilt from the log.

Thread-safety: every function is pure and thread-safe; :class:`Record` and
:class:`BatchHeader` are immutable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import crc32c

from changelog.errors import CorruptRecordError, InvalidRecordError
from changelog.limits import INT32_MAX, INT64_MAX, NO_TIMESTAMP
from changelog.native import PURE, compiled
from changelog.record.args import (
    bad_pair,
    check_encode_records_args,
    check_headers,
    check_int,
    check_pairs,
    check_producer_state,
    check_timestamp,
)
from changelog.record.body import Headers, Record, decode_body, encode_body
from changelog.record.compression import NONE, Compression, compress, decompress
from changelog.record.header import (
    BATCH_HEADER_SIZE,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CREATE_TIME,
    DELETE_HORIZON_FLAG_MASK,
    HEADER,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PARTITION_LEADER_EPOCH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    Buffer,
    patch_header,
    write_header,
)
from changelog.record.reader import (
    batch_extents,
    checked_batch,
    declared_size,
    decode_header,
    iter_batches,
    validate_batch,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "PARTITION_LEADER_EPOCH",
    "BatchHeader",
    "Compression",
    "Headers",
    "Pairs",
    "Record",
    "batch_extents",
    "compiled_decoder_available",
    "compiled_encoder_available",
    "declared_size",
    "decode_header",
    "decode_key_values",
    "decode_record_tuples",
    "decode_records",
    "decode_records_py",
    "encode_append_batch",
    "encode_batch",
    "encode_batch_py",
    "encode_records",
    "encode_records_py",
    "fast_codec_available",
    "iter_batches",
    "key_value_pairs",
    "uncompressed_batch",
    "validate_batch",
]


# --------------------------------------------------------------------------- fast path probe


Pairs = (
    Sequence[tuple[bytes | None, bytes | None]]
    | Mapping[bytes, bytes | None]
    | Mapping[bytes | None, bytes | None]
)
"""What :func:`encode_batch` takes: ``(key, value)`` pairs, or a mapping (one record per entry)."""

_T = TypeVar("_T")


def _load_fast_codec() -> Any:
    """aiokafka's record batch builder (its public ``aiokafka.record.default_records``), or
    ``None`` under ``STATESTORE_PURE`` (:mod:`changelog.native`) or without aiokafka.

    The encoders' path for what our compiled encoder does not write: records with
    headers, and the cleaner's records that keep their own offsets and timestamps.
    """
    if PURE:
        return None
    try:
        from aiokafka.record import default_records  # noqa: PLC0415 - optional
    except ImportError:
        return None
    return default_records.DefaultRecordBatchBuilder


_FAST: Final = _load_fast_codec()


def _load_record_encoder() -> Callable[..., bytearray] | None:
    """Our compiled batch encoder (``changelog/record/_records.c``: ``encode_batch``), or
    ``None`` if it was not built: the records in one C loop, then the header and its CRC."""
    return compiled("changelog.record._records", "encode_batch")  # type: ignore[no-any-return]


_ENCODE_BATCH: Final = _load_record_encoder()

_DECODE: Final[Callable[..., list[Any]] | None] = compiled("changelog.record._records", "decode")
"""Our compiled record decoder (``_records.c``: ``decode``), or ``None`` (pure Python then)."""

_PAIRS, _TRIPLES, _FULL = 0, 1, 2  # the tuple shapes ``decode`` returns


def _decode(
    batch: Buffer, header: BatchHeader, shape: int, path: Path | str, position: int
) -> list[Any]:
    """The records of an uncompressed ``batch`` through the compiled decoder, as ``shape`` tuples."""
    assert _DECODE is not None
    try:
        return _DECODE(
            batch,
            BATCH_HEADER_SIZE,
            len(batch),
            header.records_count,
            shape,
            header.base_offset,
            header.base_timestamp,
        )
    except ValueError as exc:
        message, at = exc.args
        raise CorruptRecordError(path, position + at, f"malformed record: {message}") from exc


def compiled_encoder_available() -> bool:
    """Whether the compiled record encoder is built (else the append path uses aiokafka's builder)."""
    return _ENCODE_BATCH is not None


def compiled_decoder_available() -> bool:
    """Whether the compiled record decoder is built (else reads run the pure-Python reference)."""
    return _DECODE is not None


def fast_codec_available() -> bool:
    """Whether aiokafka's batch builder is loaded (else those encoders run the pure-Python reference)."""
    return _FAST is not None


# --------------------------------------------------------------------------- encoding


def encode_batch(
    base_offset: int,
    pairs: Pairs,
    *,
    timestamp_ms: int,
    headers: Sequence[Headers] | None = None,
    compression: Compression | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    require_keys: bool = False,
) -> bytes:
    """Encode ``(key, value)`` pairs as one batch: the append path.

    Offsets are dense from ``base_offset``; every record gets the CreateTime
    ``timestamp_ms``; the partition leader epoch is
    :data:`PARTITION_LEADER_EPOCH`.  Producer id, epoch and base sequence are
    -1 unless given; ``is_transactional`` sets attribute bit 4 (a batch of a
    transaction, which then needs all three; see :mod:`changelog.record.control`).  Keys and values must be
    ``bytes`` or ``None`` (a ``None`` value is a tombstone); ``headers``, if
    given, holds one tuple of ``(str, bytes | None)`` pairs per record (Kafka
    record headers).  With ``compression`` the records are compressed as
    Kafka's producer compresses them.  ``require_keys`` refuses a record whose
    key is ``None``, as a compacted log must (the compiled encoder checks it in
    its own pass, for free).  ``pairs`` may also be a mapping of key to value,
    one record per entry in its order (a store's write buffer hands its dict
    over: no tuple per record).  Anything else, or no pairs at all, raises
    :class:`InvalidRecordError`.
    """
    if _ENCODE_BATCH is not None and headers is None and type(pairs) in _ENCODABLE:
        plain = _encode_plain(
            base_offset,
            pairs,
            timestamp_ms=timestamp_ms,
            producer=(producer_id, producer_epoch, base_sequence),
            is_transactional=is_transactional,
            require_keys=require_keys,
        )
        if plain is not None:
            return _finish(plain, 0, compression)
    if isinstance(pairs, Mapping):
        pairs = list(pairs.items())
    if require_keys:
        _check_keys(check_pairs(pairs))
    if _FAST is None:
        return encode_batch_py(
            base_offset,
            pairs,
            timestamp_ms=timestamp_ms,
            headers=headers,
            compression=compression,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=is_transactional,
        )
    pairs = check_pairs(pairs)
    check_int("base_offset", base_offset, 0, INT64_MAX - len(pairs) + 1)
    check_timestamp("timestamp_ms", timestamp_ms)
    per_record = check_headers(headers, len(pairs))
    check_producer_state(
        producer_id, producer_epoch, base_sequence, is_transactional=is_transactional
    )
    builder = _FAST(
        MAGIC, 0, int(is_transactional), producer_id, producer_epoch, base_sequence, INT32_MAX
    )
    append = builder.append
    no_headers: list[tuple[str, bytes | None]] = []
    delta = 0
    try:
        for delta, (key, value) in enumerate(pairs):
            if (key is not None and key.__class__ is not bytes) or (
                value is not None and value.__class__ is not bytes
            ):
                raise bad_pair(delta, (key, value))
            append(
                delta,
                timestamp_ms,
                key,
                value,
                no_headers if per_record is None else list(per_record[delta]),
            )
    except InvalidRecordError:
        raise
    except (TypeError, ValueError) as exc:  # a pair that does not unpack into two
        raise bad_pair(delta, pairs[delta]) from exc
    buf = builder.build()
    patch_header(buf, base_offset=base_offset, partition_leader_epoch=PARTITION_LEADER_EPOCH)
    return _finish(buf, 0, compression)


def _append_header(
    buf: bytearray,
    base_offset: int,
    count: int,
    *,
    timestamp_ms: int,
    producer: tuple[int, int, int],
    is_transactional: bool,
) -> bytearray:
    """The header of an append batch (``count`` records, one CreateTime) written into ``buf``, CRC last."""
    producer_id, producer_epoch, base_sequence = producer
    return write_header(
        buf,
        base_offset=base_offset,
        partition_leader_epoch=PARTITION_LEADER_EPOCH,
        attributes=TRANSACTIONAL_FLAG_MASK if is_transactional else 0,
        last_offset_delta=count - 1,
        base_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=count,
    )


_LIST_OR_TUPLE: Final = (list, tuple)
_ENCODABLE: Final = (list, tuple, dict)  # what the compiled record encoder walks


def _no_key(index: int) -> InvalidRecordError:
    # Kafka's broker refuses these too: the cleaner could not keep "the latest per key".
    return InvalidRecordError(f"record {index} has no key; a compacted log needs one per record")


def _check_keys(pairs: Sequence[Any]) -> None:
    """:func:`encode_batch`'s ``require_keys`` on the paths without the compiled encoder."""
    for index, pair in enumerate(pairs):
        if type(pair) in _LIST_OR_TUPLE and len(pair) == 2 and pair[0] is None:
            raise _no_key(index)


_NO_PRODUCER: Final = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
"""A batch without a producer: valid by construction (:func:`_encode_plain` skips its check)."""


def _encode_plain(
    base_offset: int,
    pairs: Pairs,
    *,
    timestamp_ms: int,
    producer: tuple[int, int, int],
    is_transactional: bool,
    require_keys: bool,
) -> bytearray | None:
    """An uncompressed :func:`encode_batch` through the compiled record encoder, in a new
    ``bytearray``; ``None``: a pair it refused.

    The records come from C in one loop (the same bytes as
    :func:`~changelog.record.body.encode_body`, tests hold them equal), the
    header and its CRC-32C (hardware, ``crc32c``) written in the same C call, as
    :func:`write_header` writes them (tests hold the bytes equal).
    A pair the encoder refuses (not an exact ``(bytes | None, bytes | None)``
    tuple) sends the caller down the other path, which reports it; a ``None``
    key under ``require_keys`` is refused here.
    """
    if type(pairs) is dict:
        if not pairs:
            raise InvalidRecordError("a batch needs at least one record")
    else:
        pairs = check_pairs(pairs)
    if base_offset:  # every append encodes at 0 (the log patches the offset): no check
        check_int("base_offset", base_offset, 0, INT64_MAX - len(pairs) + 1)
    if type(timestamp_ms) is not int or not NO_TIMESTAMP <= timestamp_ms <= INT64_MAX:
        check_timestamp("timestamp_ms", timestamp_ms)  # raises, naming the value
    if producer is not _NO_PRODUCER:  # every ordinary append: the constant needs no check
        check_producer_state(*producer, is_transactional=is_transactional)
    try:
        return _ENCODE_BATCH(  # type: ignore[misc]  # not None: checked by the caller
            pairs,
            require_keys,
            base_offset,
            timestamp_ms,
            PARTITION_LEADER_EPOCH,
            TRANSACTIONAL_FLAG_MASK if is_transactional else 0,
            *producer,
            crc32c.crc32c,
        )
    except TypeError:
        return None
    except ValueError:  # only a None key under require_keys: find which, in Python
        _check_keys(list(pairs.items()) if isinstance(pairs, Mapping) else pairs)
        raise


def encode_append_batch(
    pairs: Pairs,
    *,
    timestamp_ms: int,
    compression: Compression | None,
    require_keys: bool,
    headers: Sequence[Headers] | None = None,
    producer: tuple[int, int, int] | None = None,
    timestamps: Sequence[int] | None = None,
) -> bytearray:
    """The log's append: :func:`encode_batch` at base offset 0, in a ``bytearray`` of its own.

    The log patches the base offset and leader epoch in place (neither is under
    the CRC).  Uncompressed records without headers (every store commit) come
    from the compiled encoder with no copy at all: a copy of a 130 KB batch,
    made twice per append before, cost 20-40 us each here, page faults
    included.  ``producer`` is ``(producer_id, producer_epoch, base_sequence)``
    of a transactional batch; ``None``: not transactional.

    ``timestamps`` (one CreateTime per record, in record order) replaces the one
    ``timestamp_ms`` for stores whose records carry their own time (timestamped,
    window and session stores): the batch is then built by :func:`encode_records`
    with per-record timestamp deltas (base timestamp the first record's, max
    timestamp the largest), as Kafka's producer builds a batch of records with
    different timestamps.
    """
    transactional = producer is not None
    ids = producer if producer is not None else _NO_PRODUCER
    if timestamps is not None:
        return _encode_timestamped(
            pairs,
            timestamps,
            headers=headers,
            compression=compression,
            require_keys=require_keys,
            producer=ids,
            is_transactional=transactional,
        )
    if (
        _ENCODE_BATCH is not None
        and headers is None
        and type(pairs) in _ENCODABLE
        and (compression is None or compression.codec == NONE)
    ):
        buf = _encode_plain(
            0,
            pairs,
            timestamp_ms=timestamp_ms,
            producer=ids,
            is_transactional=transactional,
            require_keys=require_keys,
        )
        if buf is not None:
            return buf
    return bytearray(
        encode_batch(
            0,
            pairs,
            timestamp_ms=timestamp_ms,
            headers=headers,
            compression=compression,
            producer_id=ids[0],
            producer_epoch=ids[1],
            base_sequence=ids[2],
            is_transactional=transactional,
            require_keys=require_keys,
        )
    )


def _key_value(
    index: int, pair: tuple[bytes | None, bytes | None]
) -> tuple[bytes | None, bytes | None]:
    """Record ``index``'s ``(key, value)``: two items, each bytes or ``None`` (else
    :func:`bad_pair`)."""
    try:
        key, value = pair
    except (TypeError, ValueError) as exc:
        raise bad_pair(index, pair) from exc
    if (key is not None and key.__class__ is not bytes) or (
        value is not None and value.__class__ is not bytes
    ):
        raise bad_pair(index, pair)
    return key, value


def _encode_timestamped(
    pairs: Pairs,
    timestamps: Sequence[int],
    *,
    headers: Sequence[Headers] | None,
    compression: Compression | None,
    require_keys: bool,
    producer: tuple[int, int, int],
    is_transactional: bool,
) -> bytearray:
    """:func:`encode_append_batch` with one timestamp per record (base offset 0)."""
    items = check_pairs(list(pairs.items()) if isinstance(pairs, Mapping) else pairs)
    if len(timestamps) != len(items):
        raise InvalidRecordError(
            f"{len(timestamps)} timestamps for {len(items)} records; one per record is needed"
        )
    if require_keys:
        _check_keys(items)
    per_record = check_headers(headers, len(items))
    if _FAST is not None and per_record is None and timestamps[0].__class__ is int:
        fast = _encode_timestamped_fast(
            items, timestamps, compression=compression, producer=producer, txn=is_transactional
        )
        if fast is not None:
            return fast
    records = []
    for delta, (pair, stamp) in enumerate(zip(items, timestamps, strict=True)):
        key, value = _key_value(delta, pair)
        check_timestamp("timestamps", stamp)
        records.append(
            Record(delta, stamp, key, value, () if per_record is None else per_record[delta])
        )
    producer_id, producer_epoch, base_sequence = producer
    return bytearray(
        encode_records(
            records,
            base_offset=0,
            last_offset_delta=len(records) - 1,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=is_transactional,
            compression=compression,
        )
    )


def _encode_timestamped_fast(
    items: Sequence[tuple[bytes | None, bytes | None]],
    timestamps: Sequence[int],
    *,
    compression: Compression | None,
    producer: tuple[int, int, int],
    txn: bool,
) -> bytearray | None:
    """:func:`_encode_timestamped` without headers through aiokafka's builder, with no
    :class:`Record` per record: the same checks, errors and bytes as its
    :func:`encode_records` path (a store in time's every commit).  ``None`` when
    the first timestamp is :data:`NO_TIMESTAMP` (that path encodes it in Python).
    """
    if timestamps[0] == NO_TIMESTAMP:
        return None
    producer_id, producer_epoch, base_sequence = producer
    last_offset_delta = len(items) - 1
    check_encode_records_args(
        (),
        base_offset=0,
        last_offset_delta=last_offset_delta,
        delete_horizon_ms=None,
        max_timestamp_ms=None,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=PARTITION_LEADER_EPOCH,
        is_transactional=txn,
    )
    assert _FAST is not None
    builder = _FAST(MAGIC, 0, int(txn), producer_id, producer_epoch, base_sequence, INT32_MAX)
    append = builder.append
    no_headers: list[tuple[str, bytes | None]] = []
    for delta, (pair, stamp) in enumerate(zip(items, timestamps, strict=True)):
        # :func:`_key_value` inline: this loop runs once per record of every commit
        try:
            key, value = pair
        except (TypeError, ValueError) as exc:
            raise bad_pair(delta, pair) from exc
        if (key is not None and key.__class__ is not bytes) or (
            value is not None and value.__class__ is not bytes
        ):
            raise bad_pair(delta, pair)
        if stamp.__class__ is not int or not NO_TIMESTAMP <= stamp <= INT64_MAX:
            check_timestamp("timestamps", stamp)  # raises
        try:
            append(delta, stamp, key, value, no_headers)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidRecordError(f"cannot encode records: {exc}") from exc
    buf = builder.build()
    patch_header(
        buf,
        base_offset=0,
        partition_leader_epoch=PARTITION_LEADER_EPOCH,
        last_offset_delta=last_offset_delta,
    )
    return bytearray(_finish(buf, _extra_attributes(False, CREATE_TIME), compression))


def encode_batch_py(
    base_offset: int,
    pairs: Sequence[tuple[bytes | None, bytes | None]],
    *,
    timestamp_ms: int,
    headers: Sequence[Headers] | None = None,
    compression: Compression | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
) -> bytes:
    """Pure-Python reference of :func:`encode_batch` (same contract, same bytes)."""
    pairs = check_pairs(pairs)
    check_int("base_offset", base_offset, 0, INT64_MAX - len(pairs) + 1)
    check_timestamp("timestamp_ms", timestamp_ms)
    per_record = check_headers(headers, len(pairs))
    check_producer_state(
        producer_id, producer_epoch, base_sequence, is_transactional=is_transactional
    )
    for index, pair in enumerate(pairs):
        _key_value(index, pair)
    buf = bytearray(BATCH_HEADER_SIZE)
    encode_body(
        (
            (delta, 0, key, value, () if per_record is None else per_record[delta])
            for delta, (key, value) in enumerate(pairs)
        ),
        buf,
    )
    plain = _append_header(
        buf,
        base_offset,
        len(pairs),
        timestamp_ms=timestamp_ms,
        producer=(producer_id, producer_epoch, base_sequence),
        is_transactional=is_transactional,
    )
    return _finish(bytearray(plain), 0, compression)


def encode_records(
    records: Sequence[Record],
    *,
    base_offset: int,
    last_offset_delta: int,
    delete_horizon_ms: int | None = None,
    max_timestamp_ms: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = CREATE_TIME,
    compression: Compression | None = None,
) -> bytes:
    """Encode records that already have offsets and timestamps: the cleaner's path.

    Each record keeps its offset (as a delta from ``base_offset``), its
    timestamp and its headers.  ``last_offset_delta`` may exceed the last
    record's delta, and ``records`` may be empty: the batch then keeps its
    offset range with ``records_count`` 0 (Kafka's empty batch), so offsets
    after it never move.  ``max_timestamp_ms`` is only for an empty batch (the
    timestamp it keeps, default :data:`NO_TIMESTAMP`); otherwise the max record
    timestamp is used.  With ``delete_horizon_ms`` the KIP-534 attribute bit
    is set and ``base_timestamp`` holds the horizon, record timestamps being
    stored as deltas from it.  ``is_control`` and ``timestamp_type``
    (:data:`LOG_APPEND_TIME`: the batch's max timestamp is every record's)
    set those attribute bits; ``compression`` compresses the records (an
    empty batch stays uncompressed, as Kafka's ``writeEmptyHeader``).  Bad
    arguments raise :class:`InvalidRecordError`.
    """
    records = check_encode_records_args(
        records,
        base_offset=base_offset,
        last_offset_delta=last_offset_delta,
        delete_horizon_ms=delete_horizon_ms,
        max_timestamp_ms=max_timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
    )
    if (
        _FAST is None
        or not records
        or delete_horizon_ms is not None
        or records[0].timestamp_ms == NO_TIMESTAMP
    ):
        # The builder bases timestamp deltas on the first record: no horizon, no empty
        # batch; and it takes a first timestamp of -1 for "none yet" (Kafka takes it as is).
        return _encode_records_py(
            records,
            base_offset=base_offset,
            last_offset_delta=last_offset_delta,
            delete_horizon_ms=delete_horizon_ms,
            max_timestamp_ms=max_timestamp_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            partition_leader_epoch=partition_leader_epoch,
            is_transactional=is_transactional,
            is_control=is_control,
            timestamp_type=timestamp_type,
            compression=compression,
        )
    builder = _FAST(
        MAGIC,
        0,
        int(is_transactional),
        producer_id,
        producer_epoch,
        base_sequence,
        INT32_MAX,
    )
    append = builder.append
    no_headers: list[tuple[str, bytes | None]] = []
    try:
        for record in records:
            headers = list(record.headers) if record.headers else no_headers
            append(
                record.offset - base_offset, record.timestamp_ms, record.key, record.value, headers
            )
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidRecordError(f"cannot encode records: {exc}") from exc
    buf = builder.build()
    patch_header(
        buf,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        last_offset_delta=last_offset_delta,
    )
    return _finish(buf, _extra_attributes(is_control, timestamp_type), compression)


def encode_records_py(
    records: Sequence[Record],
    *,
    base_offset: int,
    last_offset_delta: int,
    delete_horizon_ms: int | None = None,
    max_timestamp_ms: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = CREATE_TIME,
    compression: Compression | None = None,
) -> bytes:
    """Pure-Python reference of :func:`encode_records` (same contract, same bytes)."""
    records = check_encode_records_args(
        records,
        base_offset=base_offset,
        last_offset_delta=last_offset_delta,
        delete_horizon_ms=delete_horizon_ms,
        max_timestamp_ms=max_timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
    )
    return _encode_records_py(
        records,
        base_offset=base_offset,
        last_offset_delta=last_offset_delta,
        delete_horizon_ms=delete_horizon_ms,
        max_timestamp_ms=max_timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
        timestamp_type=timestamp_type,
        compression=compression,
    )


def _encode_records_py(
    records: Sequence[Record],
    *,
    base_offset: int,
    last_offset_delta: int,
    delete_horizon_ms: int | None,
    max_timestamp_ms: int | None,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
    is_transactional: bool,
    is_control: bool,
    timestamp_type: int,
    compression: Compression | None,
) -> bytes:
    attributes = TRANSACTIONAL_FLAG_MASK if is_transactional else 0
    if records:
        max_timestamp = max(record.timestamp_ms for record in records)
        base_timestamp = records[0].timestamp_ms
    else:
        max_timestamp = NO_TIMESTAMP if max_timestamp_ms is None else max_timestamp_ms
        base_timestamp = max_timestamp  # Kafka's DefaultRecordBatch.writeEmptyHeader
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
        base_timestamp = delete_horizon_ms
    buf = bytearray(BATCH_HEADER_SIZE)
    try:
        encode_body(
            (
                (
                    record.offset - base_offset,
                    record.timestamp_ms - base_timestamp,
                    record.key,
                    record.value,
                    record.headers,
                )
                for record in records
            ),
            buf,
        )
    except OverflowError as exc:
        raise InvalidRecordError(f"a timestamp delta does not fit in 64 bits: {exc}") from exc
    write_header(
        buf,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )
    extra = _extra_attributes(is_control, timestamp_type)
    return _finish(buf, extra, compression if records else None)


_PLAIN_BATCH_LENGTH: Final = HEADER.size - LOG_OVERHEAD


def _extra_attributes(is_control: bool, timestamp_type: int) -> int:
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise InvalidRecordError(f"timestamp_type must be 0 or 1, got {timestamp_type!r}")
    return (CONTROL_FLAG_MASK if is_control else 0) | (
        TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0
    )


def _finish(plain: bytearray, extra_attributes: int, compression: Compression | None) -> bytes:
    """A built uncompressed batch with ``extra_attributes`` set and its records compressed.

    The header is rewritten (and the CRC recomputed) only when something changes.
    """
    codec = NONE if compression is None else compression.codec
    if not extra_attributes and codec == NONE:
        return bytes(plain)
    h = BatchHeader(*HEADER.unpack_from(plain, 0))
    records = bytes(memoryview(plain)[BATCH_HEADER_SIZE:])
    body = records if compression is None else compress(records, compression)
    buf = bytearray(BATCH_HEADER_SIZE)
    buf += body
    return bytes(
        write_header(
            buf,
            base_offset=h.base_offset,
            partition_leader_epoch=h.partition_leader_epoch,
            attributes=h.attributes | extra_attributes | codec,
            last_offset_delta=h.last_offset_delta,
            base_timestamp=h.base_timestamp,
            max_timestamp=h.max_timestamp,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            records_count=h.records_count,
        )
    )


def uncompressed_batch(
    batch: Buffer, header: BatchHeader, *, path: Path | str, position: int
) -> Buffer:
    """``batch`` itself if uncompressed, else the same batch with its records decompressed.

    The result has the codec bits cleared and a fitting ``batch_length`` but
    the old CRC: it is for decoding (``validate=False``) only, never for
    writing.  ``header`` is the batch's (its CRC already checked by whoever
    trusts the result); a stream that does not decompress raises
    :class:`CorruptRecordError` naming ``path`` and ``position``.
    """
    codec = header.compression
    if codec == NONE:
        return batch
    body = decompress(
        codec, bytes(memoryview(batch)[BATCH_HEADER_SIZE:]), path=path, position=position
    )
    buf = bytearray(batch[:BATCH_HEADER_SIZE])
    buf += body
    HEADER.pack_into(
        buf,
        0,
        header.base_offset,
        _PLAIN_BATCH_LENGTH + len(body),
        header.partition_leader_epoch,
        header.magic,
        header.crc,
        header.attributes & ~COMPRESSION_CODEC_MASK,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )
    return buf


def _plain(
    batch: Buffer, path: Path | str, position: int, validate: bool
) -> tuple[BatchHeader, Buffer]:
    """The checked header of ``batch`` and the batch with its records uncompressed."""
    header = checked_batch(batch, path, position, validate)
    if header.compression == NONE:
        return header, batch
    plain = uncompressed_batch(batch, header, path=path, position=position)
    return checked_batch(plain, path, position, False), plain


def _log_append_time(header: BatchHeader) -> int | None:
    return header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else None


def _decode_body(
    batch: Buffer,
    header: BatchHeader,
    make: Callable[[int, int, bytes | None, bytes | None, Headers], _T],
    *,
    path: Path | str,
    position: int,
    log_append_time: int | None,
) -> list[_T]:
    """The pure-Python decoder over every record of the uncompressed ``batch``."""
    return decode_body(
        batch,
        BATCH_HEADER_SIZE,
        len(batch),
        header.records_count,
        base_offset=header.base_offset,
        base_timestamp=header.base_timestamp,
        log_append_time=log_append_time,
        make=make,
        path=path,
        file_position=position,
    )


def decode_records_py(
    batch: Buffer,
    *,
    path: Path | str,
    position: int,
    validate: bool = True,
) -> list[Record]:
    """Pure-Python reference of :func:`decode_records` (same contract, same records)."""
    header, batch = _plain(batch, path, position, validate)
    return _decode_body(
        batch,
        header,
        Record,
        path=path,
        position=position,
        log_append_time=_log_append_time(header),
    )


def decode_records(
    batch: Buffer,
    *,
    path: Path | str,
    position: int,
    validate: bool = True,
) -> list[Record]:
    """Decode one whole batch (``batch`` is exactly its bytes) into :class:`Record` s.

    ``path`` and ``position`` (the batch's position in its file) name the
    place in errors.  With ``validate`` the CRC is checked first (it is
    cheap); a compressed batch is decompressed after that (any codec of
    :mod:`changelog.record.compression`); framing errors, and records that do
    not decompress, raise :class:`CorruptRecordError`.  Control batches
    are decoded like any other; callers skip them by ``header.is_control``.
    With LogAppendTime every record carries the batch's max timestamp.
    """
    header, batch = _plain(batch, path, position, validate)
    if _DECODE is None:
        return decode_records_py(batch, path=path, position=position, validate=False)
    full = _decode(batch, header, _FULL, path, position)
    if header.timestamp_type == LOG_APPEND_TIME:
        stamp = header.max_timestamp
        return [Record(offset, stamp, k, v, h) for offset, _ts, k, v, h in full]
    return [Record(*fields) for fields in full]


def decode_key_values(
    batch: Buffer,
    *,
    path: Path | str,
    position: int,
    validate: bool = True,
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Like :func:`decode_records` but only ``(offset, key, value)`` tuples: the restore path.

    Skips building :class:`Record` objects, which is most of the per-record
    cost once the compiled decoder has done the parsing.
    """
    header, batch = _plain(batch, path, position, validate)
    if _DECODE is None:
        return _decode_body(
            batch,
            header,
            lambda offset, _ts, key, value, _headers: (offset, key, value),
            path=path,
            position=position,
            log_append_time=None,
        )
    return _decode(batch, header, _TRIPLES, path, position)


def decode_record_tuples(
    batch: Buffer,
    *,
    path: Path | str,
    position: int,
    validate: bool = True,
) -> list[tuple[int, int, bytes | None, bytes | None, Headers]]:
    """Like :func:`decode_records` but ``(offset, timestamp_ms, key, value, headers)`` tuples.

    The restore path of stores in time, which needs each record's timestamp:
    no :class:`Record` object per record.  Timestamps, headers and errors as
    :func:`decode_records` (LogAppendTime: the batch's max timestamp).
    """
    header, batch = _plain(batch, path, position, validate)
    if _DECODE is None:
        return _decode_body(
            batch,
            header,
            lambda offset, stamp, key, value, headers: (offset, stamp, key, value, headers),
            path=path,
            position=position,
            log_append_time=_log_append_time(header),
        )
    full = _decode(batch, header, _FULL, path, position)
    if header.timestamp_type == LOG_APPEND_TIME:
        stamp = header.max_timestamp
        return [(offset, stamp, k, v, h) for offset, _ts, k, v, h in full]
    return full


def key_value_pairs(
    batch: Buffer,
    *,
    path: Path | str,
    position: int,
    validate: bool = True,
) -> list[tuple[bytes | None, bytes | None]]:
    """The ``(key, value)`` of every record of ``batch``, in order: the restore path.

    Like :func:`decode_key_values` without the offsets: the list restore hands to
    the engine's key-ordered ``WriteBatch`` fill.  Errors as :func:`decode_key_values`.
    """
    if _DECODE is None:
        return [
            (key, value)
            for _offset, key, value in decode_key_values(
                batch, path=path, position=position, validate=validate
            )
        ]
    header, batch = _plain(batch, path, position, validate)
    return _decode(batch, header, _PAIRS, path, position)
