"""A one-line progress display on stderr, drawn only when stderr is a terminal.

No dependency: a carriage return and a line such as
``verify  [#########.........]  48%  1.2 GiB/2.5 GiB  3.1s`` redrawn at most
ten times a second, cleared when done.  When stderr is not a TTY (pipes, CI,
tests) nothing at all is written, so scripts parsing output never see it.

Thread-safety: not thread-safe; one :class:`Progress` per operation, driven
by the thread doing the work.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Final, TextIO

from statestore.cli.output import format_bytes

__all__ = ["Progress"]

_BAR_WIDTH: Final = 20
_MIN_INTERVAL_S: Final = 0.1


class Progress:
    """Progress of one long operation, counted in ``unit`` (``"bytes"`` or ``"records"``).

    Use as a context manager; call :meth:`advance` as work is done.
    ``total`` may be ``None`` when unknown (then only the count is shown).
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        unit: str = "bytes",
        stream: TextIO | None = None,
        enabled: bool | None = None,
    ) -> None:
        """Prepare the display; ``enabled`` defaults to "the stream is a TTY"."""
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = self._stream.isatty() if enabled is None else enabled
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False

    @property
    def enabled(self) -> bool:
        """Whether anything is drawn."""
        return self._enabled

    def advance(self, amount: int = 1) -> None:
        """Count ``amount`` more units of work; redraw if the last draw is old enough."""
        self.done += amount
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._last_draw >= _MIN_INTERVAL_S:
            self._last_draw = now
            self._draw(now)

    def render(self, now: float | None = None) -> str:
        """The progress line as it would be drawn now (without the carriage return)."""
        elapsed = (time.monotonic() if now is None else now) - self._started
        count = self._format(self.done)
        if self.total:
            fraction = min(1.0, self.done / self.total)
            filled = int(fraction * _BAR_WIDTH)
            bar = "#" * filled + "." * (_BAR_WIDTH - filled)
            return (
                f"{self.label}  [{bar}] {fraction:4.0%}  "
                f"{count}/{self._format(self.total)}  {elapsed:.1f}s"
            )
        return f"{self.label}  {count}  {elapsed:.1f}s"

    def _format(self, amount: int) -> str:
        return format_bytes(amount) if self.unit == "bytes" else f"{amount:,} {self.unit}"

    def _draw(self, now: float) -> None:
        self._stream.write("\r" + self.render(now) + "\x1b[K")
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the line (if anything was drawn)."""
        if self._drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._drawn = False

    def __enter__(self) -> Progress:
        """Start timing."""
        self._started = time.monotonic()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Erase the line."""
        self.close()
