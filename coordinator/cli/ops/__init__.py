"""``saga``: the operator CLI, a thin HTTP client of the operator API."""

from coordinator.cli.ops.main import main

__all__ = ["main"]
