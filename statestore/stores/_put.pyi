from collections.abc import Callable
from typing import Any

class Pending:
    """A write buffer's compiled put and get (see ``_put.c``); made by the buffer only."""

    def __init__(
        self, pending: dict[bytes, bytes | None], lookup: Callable[[bytes], bytes | None], /
    ) -> None: ...
    def __call__(self, key: bytes, value: bytes | None, /) -> None: ...
    def close(self) -> None:
        """Drop the reference to RocksDB's get (the buffer closes)."""

class Putter:
    """A typed store's put in C (see ``_put.c``)."""

    def __init__(
        self,
        cell: list[bool],
        ser_key: Callable[[Any], bytes] | None,
        ser_value: Callable[[Any], bytes],
        max_record_bytes: int,
        inner_put: Callable[[bytes, bytes | None], None],
        slow: Callable[[Any, Any], None],
        /,
    ) -> None: ...
    def __call__(self, key: Any, value: Any, /) -> None: ...

def forget(
    pending: dict[bytes, bytes | None], records: dict[bytes, bytes | None] | list[Any], /
) -> None:
    """Drop each committed ``(key, value)`` still buffered as that very value."""

def fill(batch: Any, records: dict[bytes, bytes | None] | list[Any], /) -> None:
    """``batch.put(key, value)`` (``batch.delete(key)`` for ``None``) per record, in key order."""

class Getter:
    """A typed store's get in C (see ``_put.c``)."""

    def __init__(
        self,
        cell: list[bool],
        ser_key: Callable[[Any], bytes] | None,
        source: Pending,
        try_cell: list[Callable[[bytes], Any]],
        slow: Callable[..., Any],
        /,
    ) -> None: ...
    def __call__(self, key: Any, default: Any = None, /) -> Any: ...
