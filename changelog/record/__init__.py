"""The record batch codec: Kafka record batch v2 (magic 2, CRC-32C), its header, records and varints.

Layer 2 of :mod:`changelog`: moves bytes only, knows nothing of files.  The public
entry point is :mod:`changelog.record.batch`; ``header``, ``body``, ``varint``,
``args`` and ``reader`` are its parts.
"""
