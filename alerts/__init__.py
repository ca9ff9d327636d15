"""Prometheus alerting/recording rules, their promtool tests, the Alertmanager example config
(``alertmanager.example.yml``, package data) and the Alertmanager webhook receiver."""
