"""Helpers for restore-after-crash tests of services built on statestore."""

from __future__ import annotations

__all__: list[str] = []
