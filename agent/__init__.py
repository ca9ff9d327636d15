"""Broker agent: follows the request log, JMX, log dirs and host; exports sketches and gauges."""
