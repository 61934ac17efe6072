"""The CLI's own error: a usage mistake the command reports in one line with exit status 2.

(Also the one argument check the subcommands share, :func:`non_negative`: a
bad number is the same kind of mistake, reported by argparse with status 2.)

Failures of the layers below (:class:`changelog.ChangelogError`,
:class:`statestore.errors.StateStoreError`) are reported by
:func:`statestore.cli.app.main` with exit status 1.
"""

from __future__ import annotations

import argparse

__all__ = ["UsageError", "non_negative"]


class UsageError(Exception):
    """A path or argument the command cannot work with (missing, wrong kind): exit status 2."""


def non_negative(text: str) -> int:
    """An argparse ``type``: ``text`` as an integer >= 0 (else argparse's usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value
