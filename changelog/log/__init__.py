"""The log: one partition's ordered segments, and everything that opens, reads, writes or cleans up after it.

Layer 5 of :mod:`changelog`: builds on :mod:`changelog.segment`,
:mod:`changelog.record` and :mod:`changelog.fs`; the cleaner and the repair
tools (layer 6) build on it.  Kafka's ``UnifiedLog``/``LocalLog`` with its
``LogLoader``, split one concern a module:

* ``log`` -- :class:`~changelog.log.log.Log`: append, read, roll, truncate,
  retention, flush; ``append_info`` is what an append returns;
* ``log_dir`` (opening and closing a partition directory), ``log_segments``
  (the ordered segment map), ``log_reader`` (reads from a snapshot of it),
  ``retention`` (which segments retention deletes);
* ``load_plan`` (recovery at open, planned read-only; ``verify`` shares it) ->
  ``loader`` (the plan carried out), ``replace`` (the cleaner's
  ``.cleaned`` -> ``.swap`` -> ``.deleted`` protocol and its recovery),
  ``recovery_point`` (the flushed prefix and its checkpoint);
* ``producer_state`` (producers' open transactions, rebuilt from segments),
  ``isolation`` (``read_committed``), ``group_commit`` (shared fsyncs).

The package's ``__init__`` imports nothing: import a module's names from the module
(the public ones are re-exported by :mod:`changelog`).
"""
