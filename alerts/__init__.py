"""Prometheus alerting/recording rules, their promtool tests, and the Alertmanager webhook receiver."""
