"""Operator remedies on one partition directory, each planned read-only before it changes a byte.

* :mod:`changelog.repair.salvage`: rewrite damaged segments keeping every valid
  batch around the damage; name what is lost, transaction by transaction.
* :mod:`changelog.repair.truncate`: truncate the log at an offset; drop a torn
  tail the loader refuses (after a clean shutdown).
* :mod:`changelog.repair.checkpoints`: rewrite damaged or impossible checkpoint files.
* :mod:`changelog.repair.indexes`: rebuild every segment's indexes from its ``.log``.
* :mod:`changelog.repair.scan`: reading past damage, and what ``read_committed`` keeps.

The ``statestore repair`` command (``statestore/cli/repair.py``) prints the
plans and runs them with ``--apply``; ``docs/recovery.md`` says which typed
error calls for which remedy.
"""
