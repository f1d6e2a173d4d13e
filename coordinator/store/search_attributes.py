"""Search attribute values in ``saga_search_attributes`` (migration 0015): written in the
transaction of the state change that moved them, read for a saga's detail.

A saga's values are recomputed when it starts and when its results change (a new result, a
result undone), and written only if one of them moved: most replies write nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine import CompiledSaga, SagaState
from coordinator.language.search_attributes import Kind, declared_attributes
from coordinator.sagas.search import has_attributes, search_values
from coordinator.store._writes import Change
from coordinator.store.errors import StoreError

__all__ = ["attributes_of", "search_changes", "write_search_attributes", "write_values"]

_DELETE: Final = "DELETE FROM saga_search_attributes WHERE saga_id = ANY($1::uuid[])"
_INSERT: Final = """
INSERT INTO saga_search_attributes (saga_id, name, position, kind, text_value, num_value,
                                    bool_value, time_value)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::smallint[], $4::text[], $5::text[],
                     $6::numeric[], $7::boolean[], $8::timestamptz[])
"""
_READ: Final = """
SELECT name, kind, text_value, num_value, bool_value, time_value
FROM saga_search_attributes WHERE saga_id = $1 ORDER BY name, position
"""

Definitions = Callable[[str, int], CompiledSaga]


def search_changes(changes: Sequence[Change], definition: Definitions
                   ) -> dict[UUID, dict[str, Any]]:
    """Saga id -> its new values, for each saga of ``changes`` whose values moved (a new
    saga: whose class declares any)."""
    last: dict[UUID, Change] = {}
    for change in changes:
        last[change.saga.saga_id] = change
    out: dict[UUID, dict[str, Any]] = {}
    for saga_id, change in last.items():
        new, base = change.decision.state, change.saga.base
        if not (_declares(definition, new)
                or (base is not None and _declares(definition, base))):
            continue  # most saga types declare none: no results compared
        if base is not None and base.version == new.version and base.results() == new.results():
            continue  # the values are a function of the input (never changes) and results
        now = _values(definition, new)
        before = {} if base is None else _values(definition, base)
        if now != before:
            out[saga_id] = now
    return out


def _declares(definition: Definitions, state: SagaState) -> bool:
    try:
        return has_attributes(definition(state.saga_type, state.version))
    except StoreError:
        return False


def _values(definition: Definitions, state: SagaState) -> dict[str, Any]:
    try:
        compiled = definition(state.saga_type, state.version)
    except StoreError:  # a version no longer registered here: it declares nothing we know
        return {}
    return search_values(compiled, state) if has_attributes(compiled) else {}


def _kinds(definition: Definitions, saga_type: str, version: int) -> Mapping[str, Kind]:
    compiled = definition(saga_type, version)
    cls = compiled.saga_class
    return {a.name: a.kind for a in declared_attributes(cls)} if cls is not None else {}


async def write_search_attributes(conn: asyncpg.Connection, changes: Sequence[Change],
                                  definition: Definitions) -> None:
    """Write the values that moved in ``changes``, in the caller's transaction."""
    moved = search_changes(changes, definition)
    if not moved:
        return
    states = {c.saga.saga_id: c.decision.state for c in changes}
    await write_values(conn, {
        saga_id: (_kinds(definition, states[saga_id].saga_type, states[saga_id].version),
                  values)
        for saga_id, values in moved.items()})


async def write_values(conn: asyncpg.Connection,
                       sagas: Mapping[UUID, tuple[Mapping[str, Kind], Mapping[str, Any]]]
                       ) -> None:
    """Replace the stored values of each saga by ``values`` (of the ``kinds`` given):
    saga id -> (kinds, values)."""
    columns: list[list[Any]] = [[] for _ in range(8)]
    for saga_id, (kinds, values) in sagas.items():
        for name, value in values.items():
            kind = kinds[name]
            items = value if kind == "keywords" else [value]
            for position, item in enumerate(items):
                for column, cell in zip(columns, (saga_id, name, position, kind,
                                                  *_cells(kind, item)), strict=True):
                    column.append(cell)
    await conn.execute(_DELETE, list(sagas))
    if columns[0]:
        await conn.execute(_INSERT, *columns)


def _cells(kind: Kind, value: Any) -> tuple[Any, Any, Any, Any]:
    """(text, number, flag, time): the value in the column of its kind."""
    if kind in ("str", "keywords"):
        return value, None, None, None
    if kind in ("int", "float"):
        return None, Decimal(str(value)), None, None
    if kind == "bool":
        return None, None, value, None
    return None, None, None, value


async def attributes_of(conn: asyncpg.Connection, saga_id: UUID) -> dict[str, Any]:
    """The stored values of one saga, by name (a keyword list as a list)."""
    out: dict[str, Any] = {}
    for row in await conn.fetch(_READ, saga_id):
        value = _value(row["kind"], row)
        if row["kind"] == "keywords":
            out.setdefault(row["name"], []).append(value)
        else:
            out[row["name"]] = value
    return out


def _value(kind: str, row: Mapping[str, Any]) -> Any:
    if kind in ("str", "keywords"):
        return row["text_value"]
    if kind == "int":
        return int(row["num_value"])
    if kind == "float":
        return float(row["num_value"])
    if kind == "bool":
        return row["bool_value"]
    at: datetime = row["time_value"]
    return at
