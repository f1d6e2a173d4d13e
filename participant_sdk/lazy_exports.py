"""A package's names loaded from their modules on first use (PEP 562): importing a package
for one light name (a function's entry point, a protocol helper) does not import everything
else it exports."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, namespace: MutableMapping[str, Any],
                 names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each of ``names`` (name -> module) imported
    on first use, then kept in ``namespace`` (the package's globals) for the next."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
