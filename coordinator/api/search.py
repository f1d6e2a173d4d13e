"""The saga list's ``q``: a filter in the filter language, checked against the attributes
the registered saga types declare, as a SQL condition with bind parameters.

An error is a 400 ``invalid_filter`` whose details give the column (1-based) and the reason,
so a client (the CLI, the console's search box) can point at it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coordinator.api.errors import ApiError
from coordinator.engine import CompiledSaga
from coordinator.sagas.filter_check import check_filter
from coordinator.sagas.filters import FilterError, parse_filter
from coordinator.sagas.search import catalogue
from coordinator.store.search_sql import SqlFilter, filter_sql

__all__ = ["InvalidFilter", "compile_query", "declared_fields"]


class InvalidFilter(ApiError):
    status = 400
    code = "invalid_filter"


def compile_query(q: str, definitions: Iterable[CompiledSaga], saga_type: str | None = None
                  ) -> SqlFilter:
    """The SQL condition of filter ``q`` over the attributes of ``definitions`` (of
    ``saga_type`` alone, when the list is narrowed to one type)."""
    chosen = [d for d in definitions if saga_type is None or d.name == saga_type]
    try:
        return filter_sql(check_filter(parse_filter(q), catalogue(chosen)))
    except FilterError as exc:
        raise InvalidFilter(f"invalid filter: {exc}", details={
            "column": exc.column, "reason": exc.reason}) from None


def declared_fields(definitions: Iterable[CompiledSaga]) -> dict[str, Any]:
    """Attribute name -> its kind (or the conflicting declarations): what a filter may
    name besides the built-in fields."""
    return {name: d.kind or d.conflict() for name, d in catalogue(definitions).items()}
