"""The processing exception handlers and the dead letter record's headers (KIP-1033, KIP-1034)."""

from __future__ import annotations

from statestore.kafka import (
    ProcessingErrorContext,
    ProcessingResponse,
    log_and_continue,
    log_and_fail,
)
from statestore.kafka.handlers import dead_letter_headers


def _fail() -> None:
    raise ValueError("bad delta")


def _context() -> ProcessingErrorContext:
    try:
        _fail()
    except ValueError as exc:
        return ProcessingErrorContext(
            topic="in", partition=3, offset=17, key=b"k", value=b"v", exception=exc
        )


def test_the_built_in_handlers_answer_fail_and_continue() -> None:
    assert log_and_fail(_context()) is ProcessingResponse.FAIL
    assert log_and_continue(_context()) is ProcessingResponse.CONTINUE


def test_dead_letter_headers_are_kafka_streams_ones() -> None:
    headers = dict(dead_letter_headers(_context()))
    # KIP-1034's names; values UTF-8 text
    assert headers["__streams.errors.exception"] == b"builtins.ValueError"
    assert headers["__streams.errors.message"] == b"bad delta"
    assert b"_fail()" in headers["__streams.errors.stacktrace"]
    assert headers["__streams.errors.topic"] == b"in"
    assert headers["__streams.errors.partition"] == b"3"
    assert headers["__streams.errors.offset"] == b"17"
    assert len(headers) == 6
