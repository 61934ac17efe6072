from collections.abc import Sequence

def encode_plain(pairs: Sequence[tuple[bytes | None, bytes | None]], prefix: int, /) -> bytearray:
    """``prefix`` zero bytes, then one Kafka v2 record per pair (see ``_records.c``)."""
