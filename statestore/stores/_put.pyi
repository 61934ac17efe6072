from collections.abc import Callable
from typing import Any

class Putter:
    """A typed store's put in C (see ``_put.c``)."""

    def __init__(
        self,
        cell: list[bool],
        ser_key: Callable[[Any], bytes] | None,
        ser_value: Callable[[Any], bytes],
        max_record_bytes: int,
        inner_put: Callable[[bytes, bytes | None], None] | dict[bytes, bytes | None],
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
        pending: dict[bytes, bytes | None],
        lookup_cell: list[Callable[[bytes], bytes | None] | None],
        try_cell: list[Callable[[bytes], Any]],
        slow: Callable[..., Any],
        /,
    ) -> None: ...
    def __call__(self, key: Any, default: Any = None, /) -> Any: ...
