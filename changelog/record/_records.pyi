from collections.abc import Mapping, Sequence

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
