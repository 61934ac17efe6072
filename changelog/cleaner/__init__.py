"""The log cleaner: Kafka's compaction of a log, one pass at a time, and the runner around it.

Layer 5 of :mod:`changelog`, above :class:`changelog.log.log.Log`.  ``clean`` is one
pass (a plain function); ``offset_map``, ``recopy``, ``horizon`` and ``stats`` are
its parts; ``manager`` (cleaning state and checkpoints), ``worker``, ``throttle``
and ``service`` run passes in the background.
"""
