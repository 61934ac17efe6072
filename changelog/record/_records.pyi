from collections.abc import Mapping, Sequence
from typing import Any

def encode_plain(
    pairs: Sequence[tuple[bytes | None, bytes | None]]
    | Mapping[bytes, bytes | None]
    | Mapping[bytes | None, bytes | None],
    prefix: int,
    require_keys: bool = False,
    /,
) -> bytearray:
    """``prefix`` zero bytes, then one Kafka v2 record per pair (see ``_records.c``).

    ``require_keys``: a ``None`` key raises ``ValueError``.
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
