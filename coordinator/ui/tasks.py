"""The UI's inbox: "My tasks" and "My groups' queue" (overdue first), one task with the
form generated from its JSON Schema, and claim, unclaim, complete, reassign, delegate and
comment.

Actions go through the same store call as the JSON API, as the signed-in person with their
groups; the engine decides who may, and its refusal is shown as it gave it. A form that does
not validate comes back (422) with each field's error beside the field and the values kept.
Every action checks the CSRF token and is audited like the API's.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import ValidationError

from coordinator.api.auth import Principal, Role
from coordinator.api.errors import ApiError
from coordinator.api.models import TaskDetail, task_detail, task_summary
from coordinator.api.routes_tasks import task_page, validate_form
from coordinator.engine.decision import InvalidInput, TaskRefused
from coordinator.engine.events import TaskAction
from coordinator.store.task_queries import TaskFilter
from coordinator.ui.session import check_csrf
from coordinator.ui.task_form import field_errors, fields_of, read_form
from coordinator.ui.web import UiError, api_context, form_of, page, redirect, session_of, signed_in

__all__ = ["inbox_count", "router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter()

#: The two views of the inbox: the tasks I hold (or delegated), and those I may claim.
VIEWS = {"mine": ("mine", "My tasks"), "queue": ("available", "My groups' queue")}
PAGE = 50
#: GETs that are not pages with the navigation: the saga page's poll and trace fragment.
_NO_NAV = ("/live", "/trace")
_ACTIONS = frozenset(a.value for a in TaskAction)


def _filter(me: Principal, scope: Any, now: datetime) -> TaskFilter:
    return TaskFilter(user=me.name, groups=sorted(me.groups), scope=scope, now=now)


async def inbox_count(request: Request) -> None:
    """Keep the signed-in person's count of open tasks for the navigation (GET pages)."""
    principal = session_of(request).principal
    if request.method != "GET" or principal is None or request.url.path.endswith(_NO_NAV):
        return
    ctx = api_context(request)
    counts = await ctx.store.count_tasks(_filter(principal, "inbox", ctx.now()))
    request.state.open_tasks = counts["total"]


@router.get("/tasks", include_in_schema=False)
async def inbox(request: Request, view: Annotated[str, Query(max_length=10)] = "mine",
                cursor: Annotated[str | None, Query(max_length=500)] = None) -> Response:
    me = signed_in(request)
    if view not in VIEWS:
        raise UiError(404, f"no inbox view {view[:20]!r} (mine, queue)")
    ctx = api_context(request)
    now = ctx.now()
    try:
        items, nxt = await task_page(ctx, _filter(me, VIEWS[view][0], now), PAGE, cursor)
    except ApiError:
        raise UiError(400, "invalid page link: start again from the first page") from None
    counts = {name: (await ctx.store.count_tasks(_filter(me, scope, now)))["total"]
              for name, (scope, _) in VIEWS.items()}
    return page(request, "tasks.html", me=me, view=view, views=VIEWS, counts=counts,
                tasks=[task_summary(r, now) for r in items], next_cursor=nxt)


async def _task(request: Request, task_id: str) -> TaskDetail:
    ctx = api_context(request)
    row = await ctx.store.get_task(task_id)
    if row is None:
        raise UiError(404, f"no task {task_id[:80]!r}")
    return task_detail(row, ctx.now())


def _task_page(request: Request, me: Principal, task: TaskDetail, status: int = 200,
               values: dict[str, Any] | None = None, errors: dict[str, str] | None = None
               ) -> Response:
    data = values if values is not None else (task.proposal or {})
    holds = task.state == "open" and (task.assignee == me.name or me.role is Role.ADMIN)
    offered = me.name in task.candidate_users or bool(me.groups & set(task.candidate_groups))
    return page(request, "task.html", status=status, me=me, t=task,
                fields=fields_of(task.form_schema, data, errors),
                form_error=(errors or {}).get("", ""), holds=holds,
                may_claim=task.state == "open" and task.assignee is None
                and (offered or me.role is Role.ADMIN)
                and me.name not in task.excluded_users)


@router.get("/tasks/{task_id}", include_in_schema=False)
async def task(request: Request, task_id: str) -> Response:
    me = signed_in(request)
    return _task_page(request, me, await _task(request, task_id))


@router.post("/tasks/{task_id}/{action}", include_in_schema=False)
async def act(request: Request, task_id: str, action: str) -> Response:
    form = await form_of(request)
    check_csrf(request, session_of(request), form)
    me = signed_in(request)
    if action not in _ACTIONS:
        raise UiError(404, f"unknown task action {action[:40]!r}")
    current = await _task(request, task_id)
    fields: dict[str, Any] = {}
    if action == "complete":
        data, typed, errors = read_form(current.form_schema, form)
        try:
            await validate_form(api_context(request), current, data)
        except ValidationError as exc:
            errors = field_errors(exc) | errors
        if errors:
            return _task_page(request, me, current, 422, typed, errors)
        fields["data"] = data
    elif action in ("reassign", "delegate"):
        fields["to_user"] = form.get("to_user", "").strip()[:200] or None
        fields["return_to_owner"] = action == "delegate" and "return_to_owner" in form
    elif action == "comment":
        fields["comment"] = form.get("text", "").replace("\x00", "")[:2000]
    session = session_of(request)
    try:
        result = await api_context(request).store.act_on_task(
            task_id, action, me.name, groups=sorted(me.groups), admin=me.role is Role.ADMIN,
            **fields)
    except TaskRefused as exc:
        session.set_flash("error", f"{action} refused: {exc}")
        return redirect(request, f"/ui/tasks/{quote(task_id, safe='')}")
    except InvalidInput as exc:
        return _task_page(request, me, current, 422, fields.get("data"), {"": str(exc)})
    audit.info("task %s id=%s saga=%s by=%s (ui)", action, task_id, result.saga_id, me.name)
    session.set_flash("ok", f"{action} done by {me.name}; saga {result.status}.")
    return redirect(request, f"/ui/tasks/{quote(task_id, safe='')}")
