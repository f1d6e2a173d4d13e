"""Whether one saga state matches a filter, in Python: what the test kit asserts with
(``run.matches("carrier = 'ups'")``), by the same rules the store's SQL follows."""

from __future__ import annotations

from typing import Any

from coordinator.engine import CompiledSaga, SagaState
from coordinator.sagas.filter_check import check_filter, evaluate
from coordinator.sagas.filters import parse_filter
from coordinator.sagas.search import catalogue, search_values

__all__ = ["filter_row", "matches"]


def filter_row(definition: CompiledSaga, state: SagaState, business_key: str | None = None
               ) -> dict[str, Any]:
    """The built-in fields and attribute values of a saga, as a filter reads them."""
    return {"status": state.status.value, "saga_type": state.saga_type,
            "version": state.version, "business_key": business_key,
            "created_at": state.started_at, "updated_at": state.updated_at,
            **search_values(definition, state, strict=True)}


def matches(definition: CompiledSaga, state: SagaState, text: str,
            business_key: str | None = None) -> bool:
    """Whether the saga matches filter ``text`` (``FilterError``: not a filter, or one that
    does not fit the saga's attributes)."""
    checked = check_filter(parse_filter(text), catalogue([definition]))
    return evaluate(checked, filter_row(definition, state, business_key))
