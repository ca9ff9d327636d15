"""Analyzer: detector plugins (pure functions of aggregated data) that return findings."""
