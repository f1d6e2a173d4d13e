"""Saga queries of the operator API: filters the store's ``list_sagas`` does not offer.

The current-step filter reads the activity columns, the retries filter the node rows' JSON:
fine for an operator's query; the type, status and age filters still use the store's indexes.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.api import cursors
from coordinator.api.errors import BadRequest
from coordinator.api.models import ChildOut, SagaFilter, SagaSort
from coordinator.store import SagaRecord
from coordinator.store.queries import SAGA_COLUMNS, list_children, saga_records
from coordinator.store.search_sql import SqlFilter

__all__ = ["Page", "children_of", "decode_cursor", "encode_cursor", "id_range", "list_sagas",
           "matching_ids"]



@dataclass(frozen=True, slots=True)
class Page:
    items: list[SagaRecord]
    next_cursor: str | None


class _Where:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.args: list[Any] = []

    def add(self, fragment: str, *values: Any) -> None:
        marks = [f"${len(self.args) + i + 1}" for i in range(len(values))]
        self.parts.append(fragment.format(*marks))
        self.args.extend(values)

    def sql(self) -> str:
        return f"WHERE {' AND '.join(self.parts)}" if self.parts else ""


def _where(f: SagaFilter, now: datetime, stuck_ids: Collection[UUID]) -> _Where:
    w = _Where()
    if f.saga_type is not None:
        w.add("saga_type = {0}", f.saga_type)
    if f.version is not None:
        w.add("saga_version = {0}", f.version)
    if f.status is not None:
        w.add("status = {0}", f.status.value)
    if f.min_age_seconds is not None:
        w.add("created_at <= {0}", now - timedelta(seconds=f.min_age_seconds))
    if f.max_age_seconds is not None:
        w.add("created_at >= {0}", now - timedelta(seconds=f.max_age_seconds))
    if f.stuck is not None:
        cond = "id = ANY({0}::uuid[])"
        w.add(cond if f.stuck else f"NOT {cond}", list(stuck_ids))
    if f.current_step is not None:
        w.add("(CASE WHEN status = 'dead' THEN snapshot->>'dead_step' = {0} "
              "ELSE {0} = ANY(active_steps) END)", f.current_step)
    if f.business_key is not None:
        w.add("business_key = {0}", f.business_key)
    if f.min_retries is not None:
        w.add("EXISTS (SELECT 1 FROM saga_nodes n, json_each_text(n.state->'attempts') a "
              "WHERE n.saga_id = sagas.id AND a.value::int - 1 >= {0})", f.min_retries)
    return w


_HEX: Final = re.compile(r"[0-9a-f]{1,32}")


def id_range(text: str) -> tuple[UUID, UUID] | None:
    """Bounds of the ids starting with the hex digits of ``text`` (hyphens ignored), or
    ``None`` when ``text`` is not 1 to 32 hex digits."""
    digits = text.strip().lower().replace("-", "")
    if not _HEX.fullmatch(digits):
        return None
    return UUID(digits.ljust(32, "0")), UUID(digits.ljust(32, "f"))


def encode_cursor(sort: SagaSort, value: datetime, saga_id: UUID) -> str:
    return cursors.encode(sort.value, value.isoformat(), str(saga_id))


def decode_cursor(cursor: str, sort: SagaSort) -> tuple[datetime, UUID]:
    value, sid = cursors.decode(cursor, sort.value, 2)
    try:
        at, saga_id = datetime.fromisoformat(value), UUID(sid)
    except (ValueError, TypeError):
        at = None
    if at is None or at.tzinfo is None:
        raise BadRequest(f"invalid cursor {cursor[:80]!r}: pass back a next_cursor "
                         "unchanged", code="invalid_cursor")
    return at, saga_id


async def list_sagas(
    conn: asyncpg.Connection,
    f: SagaFilter,
    *,
    now: datetime,
    stuck_ids: Collection[UUID],
    sort: SagaSort = SagaSort.CREATED_DESC,
    limit: int = 50,
    cursor: str | None = None,
    id_range: tuple[UUID, UUID] | None = None,
    search: SqlFilter | None = None,
) -> Page:
    """One page of sagas matching ``f``, ordered by ``sort`` then id (keyset pagination).

    ``id_range`` (inclusive bounds) narrows to ids in it: the UI's search by id prefix;
    ``search``, a compiled filter (``coordinator.api.search``), to the sagas it matches.
    """
    column = sort.value.lstrip("-")
    descending = sort.value.startswith("-")
    w = _where(f, now, stuck_ids)
    if id_range is not None:
        w.add("id BETWEEN {0} AND {1}", *id_range)
    if search is not None:
        w.add(search.sql, *search.args)
    if cursor is not None:
        at, sid = decode_cursor(cursor, sort)
        w.add(f"({column}, id) {'<' if descending else '>'} ({{0}}, {{1}})", at, sid)
    direction = "DESC" if descending else "ASC"
    w.args.append(limit + 1)
    rows = await conn.fetch(
        f"SELECT {SAGA_COLUMNS} FROM sagas {w.sql()} "  # noqa: S608 - fixed fragments only
        f"ORDER BY {column} {direction}, id {direction} LIMIT ${len(w.args)}",
        *w.args,
    )
    items = await saga_records(conn, rows[:limit])
    next_cursor = None
    if len(rows) > limit:
        last = items[-1]
        value = {"created_at": last.created_at, "updated_at": last.updated_at,
                 "last_progress_at": last.last_progress_at}[column]
        next_cursor = encode_cursor(sort, value, last.saga_id)
    return Page(items, next_cursor)


async def matching_ids(
    conn: asyncpg.Connection, f: SagaFilter, *, now: datetime, stuck_ids: Collection[UUID],
    limit: int,
) -> list[UUID]:
    """Ids of up to ``limit`` sagas matching ``f``, oldest first."""
    w = _where(f, now, stuck_ids)
    w.args.append(limit)
    rows = await conn.fetch(
        f"SELECT id FROM sagas {w.sql()} "  # noqa: S608 - fixed fragments only
        f"ORDER BY created_at, id LIMIT ${len(w.args)}",
        *w.args,
    )
    return [r["id"] for r in rows]


async def children_of(conn: asyncpg.Connection, saga_id: UUID) -> list[ChildOut]:
    """The child sagas ``saga_id`` started, oldest first."""
    from coordinator.engine import Status

    return [ChildOut(saga_id=i, saga_type=t, status=Status(s), node=n, created_at=c)
            for i, t, s, n, c in await list_children(conn, saga_id)]
