"""An instance's advertised endpoint, and how it travels in a member's ``client.id``.

Interactive queries (:mod:`statestore.kafka.query`) need every member's
``host:port``; the main consumer's ``client.id`` carries it as
``statestore;<instance_id>;<host:port>``, and ``describe_consumer_groups``
returns it with the member's assignment.
"""

from __future__ import annotations

from typing import Final

import attrs

from statestore.errors import InvalidStoreConfigError

__all__ = ["CLIENT_ID_PREFIX", "HostInfo", "advertised_client_id", "parse_client_id"]

CLIENT_ID_PREFIX: Final = "statestore"
"""First field of an advertising ``client.id``: ``statestore;<instance_id>;<host:port>``."""
_SEPARATOR: Final = ";"


@attrs.frozen
class HostInfo:
    """An instance's advertised endpoint (Kafka Streams' ``HostInfo``).  Immutable."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> HostInfo:
        """``host:port`` (``[v6]:port`` for an IPv6 address); InvalidStoreConfigError otherwise."""
        host, sep, port = text.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or not host or _SEPARATOR in host or not port.isdigit():
            raise InvalidStoreConfigError("application_server", text, "must be host:port")
        number = int(port)
        if not 0 < number < 65536:
            raise InvalidStoreConfigError("application_server", text, "port must be 1-65535")
        return cls(host, number)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def advertised_client_id(instance_id: str, endpoint: HostInfo | None) -> str:
    """The main consumer's ``client.id``: ``statestore;<instance_id>;<endpoint>`` (endpoint may be empty)."""
    return _SEPARATOR.join(
        (CLIENT_ID_PREFIX, instance_id, "" if endpoint is None else str(endpoint))
    )


def parse_client_id(client_id: str) -> tuple[str | None, HostInfo | None]:
    """``(instance_id, endpoint)`` from a member's ``client.id``; ``(None, None)`` if it is not
    one of :func:`advertised_client_id` (a member of another kind, an older version)."""
    parts = client_id.split(_SEPARATOR)
    if len(parts) != 3 or parts[0] != CLIENT_ID_PREFIX:
        return None, None
    try:
        endpoint = HostInfo.parse(parts[2]) if parts[2] else None
    except InvalidStoreConfigError:
        endpoint = None
    return parts[1] or None, endpoint
