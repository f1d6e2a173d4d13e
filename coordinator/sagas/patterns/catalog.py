"""What every pattern shares: how a factory builds its saga class, and the catalog entry
(name, version, change log) the docs and tests read."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from coordinator.language.saga import Migration, RetryPolicy, Saga

__all__ = ["Pattern", "build_saga", "class_name"]

#: Retries of forward steps in the patterns: a few quick attempts.
FORWARD_RETRY = RetryPolicy(max_attempts=5, initial_backoff=timedelta(milliseconds=200),
                            max_backoff=timedelta(seconds=10))


@dataclass(frozen=True, slots=True)
class Pattern:
    """A template in the library: bump ``version`` and add a ``changes`` line whenever what
    the factory builds changes (steps, payloads, defaults); a saga built from it records both
    in its ``pattern`` attribute, so a team sees which template its version came from."""

    name: str
    version: int
    summary: str
    #: ``(version, what changed)``, oldest first.
    changes: Sequence[tuple[int, str]]
    factory: Callable[..., type[Saga]]

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


def class_name(saga_name: str) -> str:
    return "".join(part.capitalize() for part in saga_name.replace("-", "_").split("_")) + "Saga"


def build_saga(pattern: str, pattern_version: int, *, name: str, version: int,
               input_model: type[BaseModel], steps: Sequence[Any], description: str,
               migrate_from: Mapping[int, Migration] | None = None) -> type[Saga]:
    """A validated saga class (``Saga.__init_subclass__`` checks it, as for a written one)."""
    namespace: dict[str, Any] = {
        "name": name, "version": version, "input_model": input_model, "steps": tuple(steps),
        "description": description, "pattern": f"{pattern}@{pattern_version}",
        "__doc__": description, "__module__": "coordinator.sagas.patterns",
        "migrate_from": dict(migrate_from or {}),
    }
    return type(class_name(name), (Saga,), namespace)
