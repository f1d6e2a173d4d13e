"""A saga's search attribute values, computed from its state, and the attributes a set of
saga types declares (what a filter is type-checked against).

The values are a pure function of the input and the results: the store recomputes them when
a saga starts and when its results change, and the test kit computes the same ones.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.engine import CompiledSaga, SagaState, node_results
from coordinator.language.search_attributes import (
    AttributeValueError,
    Kind,
    SearchContext,
    declared_attributes,
    normalise,
)

__all__ = ["Catalogue", "Declared", "catalogue", "has_attributes", "search_values"]

log = logging.getLogger(__name__)


def has_attributes(definition: CompiledSaga) -> bool:
    return bool(definition.saga_class is not None and declared_attributes(definition.saga_class))


def search_values(definition: CompiledSaga, state: SagaState, *, strict: bool = False
                  ) -> dict[str, Any]:
    """Name -> value of every attribute of ``definition`` that has one on ``state``.

    A function that raises or returns ``None`` leaves its attribute unset; one that returns
    a value of another type too, with a warning logged (``strict``: raise instead, as the
    test kit does, so a test finds the bug)."""
    attributes = declared_attributes(definition.saga_class) if definition.saga_class else ()
    if not attributes:
        return {}
    context = SearchContext(
        saga_id=state.saga_id, saga_type=state.saga_type, version=state.version,
        input=definition.input_model.model_validate(state.input),
        results=node_results(definition, state))
    out: dict[str, Any] = {}
    for attr in attributes:
        try:
            raw = attr.source(context)
        except Exception as exc:
            if strict and not isinstance(exc, (LookupError, AttributeError, TypeError)):
                raise
            continue  # a result not there yet (or a bug the test kit's strict mode shows)
        try:
            value = normalise(attr.kind, raw)
        except AttributeValueError as exc:
            message = (f"search attribute {attr.name!r} of {definition.name} "
                       f"v{definition.version}: {exc}")
            if strict:
                raise AttributeValueError(message) from None
            log.warning("%s; left unset on saga %s", message, state.saga_id)
            continue
        if value is not None:
            out[attr.name] = value
    return out


@dataclass(frozen=True)
class Declared:
    """One attribute name as a set of saga types declares it: kind -> the types."""

    name: str
    kinds: Mapping[Kind, tuple[str, ...]]

    @property
    def kind(self) -> Kind | None:
        """Its kind, ``None`` when two types declare it with different kinds."""
        return next(iter(self.kinds)) if len(self.kinds) == 1 else None

    def conflict(self) -> str:
        return "; ".join(f"{k} by {', '.join(t)}" for k, t in sorted(self.kinds.items()))


#: Attribute name -> how the saga types declare it.
Catalogue = Mapping[str, Declared]


def catalogue(definitions: Iterable[CompiledSaga]) -> dict[str, Declared]:
    """Every attribute the definitions (all their versions) declare."""
    kinds: dict[str, dict[Kind, set[str]]] = {}
    for definition in definitions:
        if definition.saga_class is None:
            continue
        for attr in declared_attributes(definition.saga_class):
            kinds.setdefault(attr.name, {}).setdefault(attr.kind, set()).add(definition.name)
    return {name: Declared(name, {k: tuple(sorted(t)) for k, t in by_kind.items()})
            for name, by_kind in sorted(kinds.items())}
