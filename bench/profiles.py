"""Summaries of the cProfile files that ``python -m bench --profile`` leaves per process."""

from __future__ import annotations

import io
import pstats
from pathlib import Path
from typing import Any


def summarise_profiles(directory: Path, top: int = 15) -> dict[str, Any]:
    """Per process: the ``top`` functions by cumulative and by own time, as text."""
    out: dict[str, Any] = {"directory": str(directory)}
    for path in sorted(directory.glob("*.prof")):
        buf = io.StringIO()
        stats = pstats.Stats(str(path), stream=buf)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        text = buf.getvalue()
        (directory / f"{path.stem}.txt").write_text(text)
        out[path.stem] = str(directory / f"{path.stem}.txt")
    return out
