"""Reading human tasks: one task, a person's inbox, and counts.

The inbox is one indexed query: the open tasks a person holds, delegated, or may claim
(offered to them or to one of their groups, not held by anyone, not barred from them by four
eyes), most urgent first: earliest due, then highest priority, then id, with keyset paging
on that order. The WHERE clause is put together from constant fragments, one per filter
given, and every value is a bind parameter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal
from uuid import UUID

import asyncpg

from coordinator.engine import CompiledSaga, SagaState
from coordinator.engine.tree import WaitKind
from coordinator.store.tasks import TASK_COLUMNS

__all__ = ["TaskFilter", "count_tasks", "get_task", "list_tasks", "saga_tasks",
           "task_differences"]

Scope = Literal["inbox", "mine", "available", "all"]

_SELECT: Final = "SELECT " + ", ".join(TASK_COLUMNS) + " FROM human_tasks t"  # noqa: S608
_ORDER: Final = " ORDER BY coalesce(t.due_at, 'infinity'::timestamptz), t.priority DESC, t.id"
_JSON_COLUMNS: Final = frozenset({"proposal", "form_schema", "result", "comments"})

#: Visibility by scope; {u} is the person, {g} their groups.
_SCOPES: Final = {
    "mine": "(t.assignee = {u} OR t.owner = {u})",
    "available": ("(t.assignee IS NULL AND (t.candidate_users @> ARRAY[{u}]::text[] "
                  "OR t.candidate_groups && {g}::text[]) "
                  "AND NOT t.excluded_users @> ARRAY[{u}]::text[])"),
}
_SCOPES["inbox"] = f"({_SCOPES['mine']} OR {_SCOPES['available']})"


@dataclass(frozen=True, kw_only=True)
class TaskFilter:
    """What to list. ``user``/``groups``: whose inbox (``scope`` ``all``: every task, for
    admins). ``state`` ``None``: every state."""

    user: str | None = None
    groups: Sequence[str] = ()
    scope: Scope = "inbox"
    state: str | None = "open"
    overdue: bool = False
    saga_type: str | None = None
    saga_id: UUID | None = None
    min_priority: int | None = None
    assignee: str | None = None
    candidate_group: str | None = None
    text: str | None = None
    now: datetime | None = None


def _where(f: TaskFilter) -> tuple[str, list[Any]]:
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    clauses: list[str] = []
    if f.scope != "all":
        if f.user is None:
            raise ValueError("an inbox needs the person whose it is")
        scope = _SCOPES[f.scope]
        u = arg(f.user)
        # A parameter the query does not use has no type Postgres can infer: bind only used.
        g = arg(list(f.groups)) if "{g}" in scope else ""
        clauses.append(scope.format(u=u, g=g))
    if f.state is not None:
        clauses.append(f"t.state = {arg(f.state)}")
    if f.overdue:
        clauses.append(f"t.due_at < {arg(f.now)}")
    if f.saga_type is not None:
        clauses.append(f"t.saga_type = {arg(f.saga_type)}")
    if f.saga_id is not None:
        clauses.append(f"t.saga_id = {arg(f.saga_id)}")
    if f.min_priority is not None:
        clauses.append(f"t.priority >= {arg(f.min_priority)}")
    if f.assignee is not None:
        clauses.append(f"t.assignee = {arg(f.assignee)}")
    if f.candidate_group is not None:
        clauses.append(f"t.candidate_groups @> ARRAY[{arg(f.candidate_group)}]::text[]")
    if f.text:
        escaped = f.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        clauses.append(f"t.title ILIKE {arg('%' + escaped + '%')}")
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


async def list_tasks(conn: asyncpg.Connection, f: TaskFilter, *, limit: int = 50,
                     after: tuple[datetime | None, int, str] | None = None
                     ) -> list[dict[str, Any]]:
    """Up to ``limit`` tasks in inbox order, after the sort key ``after`` (due, priority, id)
    of the last task of the previous page."""
    where, args = _where(f)
    if after is not None:
        due, priority, last = after
        args += [due, priority, last]
        n = len(args)
        keyset = (f"(coalesce(t.due_at, 'infinity'::timestamptz), -t.priority, t.id) > "
                  f"(coalesce(${n - 2}::timestamptz, 'infinity'::timestamptz), -${n - 1}::int, "
                  f"${n}::text)")
        where = (where + " AND " if where else " WHERE ") + keyset
    args.append(limit)
    rows = await conn.fetch(_SELECT + where + _ORDER + f" LIMIT ${len(args)}", *args)
    return [task_row(r) for r in rows]


async def count_tasks(conn: asyncpg.Connection, f: TaskFilter) -> dict[str, int]:
    """How many tasks match ``f``: in all, overdue, held by the person and open to claim."""
    where, args = _where(f)
    now, user = f"${len(args) + 1}::timestamptz", f"${len(args) + 2}::text"
    row = await conn.fetchrow(
        f"SELECT count(*) AS total, count(*) FILTER (WHERE t.due_at < {now}) AS overdue, "  # noqa: S608
        f"count(*) FILTER (WHERE {_SCOPES['mine'].format(u=user)}) AS mine, "
        "count(*) FILTER (WHERE t.assignee IS NULL) AS unclaimed FROM human_tasks t" + where,
        *args, f.now, f.user)
    assert row is not None
    return {k: int(row[k] or 0) for k in ("total", "overdue", "mine", "unclaimed")}


async def get_task(conn: asyncpg.Connection, task_id: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(_SELECT + " WHERE t.id = $1", task_id)
    return task_row(row) if row is not None else None


async def saga_tasks(conn: asyncpg.Connection, saga_id: UUID) -> list[dict[str, Any]]:
    """Every task a saga opened, oldest first."""
    rows = await conn.fetch(_SELECT + " WHERE t.saga_id = $1 ORDER BY t.created_at, t.id",
                            saga_id)
    return [task_row(r) for r in rows]


#: Columns of a task row that its saga's snapshot also holds (the node's payload).
_PROJECTED: Final = tuple(c for c in TASK_COLUMNS if c not in (
    "saga_id", "saga_type", "node", "form_schema", "updated_at"))


async def task_differences(conn: asyncpg.Connection, saga_id: UUID, state: SagaState,
                           definition: CompiledSaga) -> list[str]:
    """Where the tasks table disagrees with the task nodes of ``state`` (verify's check that
    the projection is the snapshot's)."""
    rows = {r["id"]: r for r in await saga_tasks(conn, saga_id)}
    out: list[str] = []
    for key, step in state.steps.items():
        node = definition.node(step.node)
        if getattr(node, "kind", None) is not WaitKind.TASK or not step.payload:
            continue
        task = step.payload
        row = rows.pop(task["id"], None)
        if row is None:
            out.append(f"tasks.{task['id']} ({key}): in the snapshot, not in the tasks table")
            continue
        for column in _PROJECTED:
            stored, held = _instant(row.get(column)), _instant(task.get(column))
            if stored != held:
                out.append(f"tasks.{task['id']}.{column}: table {stored!r} != snapshot {held!r}")
    opened = {s.payload["id"] for s in state.steps.values()
              if s.payload and isinstance(s.payload.get("id"), str)}
    out += [f"tasks.{task_id}: in the tasks table, no task node in the snapshot opened it"
            for task_id, row in rows.items() if task_id not in opened and row["state"] == "open"]
    return out


def _instant(value: Any) -> Any:
    """A time as an instant, whether a column's datetime or a snapshot's ISO text."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value) if "T" in value and value[:4].isdigit() else value
        except ValueError:
            return value
    return value


def task_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as a plain dict, its JSON columns decoded."""
    out = dict(row)
    for name in _JSON_COLUMNS:
        if isinstance(out.get(name), str):
            out[name] = json.loads(out[name])
    return out
