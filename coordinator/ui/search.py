"""The sagas page's search box: a saga id, the first hex digits of one, or a business key;
and its "where" box: a filter over the search attributes (``coordinator.sagas.filters``).

It never dead-ends: a whole id or a key only one saga has opens that saga; a key several sagas
share lists them; an id prefix lists the sagas it starts; anything else lists nothing, with
the filters kept, and says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from coordinator.api.models import SagaFilter
from coordinator.api.queries import id_range, list_sagas
from coordinator.api.search import InvalidFilter, compile_query
from coordinator.engine import CompiledSaga
from coordinator.store.search_sql import SqlFilter

__all__ = ["search", "where_condition"]


async def search(conn: asyncpg.Connection, f: SagaFilter, q: str, *, now: datetime
                 ) -> tuple[SagaFilter, tuple[UUID, UUID] | None, str, UUID | None]:
    """(the filter to list with, the id range to list in, a line saying what was searched,
    the one saga to open instead, if any)."""
    bounds = id_range(q)
    if bounds is not None and bounds[0] == bounds[1]:
        exists = await conn.fetchval("SELECT true FROM sagas WHERE id = $1", bounds[0])
        return f, bounds, f"saga id {bounds[0]}", bounds[0] if exists else None
    keyed = f.model_copy(update={"business_key": q[:200]})
    found = await list_sagas(conn, keyed, now=now, stuck_ids=(), limit=2)
    if len(found.items) == 1 and f.is_empty():
        return keyed, None, "", found.items[0].saga_id
    if found.items or bounds is None:
        return keyed, None, f"sagas with the business key “{q}”", None
    return f, bounds, f"sagas whose id starts with {q}", None


def where_condition(where: str, definitions: Iterable[CompiledSaga], saga_type: str | None
                    ) -> tuple[SqlFilter | None, dict[str, Any] | None]:
    """(the compiled filter, or None for none; the error to show under the box, with the
    column to point at)."""
    if not where:
        return None, None
    try:
        return compile_query(where, definitions, saga_type), None
    except InvalidFilter as exc:
        return None, {"message": exc.message, **(exc.details or {})}
