"""Where the runtime's Kafka clients come from: confluent-kafka, or what a test passes instead.

:class:`KafkaClients` makes the admin client, the consumers (main, restore,
standby) and the transactional producer from librdkafka settings.  The
processor asks it for every client it uses, so a test can run the whole
runtime against fakes, without a broker.

Thread-safety: the factory is stateless; each client it makes is used as
confluent-kafka documents (the admin client from any thread).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["KafkaClients"]


class KafkaClients:
    """confluent-kafka's clients (the default factory of :class:`~statestore.kafka.Processor`)."""

    def admin(self, settings: Mapping[str, Any]) -> Any:
        """An ``AdminClient``."""
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415 - optional dependency

        return AdminClient(dict(settings))

    def consumer(self, settings: Mapping[str, Any]) -> Any:
        """A ``Consumer``."""
        from confluent_kafka import Consumer  # noqa: PLC0415 - optional dependency

        return Consumer(dict(settings))

    def producer(self, settings: Mapping[str, Any]) -> Any:
        """A ``Producer``."""
        from confluent_kafka import Producer  # noqa: PLC0415 - optional dependency

        return Producer(dict(settings))
