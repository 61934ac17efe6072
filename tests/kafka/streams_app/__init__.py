"""A real Kafka Streams application for the interop tests: built (cached) and run by the suite."""
