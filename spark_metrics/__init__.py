"""PySpark jobs: streaming and batch aggregation of linkwatch.samples (extract → transform → load)."""
