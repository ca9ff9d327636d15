"""JMX source: Jolokia bulk reads or a Prometheus JMX-exporter endpoint -> window means, gauges."""
