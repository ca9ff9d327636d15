"""Outputs the agent pushes: Kafka (through the on-disk spool) and OTLP."""
