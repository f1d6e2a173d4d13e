"""Human tasks: the inbox (list, counts), one task with its form, and what people do to a
task (claim, unclaim, complete, reassign, delegate, comment).

Any signed-in person may call these; whether they may act is the engine's decision (it
raises ``TaskRefused``, mapped to 403/404/409 by the one error handler). A completion's form
is validated here first, against the task's form model, so a 422 lists every field problem
in the shape of the API's other 422s. Every action is audited with who did it; the saga's
history records it too (actor ``task:<name>``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from coordinator.api import cursors
from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import BadRequest, Forbidden, NotFound
from coordinator.api.models import (
    TaskActionOut,
    TaskCommentRequest,
    TaskCompleteRequest,
    TaskCountsOut,
    TaskDelegateRequest,
    TaskDetail,
    TaskPageOut,
    TaskReassignRequest,
    TaskState,
    TaskSummary,
    task_detail,
    task_summary,
)
from coordinator.engine.events import TaskAction
from coordinator.engine.tree import CompiledTask
from coordinator.store.task_queries import Scope, TaskFilter

__all__ = ["router", "task_page", "validate_form"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter(responses=ERRORS, tags=["tasks"])

Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Ctx = Annotated[Context, Depends(context)]
TaskId = Annotated[str, Path(min_length=1, max_length=200, description="The task's id.")]
_Short = Annotated[str | None, Query(min_length=1, max_length=200)]
_CURSOR = "tasks"


def task_filter(
    who: Viewer, ctx: Ctx,
    scope: Annotated[Scope, Query(description=(
        "inbox: held by you or open to you to claim; mine: held or delegated by you; "
        "available: unclaimed and offered to you or your groups; all: every task (admins)"
    ))] = "inbox",
    state: Annotated[TaskState | None, Query(description="Default: open.")] = "open",
    any_state: Annotated[bool, Query(description="Every state (ignores `state`).")] = False,
    overdue: bool = False,
    saga_type: _Short = None,
    saga_id: UUID | None = None,
    min_priority: Annotated[int | None, Query(ge=0, le=100)] = None,
    assignee: _Short = None,
    candidate_group: _Short = None,
    text: Annotated[str | None, Query(min_length=1, max_length=200,
                                      description="Words in the title")] = None,
) -> TaskFilter:
    """The inbox filter, from query parameters, for the caller."""
    if scope == "all" and who.role is not Role.ADMIN:
        raise Forbidden(f"{who.name} has role {who.role.value}; scope=all needs admin",
                        details={"needed": Role.ADMIN.value, "role": who.role.value})
    for name, value in (("saga_type", saga_type), ("assignee", assignee),
                        ("candidate_group", candidate_group), ("text", text)):
        if value is not None and "\x00" in value:
            raise RequestValidationError([{"loc": ("query", name), "type": "value_error",
                                           "msg": "must not contain NUL characters"}])
    return TaskFilter(user=who.name, groups=sorted(who.groups), scope=scope,
                      state=None if any_state else state, overdue=overdue,
                      saga_type=saga_type, saga_id=saga_id, min_priority=min_priority,
                      assignee=assignee, candidate_group=candidate_group, text=text,
                      now=ctx.now())


Filter = Annotated[TaskFilter, Depends(task_filter)]


def _sort_key(row: dict[str, Any]) -> tuple[str | int, ...]:
    due = row["due_at"]
    return (due.isoformat() if due is not None else "", row["priority"], row["id"])


def _after(cursor: str | None) -> tuple[datetime | None, int, str] | None:
    if cursor is None:
        return None
    due, priority, last = cursors.decode(cursor, _CURSOR, 3)
    try:
        return (datetime.fromisoformat(due) if due else None), int(priority), str(last)
    except (TypeError, ValueError):
        raise BadRequest("invalid cursor: pass back a next_cursor unchanged",
                         code="invalid_cursor") from None


async def task_page(ctx: Context, f: TaskFilter, limit: int, cursor: str | None
                    ) -> tuple[list[dict[str, Any]], str | None]:
    """One page of tasks in inbox order and the cursor of the next (the API's and the UI's
    lists); a bad cursor is a :class:`BadRequest`."""
    rows = await ctx.store.list_tasks(f, limit=limit + 1, after=_after(cursor))
    return cursors.split_page(rows, limit, _CURSOR, _sort_key)


@router.get("/tasks", response_model=TaskPageOut, summary="Tasks: my inbox, my groups', all")
async def list_tasks(ctx: Ctx, f: Filter,
                     limit: Annotated[int, Query(ge=1, le=500)] = 50,
                     cursor: cursors.CursorParam = None) -> TaskPageOut:
    items, nxt = await task_page(ctx, f, limit, cursor)
    now = ctx.now()
    return TaskPageOut(items=[task_summary(r, now) for r in items], next_cursor=nxt)


@router.get("/tasks/counts", response_model=TaskCountsOut,
            summary="How many tasks the filters match (in all, overdue, mine, unclaimed)")
async def count_tasks(ctx: Ctx, f: Filter) -> TaskCountsOut:
    return TaskCountsOut(**await ctx.store.count_tasks(f))


async def _task(ctx: Context, task_id: str) -> TaskDetail:
    row = await ctx.store.get_task(task_id)
    if row is None:
        raise NotFound(f"no task {task_id}", code="task_not_found")
    return task_detail(row, ctx.now())


@router.get("/tasks/{task_id}", response_model=TaskDetail,
            summary="A task, with its form's JSON Schema and its comments")
async def get_task(task_id: TaskId, ctx: Ctx, _: Viewer) -> TaskDetail:
    return await _task(ctx, task_id)


@router.get("/sagas/{saga_id}/tasks", response_model=list[TaskSummary],
            summary="Every task a saga opened, oldest first")
async def saga_tasks(saga_id: Annotated[UUID, Path(description="The saga's id.")],
                     ctx: Ctx, _: Viewer) -> list[TaskSummary]:
    if await ctx.store.get_saga(saga_id) is None:
        raise NotFound(f"no saga with id {saga_id}", code="saga_not_found")
    now = ctx.now()
    return [task_summary(r, now) for r in await ctx.store.saga_tasks(saga_id)]


async def validate_form(ctx: Context, task: TaskDetail, data: dict[str, Any]) -> None:
    """Raise pydantic's ``ValidationError`` (every field problem) when ``data`` is not a
    valid form of ``task`` (the engine validates again; this gives the person each field)."""
    record = await ctx.store.get_saga(task.saga_id)
    if record is None:
        return
    step = record.state.steps.get(task.node)
    node = ctx.store.definition(record.saga_type, record.version).node(
        step.node if step is not None else task.node)
    if isinstance(node, CompiledTask):
        node.spec.form.model_validate(data)


async def _act(ctx: Context, who: Principal, task_id: str, action: TaskAction,
               **fields: Any) -> TaskActionOut:
    result = await ctx.store.act_on_task(
        task_id, action, who.name, groups=sorted(who.groups), admin=who.role is Role.ADMIN,
        **fields)
    audit.info("task %s id=%s saga=%s by=%s%s", action.value, task_id, result.saga_id,
               who.name, f" to={fields['to_user']}" if fields.get("to_user") else "")
    return TaskActionOut(task=await _task(ctx, task_id), saga_status=str(result.status))


_ACTION: dict[str, Any] = {"response_model": TaskActionOut}


@router.post("/tasks/{task_id}/claim", summary="Claim a task offered to you or your groups",
             **_ACTION)
async def claim(task_id: TaskId, ctx: Ctx, who: Viewer) -> TaskActionOut:
    return await _act(ctx, who, task_id, TaskAction.CLAIM)


@router.post("/tasks/{task_id}/unclaim", summary="Give a claimed task back to its queue",
             **_ACTION)
async def unclaim(task_id: TaskId, ctx: Ctx, who: Viewer) -> TaskActionOut:
    return await _act(ctx, who, task_id, TaskAction.UNCLAIM)


@router.post("/tasks/{task_id}/complete",
             summary="Complete a task you hold with its form (the saga moves on)", **_ACTION)
async def complete(task_id: TaskId, body: TaskCompleteRequest, ctx: Ctx,
                   who: Viewer) -> TaskActionOut:
    try:
        await validate_form(ctx, await _task(ctx, task_id), body.data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", "data", *e["loc"])}
             for e in exc.errors(include_url=False, include_context=False)]) from exc
    return await _act(ctx, who, task_id, TaskAction.COMPLETE, data=body.data)


@router.post("/tasks/{task_id}/reassign", summary="Hand a task you hold to someone else",
             **_ACTION)
async def reassign(task_id: TaskId, body: TaskReassignRequest, ctx: Ctx,
                   who: Viewer) -> TaskActionOut:
    return await _act(ctx, who, task_id, TaskAction.REASSIGN, to_user=body.to_user)


@router.post("/tasks/{task_id}/delegate",
             summary="Delegate a task you hold (optionally it comes back to you)", **_ACTION)
async def delegate(task_id: TaskId, body: TaskDelegateRequest, ctx: Ctx,
                   who: Viewer) -> TaskActionOut:
    return await _act(ctx, who, task_id, TaskAction.DELEGATE, to_user=body.to_user,
                      return_to_owner=body.return_to_owner)


@router.post("/tasks/{task_id}/comments", summary="Comment on a task", **_ACTION)
async def comment(task_id: TaskId, body: TaskCommentRequest, ctx: Ctx,
                  who: Viewer) -> TaskActionOut:
    return await _act(ctx, who, task_id, TaskAction.COMMENT, comment=body.text)
