"""Importing saga classes named ``module:Class`` and registering them."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coordinator.language.saga import Saga

__all__ = ["SagaImportError", "build_registry", "import_saga"]


class SagaImportError(ValueError):
    """A ``module:Class`` spec does not name an importable saga class."""


#: A spec ending so names a saga definition file (``coordinator.definitions``), not a class.
DEFINITION_SUFFIXES = (".yaml", ".yml", ".json")


def import_saga(spec: str) -> type[Saga]:
    """The saga class ``spec`` (``package.module:ClassName``, or a definition file's path
    ending in ``.yaml``, ``.yml`` or ``.json``) names."""
    if spec.endswith(DEFINITION_SUFFIXES):
        from coordinator.definitions import InvalidDefinition, load_saga_file

        try:
            cls: type[Saga] = load_saga_file(spec)
        except InvalidDefinition as exc:
            raise SagaImportError(str(exc)) from None
        return cls
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SagaImportError(f"saga spec {spec!r} must look like 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SagaImportError(f"cannot import {module_name!r} for {spec!r}: {exc}"
                              f"{_path_hint(module_name, exc)}") from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise SagaImportError(f"{module_name!r} has no attribute {attr!r}") from exc
    if not (isinstance(target, type) and issubclass(target, Saga)):
        raise SagaImportError(f"{spec!r} is {target!r}, not a Saga subclass")
    return target


def _path_hint(module_name: str, exc: ImportError) -> str:
    """Where the module must be: importable by this Python, so on ``PYTHONPATH`` or installed.

    A package in the current folder gets its own hint: console scripts
    (``sagaflow-coordinator``) do not search the current folder, ``python -m`` does."""
    top = module_name.split(".")[0]
    if not (isinstance(exc, ModuleNotFoundError) and exc.name == top):
        return ""
    here = Path.cwd()
    if (here / top).is_dir() or (here / f"{top}.py").is_file():
        return (f" ({top!r} is in the current folder, which a console script does not search: "
                "set PYTHONPATH=. or run python -m coordinator)")
    return (f" (every process that registers the saga, the worker, the API and `topics`, must "
            f"import it: install the package that holds {top!r}, or add the folder that "
            f"holds it to PYTHONPATH)")


def build_registry(specs: Iterable[str | type[Saga]], *, topic_prefix: str) -> Any:
    """A ``SagaRegistry`` holding the given classes (or specs), compiled for ``topic_prefix``."""
    from coordinator.sagas.registry import SagaRegistry

    registry = SagaRegistry(topic_prefix=topic_prefix)
    for item in specs:
        registry.register(import_saga(item) if isinstance(item, str) else item)
    return registry
