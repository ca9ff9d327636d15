"""Testbed: a real local Kafka cluster from Maven Central jars, load generation and faults."""
