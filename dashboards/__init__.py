"""Grafana dashboards as code (grafana-foundation-sdk), generated JSON and the push command."""
