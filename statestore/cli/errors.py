"""The CLI's own error: a usage mistake the command reports in one line with exit status 2.

Failures of the layers below (:class:`changelog.ChangelogError`,
:class:`statestore.errors.StateStoreError`) are reported by
:func:`statestore.cli.app.main` with exit status 1.
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A path or argument the command cannot work with (missing, wrong kind): exit status 2."""
