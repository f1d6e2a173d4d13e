"""Random filters over random sagas: real Postgres, through the compiled SQL, finds exactly
the sagas the Python evaluator does (issue 37). The filters are generated as text, so the
parser, the type check and both evaluators are held to one another."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from coordinator.engine import compile_saga
from coordinator.language import Saga, SearchAttribute, TccStep
from coordinator.sagas.filter_check import check_filter, evaluate
from coordinator.sagas.filters import parse_filter
from coordinator.sagas.search import catalogue
from coordinator.store.search_attributes import write_values
from coordinator.store.search_sql import filter_sql
from tests.integration.test_store_support import migrated

pytestmark = pytest.mark.integration


class In(BaseModel):
    x: int = 0


KINDS = {"s": "str", "n": "int", "f": "float", "b": "bool", "t": "datetime", "k": "keywords"}
_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float, "bool": bool,
                          "datetime": datetime, "keywords": list[str]}


class Probe(Saga):
    name = "probe"
    input_model = In
    steps = (TccStep("pay", "payments", "charge"),)
    search = tuple(SearchAttribute(n, _TYPES[k], lambda c: None) for n, k in KINDS.items())


ATTRS = catalogue([compile_saga(Probe)])
T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
TEXTS = ["", "a", "b", "ab", "B", "é", "z", "a'b", "a\\b", "{0}", "$1", "日本"]
INTS = [-3, -1, 0, 1, 2, 3, 2**40, -(2**40)]
FLOATS = [-1.5, 0.0, 0.5, 1.0, 2.0, 1e10, 2.0**53 + 2]
TIMES = [T0 + timedelta(hours=h) for h in (-24, 0, 1, 2)]
STATUSES = ["running", "completed", "dead", "compensated"]

values: dict[str, st.SearchStrategy[Any]] = {
    "s": st.sampled_from(TEXTS), "n": st.sampled_from(INTS), "f": st.sampled_from(FLOATS),
    "b": st.booleans(), "t": st.sampled_from(TIMES),
    "k": st.lists(st.sampled_from(["x", "y", "z"]), min_size=1, max_size=3, unique=True)
    .map(sorted),
}
rows = st.lists(st.fixed_dictionaries(
    {"status": st.sampled_from(STATUSES), "saga_type": st.sampled_from(["probe", "other"]),
     "version": st.integers(1, 3), "business_key": st.none() | st.sampled_from(TEXTS[:4]),
     "created_at": st.sampled_from(TIMES)},
    optional={name: strategy for name, strategy in values.items()}), max_size=12)


def _text(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _literal(kind: str, value: Any) -> str:
    if kind in ("str", "keywords"):
        return _text(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "datetime":
        return _text(value.isoformat())
    return repr(value)


FIELDS: dict[str, tuple[str, st.SearchStrategy[Any]]] = {
    **{name: (kind, values[name] if kind != "keywords" else st.sampled_from(["x", "y", "q"]))
       for name, kind in KINDS.items()},
    # numbers compare across int and float
    "n": ("int", st.sampled_from(INTS) | st.sampled_from(FLOATS)),
    "f": ("float", st.sampled_from(FLOATS) | st.sampled_from(INTS)),
    "status": ("str", st.sampled_from(STATUSES)),
    "type": ("str", st.sampled_from(["probe", "other", "a"])),
    "version": ("int", st.integers(0, 4)),
    "business_key": ("str", st.sampled_from(TEXTS[:5])),
    "created_at": ("datetime", st.sampled_from(TIMES)),
}


@st.composite
def comparison(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(sorted(FIELDS)))
    kind, literal = FIELDS[name]
    ordered = kind in ("str", "int", "float", "datetime") and name != "status"
    ops = ["=", "!=", "in", "not in", "is null", "is not null"] + (
        ["<", "<=", ">", ">="] if ordered else [])
    op = draw(st.sampled_from(ops))
    if op.startswith("is"):
        return f"{name} {op}"
    if op in ("in", "not in"):
        items = draw(st.lists(literal, min_size=1, max_size=3))
        return f"{name} {op} ({', '.join(_literal(kind, v) for v in items)})"
    return f"{name} {op} {_literal(kind, draw(literal))}"


filters = st.recursive(
    comparison(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["and", "or", "AND", "Or"]), inner)
        .map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda f: f"not {f}")),
    max_leaves=6)


@pytest.fixture
def conn(fresh_db: str) -> Iterator[tuple[asyncio.AbstractEventLoop, asyncpg.Connection]]:
    loop = asyncio.new_event_loop()
    loop.run_until_complete(migrated(fresh_db))
    connection = loop.run_until_complete(asyncpg.connect(fresh_db))
    try:
        yield loop, connection
    finally:
        loop.run_until_complete(connection.close())
        loop.close()


_INSERT = """
INSERT INTO sagas (id, saga_type, saga_version, status, snapshot, input, input_hash,
                   history_seq, created_at, updated_at, last_progress_at, business_key)
VALUES ($1, $2, $3, $4, '{}', '{}', '\\x00', 1, $5, $5, $5, $6)
"""


async def _load(connection: asyncpg.Connection, sagas: list[dict[str, Any]]) -> list[UUID]:
    await connection.execute("TRUNCATE sagas, saga_search_attributes")
    ids = [uuid4() for _ in sagas]
    for saga_id, row in zip(ids, sagas, strict=True):
        await connection.execute(_INSERT, saga_id, row["saga_type"], row["version"],
                                 row["status"], row["created_at"], row["business_key"])
    await write_values(connection, {
        saga_id: (KINDS, {n: row[n] for n in KINDS if n in row})
        for saga_id, row in zip(ids, sagas, strict=True)})
    return ids


async def _matching(connection: asyncpg.Connection, text: str) -> set[UUID]:
    compiled = filter_sql(check_filter(parse_filter(text), ATTRS))
    sql = compiled.sql.format(*[f"${i + 1}" for i in range(len(compiled.args))])
    return {r["id"] for r in await connection.fetch(
        f"SELECT id FROM sagas WHERE {sql}", *compiled.args)}


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sagas=rows, text=filters)
def test_sql_and_python_agree_on_every_filter(
    conn: tuple[asyncio.AbstractEventLoop, asyncpg.Connection],
    sagas: list[dict[str, Any]], text: str,
) -> None:
    loop, connection = conn
    ids = loop.run_until_complete(_load(connection, sagas))
    checked = check_filter(parse_filter(text), ATTRS)
    expected = {saga_id for saga_id, row in zip(ids, sagas, strict=True)
                if evaluate(checked, row)}
    found = loop.run_until_complete(_matching(connection, text))
    assert found == expected, (text, json.dumps(sagas, default=str))
