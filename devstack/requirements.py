"""What devstack itself needs of the Python that runs it, checked before anything waits.

Kafka's health check is a real produce and fetch through aiokafka: under a Python without it
every check would fail and ``up kafka`` would wait out its whole start timeout, then blame the
broker. So the command says at once which module is missing and which Python to use.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable

from devstack.errors import DevstackError

#: service name -> the modules its health check imports
MODULES: dict[str, tuple[str, ...]] = {"kafka": ("aiokafka",), "kafka-ha": ("aiokafka",)}

RUN_WITH = ("run devstack with the project's virtual environment, which `make bootstrap` "
            "creates: .venv/bin/python -m devstack ...")


def missing_modules(services: Iterable[str],
                    available: Callable[[str], bool] | None = None) -> list[str]:
    """The modules the named services need that this Python cannot import, in order."""
    def importable(module: str) -> bool:
        return importlib.util.find_spec(module) is not None

    check = available or importable
    missing: list[str] = []
    for service in services:
        for module in MODULES.get(service, ()):
            if module not in missing and not check(module):
                missing.append(module)
    return missing


def require(services: Iterable[str],
            available: Callable[[str], bool] | None = None) -> None:
    """Raise :class:`DevstackError` naming every missing module and the Python to use."""
    names = list(services)
    missing = missing_modules(names, available)
    if missing:
        needing = [s for s in names if set(MODULES.get(s, ())) & set(missing)]
        raise DevstackError(
            f"{sys.executable} cannot import {', '.join(missing)}, which devstack needs to "
            f"check {', '.join(needing)}; {RUN_WITH}")
