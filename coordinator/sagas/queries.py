"""Read-only queries declared on a saga class: pure functions of a saga's state.

::

    class Progress(BaseModel):
        paid: bool

    class AwaitPayment(Saga):
        ...
        queries = {"progress": lambda q: Progress(paid="pay" in q.results)}

A query sees a :class:`QueryContext` (status, input, the results so far, the whole state) and
returns a pydantic model. It runs on the stored snapshot read with a plain ``SELECT``: it
writes nothing, takes no row lock, and so never waits for (or delays) the saga's own changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from uuid import UUID

from pydantic import BaseModel

from coordinator.engine import CompiledSaga, SagaState, node_results

__all__ = ["Query", "QueryContext", "QueryFailed", "UnknownQuery", "run_query"]

InputT = TypeVar("InputT", bound=BaseModel)


@dataclass(frozen=True)
class QueryContext(Generic[InputT]):
    saga_id: UUID
    saga_type: str
    version: int
    #: ``running``, ``completed``, ... (``SagaState.status`` as text).
    status: str
    input: InputT
    #: The result of every node that succeeded, by node key (a composite's as its mappers
    #: see it: a for-each's list, a race's winner's, ...).
    results: Mapping[str, Any]
    state: SagaState


#: What a saga class lists in ``queries``: name -> function of the context.
Query = Callable[[QueryContext[Any]], BaseModel]


class UnknownQuery(LookupError):
    """The saga's type declares no query of that name (HTTP 404 ``unknown_query``)."""

    def __init__(self, saga_type: str, name: str, known: list[str]) -> None:
        self.known = known
        super().__init__(f"saga type {saga_type!r} declares no query {name!r} "
                         f"(its queries: {', '.join(known) or 'none'})")


class QueryFailed(RuntimeError):
    """The query function raised or did not return a pydantic model (HTTP 500
    ``query_failed``: a bug in the saga class, said plainly)."""


def declared(definition: CompiledSaga) -> Mapping[str, Query]:
    queries: Mapping[str, Query] = getattr(definition.saga_class, "queries", None) or {}
    return queries


def run_query(definition: CompiledSaga, state: SagaState, name: str) -> dict[str, Any]:
    """Answer query ``name`` on ``state``; the model's JSON form."""
    queries = declared(definition)
    if name not in queries:
        raise UnknownQuery(definition.name, name, sorted(queries))
    context: QueryContext[Any] = QueryContext(
        saga_id=state.saga_id, saga_type=state.saga_type, version=state.version,
        status=state.status.value,
        input=definition.input_model.model_validate(state.input),
        results=node_results(definition, state),
        state=state)
    try:
        answer = queries[name](context)
    except Exception as exc:
        raise QueryFailed(f"query {name!r} of {definition.name} raised "
                          f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(answer, BaseModel):
        raise QueryFailed(f"query {name!r} of {definition.name} returned "
                          f"{type(answer).__name__}, not a pydantic model")
    return answer.model_dump(mode="json")
