"""Disk primitives: the one file mutator (atomic replace, fsync, fault hook), the directory lock, checkpoint files.

Layer 1 of :mod:`changelog`: knows only :mod:`changelog.errors`, :mod:`changelog.limits`
and :mod:`changelog.config`.
"""
