"""The repository's own Apache Kafka harness: a pinned Kafka from Maven Central, a one-node broker.

Not part of the distribution (``pyproject.toml`` ships ``statestore`` and
``changelog`` only; ``docs/internals.md`` says why): the tests, benchmarks and
examples of this repository import it, and ``kafka_harness/kafka`` drives it by
hand.

* :mod:`kafka_harness.kafka_runtime` resolves the pinned jars (``pom.xml``,
  ``pom-4.xml``) with Maven and runs Kafka's tools (:class:`~kafka_harness.kafka_runtime.KafkaDist`);
* :mod:`kafka_harness.broker` runs a one-node KRaft broker on them;
* :mod:`kafka_harness.dump_parser` parses ``DumpLogSegments`` output;
* :mod:`kafka_harness.cli` is the command line behind ``kafka_harness/kafka``.

Nothing in ``statestore`` or ``changelog`` imports it (``tests/test_architecture.py``).
"""
