"""Saga types: the registry, loading them from modules, their queries and diagrams, and the
pattern library."""
