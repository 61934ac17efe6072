from collections.abc import Callable, Mapping, Sequence
from typing import Any

def encode_batch(
    pairs: Sequence[tuple[bytes | None, bytes | None]]
    | Mapping[bytes, bytes | None]
    | Mapping[bytes | None, bytes | None],
    require_keys: bool,
    base_offset: int,
    timestamp_ms: int,
    partition_leader_epoch: int,
    attributes: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    crc32c: Callable[[memoryview], int],
    /,
) -> bytearray:
    """A whole uncompressed v2 batch (one record per pair), header and CRC included.

    ``require_keys``: a ``None`` key raises ``ValueError``.

    ``crc32c`` takes a view of the bytes from the attributes on (see ``_records.c``).
    """

def decode(
    buf: bytes | bytearray | memoryview,
    start: int,
    end: int,
    count: int,
    shape: int,
    base_offset: int = 0,
    base_timestamp: int = 0,
    /,
) -> list[Any]:
    """``count`` records of ``buf[start:end]`` as tuples of ``shape`` (see ``_records.c``).

    A framing error raises ``ValueError(message, position)``.
    """
