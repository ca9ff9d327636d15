"""Outputs read by scrapers: Prometheus ``/metrics``."""
