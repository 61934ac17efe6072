"""What happens when ``process()`` raises: the processing exception handler (KIP-1033).

The runtime first abandons the open transaction of *every* task (the buffered
store writes and outputs are dropped, the inputs rewound to the committed
offsets: nothing of it was sent to the broker), then asks the handler about
the failing record:

* :attr:`ProcessingResponse.FAIL` (:func:`log_and_fail`, the default):
  ``poll_once()`` raises :class:`~statestore.kafka.ProcessingError`; nothing of
  the failing transaction is committed.  A later ``poll_once()`` replays from
  the committed offsets (the failing record too).
* :attr:`ProcessingResponse.CONTINUE` (:func:`log_and_continue`): the records
  are replayed and the failing record alone is skipped: its store writes and
  outputs are not applied, ``dropped-records-total`` counts it, and with a
  dead letter topic configured (``dead_letter_queue_topic``) the input record
  is written there, with the ``__streams.errors.*`` headers of KIP-1034, inside
  the transaction that commits the records after it.  Exactly once holds for
  every other record; the skipped one is applied zero times.

A handler is a plain function ``handler(context) -> ProcessingResponse``; it
runs on the processor's thread and must not touch the stores.
"""

from __future__ import annotations

import enum
import logging
import traceback
from collections.abc import Callable

import attrs

__all__ = [
    "DEAD_LETTER_HEADERS",
    "ProcessingErrorContext",
    "ProcessingExceptionHandler",
    "ProcessingResponse",
    "dead_letter_headers",
    "log_and_continue",
    "log_and_fail",
]

logger = logging.getLogger(__name__)

DEAD_LETTER_HEADERS = (
    "__streams.errors.exception",
    "__streams.errors.message",
    "__streams.errors.stacktrace",
    "__streams.errors.topic",
    "__streams.errors.partition",
    "__streams.errors.offset",
)
"""The headers of a dead letter record, Kafka Streams' names (KIP-1034), in this order."""


class ProcessingResponse(enum.Enum):
    """The handler's decision (Kafka Streams' ``ProcessingHandlerResponse``)."""

    FAIL = "fail"
    """Stop: ``poll_once()`` raises ``ProcessingError``; nothing of the transaction commits."""
    CONTINUE = "continue"
    """Skip the failing record (not applied, counted, optionally dead-lettered); go on."""


@attrs.frozen(kw_only=True)
class ProcessingErrorContext:
    """The failing record and the exception ``process()`` raised.  Immutable."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    exception: Exception


ProcessingExceptionHandler = Callable[[ProcessingErrorContext], ProcessingResponse]
"""``handler(context) -> ProcessingResponse``, called on the processor's thread."""


def log_and_fail(context: ProcessingErrorContext) -> ProcessingResponse:
    """Log the error and answer FAIL (the default handler)."""
    logger.error(
        "process() failed on %s-%s@%s: %r",
        context.topic,
        context.partition,
        context.offset,
        context.exception,
    )
    return ProcessingResponse.FAIL


def log_and_continue(context: ProcessingErrorContext) -> ProcessingResponse:
    """Log the error and answer CONTINUE: the record is skipped."""
    logger.warning(
        "process() failed on %s-%s@%s, record skipped: %r",
        context.topic,
        context.partition,
        context.offset,
        context.exception,
    )
    return ProcessingResponse.CONTINUE


def dead_letter_headers(context: ProcessingErrorContext) -> list[tuple[str, bytes]]:
    """The KIP-1034 headers of the dead letter record for ``context`` (UTF-8 values)."""
    exception = context.exception
    kind = type(exception)
    values = (
        f"{kind.__module__}.{kind.__qualname__}",
        str(exception),
        "".join(traceback.format_exception(exception)),
        context.topic,
        str(context.partition),
        str(context.offset),
    )
    return [
        (name, value.encode("utf-8", "replace"))
        for name, value in zip(DEAD_LETTER_HEADERS, values, strict=True)
    ]
