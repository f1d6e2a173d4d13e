"""Versioning tools: input compatibility, draining old versions, machine diffs."""
