"""Subcommands of the ``linkwatch`` CLI, one module each, each exposing ``app``."""
