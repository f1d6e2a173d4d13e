"""Garbage-collector thresholds for a worker process.

A worker keeps many small objects alive (the state cache holds up to 100,000 nodes). At
CPython's default thresholds, (700, 10, 10), full collections walk that heap again and again:
about 40% of a worker's CPU while it fires timers (``bench/README.md``). The core creates few
reference cycles, so collecting less often costs little memory.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["WORKER_GC_THRESHOLDS", "tune_gc"]

WORKER_GC_THRESHOLDS: Final = (50_000, 20, 100)


def tune_gc(thresholds: tuple[int, int, int] = WORKER_GC_THRESHOLDS) -> None:
    """Freeze what start-up allocated (never garbage: out of every later collection) and set
    ``thresholds``."""
    gc.freeze()
    gc.set_threshold(*thresholds)
