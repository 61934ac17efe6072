"""One log segment: the ``.log`` file and its sparse ``.index`` and ``.timeindex``.

Layer 3 of :mod:`changelog`: builds on :mod:`changelog.record` and :mod:`changelog.fs`.
``index`` holds the fixed-width index mechanics once; ``offset_index`` and
``time_index`` only say what an entry means.
"""
