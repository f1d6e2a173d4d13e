"""The installed distribution's version, for every command's ``--version``."""

from __future__ import annotations

from importlib import metadata

__all__ = ["DISTRIBUTION", "version", "version_line"]

#: The name on PyPI (``sagaflow`` there is an unrelated project).
DISTRIBUTION = "sagaflow-tcc"


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


def version_line(prog: str) -> str:
    return f"{prog} ({DISTRIBUTION}) {version()}"
