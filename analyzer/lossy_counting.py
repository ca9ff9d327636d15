"""Lossy counting for the analyzer's hot keys: the algorithm lives in the core
(:mod:`linkwatch.lossy_counting`), shared with the producer partitioner."""

from __future__ import annotations

from linkwatch.lossy_counting import LossyCounter

__all__ = ["LossyCounter"]
